"""``python -m gpuplan``: the command line."""

from gpuplan.cli import main

raise SystemExit(main())
