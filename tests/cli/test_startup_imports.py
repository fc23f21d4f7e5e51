"""The command line starts light: importing it loads no database, dataframe, spreadsheet, web or solver
library, so that ``gpuplan plan --time-limit`` (which counts from the process start) spends its time
planning, most of all on a busy machine where every import takes several times longer."""

from __future__ import annotations

import subprocess
import sys

#: Libraries only some commands need: each command imports its own when it runs.
HEAVY = ("sqlalchemy", "pandas", "openpyxl", "fastapi", "uvicorn", "highspy", "ortools", "ray", "networkx")


def test_importing_the_command_line_loads_no_heavy_library() -> None:
    code = "import sys, gpuplan.cli; print(' '.join(sorted(m for m in sys.modules if '.' not in m)))"
    loaded = set(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout.split()
    )
    assert loaded.isdisjoint(HEAVY), sorted(loaded & set(HEAVY))
