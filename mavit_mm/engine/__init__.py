"""What mmengine builds from a config, in OpenMMLab's sense of "engine":
the optimizer wrapper (``amp``: AmpWhereAvailableOptimWrapper), hooks
(``hooks``), and data-parallel training without CUDA (``cpu_distributed``:
CPUSyncBatchNorm, the model wrapper and the launch side)."""
