"""``python -m gpuplan``: the command line."""

from gpuplan.planner.cli import main

raise SystemExit(main())
