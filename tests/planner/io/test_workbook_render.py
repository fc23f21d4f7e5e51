"""The workbooks as printed: each is rendered by a real LibreOffice (headless) to PDF, and the PDF's text
(``pdftotext``) is checked: the sheets in order with their page count, every header in words, no cell
too narrow for its number (``###``), the units said once, no truth value as a number.

The tests skip when LibreOffice, poppler or the Carlito font is missing (``.ci/run`` installs Debian's
through ``.ci/libreoffice.sh`` and names ``soffice`` in ``GPUPLAN_TEST_SOFFICE``). With
``GPUPLAN_WORKBOOK_PAGES=<dir>`` the bundled example's pages shown in the README are written there as
PNG (``docs/workbook-capacity.png``, ``docs/workbook-plan.png``).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest

from gpuplan.cli import main
from gpuplan.models import Plan, PlanningInput, default_catalog
from gpuplan.models.capacity import CapacityReport, NodeTypeCatalog, ScenarioResult
from gpuplan.models.catalog import data_dir
from gpuplan.planner.io.exporters.workbook import build_tables, write_xlsx
from tests.planner.io._workbook_example import planned_gap

pytestmark = pytest.mark.slow  # a LibreOffice start and conversion takes seconds

#: Every sheet in order and its printed pages: each table fits one page; its charts follow on that page
#: when they fit under it (a few rows and one chart: Pools, Teams), else on one more page.
CAPACITY_PAGES = {"Cover": 1, "Summary": 2, "Capacity gap": 2, "Scenarios": 2, "Placements": 1, "Waiting": 1,
                  "Nodes": 1, "Pools": 1, "Fragmentation": 1, "Teams": 1, "Details": 1}  # fmt: skip
PLAN_PAGES = {"Cover": 1, "Summary": 2, "Placements": 1, "Waiting": 1, "Nodes": 1, "Pools": 1,
              "Fragmentation": 1, "Teams": 1, "Details": 1}  # fmt: skip

#: Headers as the workbook prints them (a header wraps in its cell; its words are read back joined).
HEADERS = {
    "Capacity gap": ["Section", "Item", "Replicas", "Served by re-partition (replicas)",
                     "Served by purchase (replicas)", "Cannot be served (replicas)",
                     "Still waiting after purchase (replicas)", "GPUs (whole-GPU equivalents)",
                     "Nodes to buy", "Unit price, USD (EXAMPLE prices)", "GPUs to buy", "GPUs idle",
                     "GPUs charged (its share of those bought)", "Cost, USD (EXAMPLE prices)",
                     "Lead time (days)", "GPU-hours", "Detail"],
    "Scenarios": ["Scenario", "Placement check", "Replicas asked", "Waiting beyond target (replicas)",
                  "GPUs to buy", "Cost, USD (EXAMPLE prices)",
                  "Longest lead time (days)", "Verified by placement", "Compared with the baseline"],
    "Placements": ["Workload", "Replica", "Team", "Tier", "Node", "Pool", "GPU model", "MIG instance",
                   "GPU share (milli-GPU)", "CPU (millicores)", "Memory (MiB)", "GPU memory (MiB)"],
    "Waiting": ["Workload", "Reason code", "Why it waits", "Predicted start", "Wait (hours)",
                "What would let it run"],
    "Nodes": ["Node", "GPU model", "MIG layout (profile@start)", "MIG slices used", "MIG slices free",
              "GPU memory used (MiB)", "Utilisation"],
    "Pools": ["Pool", "Nodes", "GPUs", "GPUs used (equivalents)", "Utilisation"],
    "Fragmentation": ["Free whole GPUs", "Partly used GPUs", "Free MIG slices", "Free CPU (millicores)"],
    "Teams": ["Team", "Tier", "Replicas placed", "GPU-hours", "Share of GPU-hours",
              "Cost, USD (EXAMPLE prices)"],
    "Summary": ["Section", "Item", "Value", "Unit"],
    "Details": ["Section", "Item", "Value", "Unit", "Gap to the bound", "Wall time"],
}  # fmt: skip

#: What the workbook must never print: a CSV name, a unit twice, a ratio's unit after its % sign, a
#: truth value as a spreadsheet boolean.
NEVER = ("served_by_repartition", "gpu_equivalents", "solver_gap", "USD USD", "% fraction", "TRUE", "FALSE")


def soffice() -> str:
    """The LibreOffice to render with, or a skip saying how to get one."""
    found = os.environ.get("GPUPLAN_TEST_SOFFICE") or shutil.which("soffice") or shutil.which("libreoffice")
    if not found:
        pytest.skip(
            "no LibreOffice (install Debian's libreoffice-calc; .ci/run does it with .ci/libreoffice.sh)"
        )
    if not (shutil.which("pdftotext") and shutil.which("pdftoppm")):
        pytest.skip("no pdftotext/pdftoppm (install Debian's poppler-utils; .ci/libreoffice.sh does it)")
    fonts = subprocess.run(["fc-list"], capture_output=True, text=True, check=False).stdout
    if "Carlito" not in fonts:
        pytest.skip(
            "no Carlito, Calibri's metric twin: pages would not print as in Excel (install Debian's "
            "fonts-crosextra-carlito; .ci/libreoffice.sh does it)"
        )
    return found


def render(xlsx: Path) -> Path:
    """The workbook printed to PDF by LibreOffice, headless, with a profile of its own."""
    out = xlsx.parent
    profile = (out / "lo-profile").as_uri()
    subprocess.run(
        [soffice(), f"-env:UserInstallation={profile}", "--headless", "--convert-to", "pdf", "--outdir",
         str(out), str(xlsx)],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    pdf = out / f"{xlsx.stem}.pdf"
    assert pdf.exists(), f"LibreOffice wrote no {pdf.name}"
    return pdf


def pages(pdf: Path) -> list[str]:
    """The text of each page in content order (a wrapped cell's lines one after another)."""
    text = subprocess.run(
        ["pdftotext", "-raw", str(pdf), "-"], check=True, capture_output=True, text=True, timeout=120
    ).stdout
    return text.split("\f")[:-1]


def joined(page: str) -> str:
    """A page's text with each wrapped cell's lines joined (a line ending in ``-`` continues a word)."""
    return re.sub(r"\s+", " ", re.sub(r"-\n", "-", page))


def footers(texts: list[str]) -> list[tuple[str, int, int]]:
    """Each page's footer ``<sheet> - page P of N`` as (sheet, P, N)."""
    out = []
    for text in texts:
        found = re.findall(r"^(.+) - page (\d+) of (\d+)$", text, flags=re.M)
        assert len(found) == 1, text[:200]
        sheet, p, n = found[0]
        out.append((sheet, int(p), int(n)))
    return out


def check(pdf: Path, expected_pages: dict[str, int]) -> list[str]:
    """Sheets in order with their page counts, the page numbers, headers, no ``###``; the page texts."""
    texts = pages(pdf)
    feet = footers(texts)
    assert [p for _, p, _ in feet] == list(range(1, len(texts) + 1))
    assert {n for _, _, n in feet} == {len(texts)}
    assert list(dict.fromkeys(s for s, _, _ in feet)) == list(expected_pages)
    assert Counter(s for s, _, _ in feet) == Counter(expected_pages)
    first: dict[str, str] = {}
    for (sheet, _, _), text in zip(feet, texts, strict=True):
        first.setdefault(sheet, joined(text))
        assert "###" not in text, f"a cell too narrow for its number on {sheet}"
        for bad in NEVER:
            assert bad not in text, (sheet, bad)
    for sheet, headers in HEADERS.items():
        if sheet in first:
            missing = [h for h in headers if h not in first[sheet]]
            assert not missing, (sheet, missing)
    return texts


@pytest.fixture(scope="module")
def planned() -> tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog]:
    inp, plan, gap, types = planned_gap()
    report = CapacityReport(gap=gap, scenarios=(ScenarioResult(name="today", gap=gap),
                                                ScenarioResult(name="again", gap=gap)))  # fmt: skip
    return inp, plan, report, types


def test_the_capacity_workbook_prints_every_sheet_readably(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    inp, plan, report, types = planned
    path = tmp_path / "gap.xlsx"
    write_xlsx(build_tables(plan, default_catalog(), inp, report, types), path)
    texts = check(render(path), CAPACITY_PAGES)
    cover = joined(texts[0])
    assert "GPU capacity plan" in cover and "EXAMPLE prices" in cover
    assert str(plan.provenance["inputs_sha256"]) in cover
    # A pool's GPUs are a count, a placement's are indices.
    feet = footers(texts)
    pools = next(t for (on, _, _), t in zip(feet, texts, strict=True) if on == "Pools")
    placements = next(t for (on, _, _), t in zip(feet, texts, strict=True) if on == "Placements")
    assert "GPU(s)" not in pools and "GPU(s)" in placements
    # The purchase's bound and the scenarios' solves are on the last page.
    assert "capacity gap Lower bound" in joined(texts[-1]) and "scenario again" in joined(texts[-1])


def test_the_plan_workbook_prints_every_sheet_readably(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    inp, plan, _, types = planned
    path = tmp_path / "plan.xlsx"
    write_xlsx(build_tables(plan, default_catalog(), inp, None, types), path)
    texts = check(render(path), PLAN_PAGES)
    cover = joined(texts[0])
    assert "GPU placement plan" in cover and "gpuplan capacity-gap" in cover


def _page_png(pdf: Path, page: int, out: Path) -> None:
    """One page of ``pdf`` as a PNG at ``out`` (80 dpi: readable in a review)."""
    subprocess.run(
        ["pdftoppm", "-f", str(page), "-l", str(page), "-r", "80", "-png", "-singlefile", str(pdf),
         str(out.with_suffix(""))],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip


def test_the_bundled_examples_workbooks_print_readably(tmp_path: Path) -> None:
    """The example fleet's capacity workbook (``capacity-gap --xlsx``, five scenarios) and plan workbook
    (``demo``): real numbers in the millions print whole, every header in words; with
    ``GPUPLAN_WORKBOOK_PAGES`` set, the scenarios' and the plan summary's first pages are kept."""
    ex = data_dir() / "examples"
    inputs = ["--cluster", str(ex / "cluster.yaml"), "--workloads", str(ex / "workloads.yaml"),
              "--policy", str(ex / "policy.yaml"), "--now", (ex / "now.txt").read_text().strip()]  # fmt: skip
    gap = tmp_path / "gap.xlsx"
    args = ["capacity-gap", *inputs, "--scenarios", str(ex / "scenarios.yaml"), "--time-limit", "10"]
    assert main([*args, "--xlsx", str(gap)]) in (0, 1)  # 1: some demand no node type can serve
    assert main(["demo", "--out", str(tmp_path / "demo-plan.json"), "--time-limit", "5"]) == 0
    keep = os.environ.get("GPUPLAN_WORKBOOK_PAGES")
    for xlsx, sheet, name in ((gap, "Scenarios", "workbook-capacity.png"),
                              (tmp_path / "demo-plan.xlsx", "Summary", "workbook-plan.png")):  # fmt: skip
        pdf = render(xlsx)
        texts = pages(pdf)
        feet = footers(texts)
        for (on, _, _), text in zip(feet, texts, strict=True):
            assert "###" not in text, f"a cell too narrow for its number on {on}"
            assert not [bad for bad in NEVER if bad in text], on
        first = next(p for on, p, _ in feet if on == sheet)
        missing = [h for h in HEADERS[sheet] if h not in joined(texts[first - 1])]
        assert not missing, (sheet, missing)
        if keep:
            _page_png(pdf, first, Path(keep) / name)
