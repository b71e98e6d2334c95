"""What mmengine builds from a config, in OpenMMLab's sense of "engine":
the optimizer wrapper (``amp``: AmpWhereAvailableOptimWrapper), hooks
(``hooks``) and the CPU data-parallel model wrapper (``distributed``)."""
