"""``python -m gpuplan.cli``: the command line (``python -m gpuplan`` is the same)."""

import sys

from gpuplan.cli import main

sys.exit(main())
