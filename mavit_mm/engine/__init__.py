"""Support for the command-line tools: config checks before a run (``preflight``),
command-line options applied to configs (``cli``), hooks (``hooks``) and reading
metrics back from mmengine's JSON logs (``json_logs``)."""
