"""``python -m gpuplan.planner.cli``: the command line."""

import sys

from gpuplan.planner.cli import main

sys.exit(main())
