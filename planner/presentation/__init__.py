"""What people and monitors read of a plan: the terminal summary (``summary``), the progress lines of a
solve (``progress``) and the fleet figures per pool, tier and team (``fleet_metrics``: the API's
``/metrics`` gauges and ``gpuplan history show``). Shared by the command line and the API, above every
stage of the planner whose results it shows."""
