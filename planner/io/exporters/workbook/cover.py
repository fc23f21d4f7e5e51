"""The first and last sheets of every workbook: the Cover (what was asked, the inputs and their
SHA-256 digests, when, where the prices come from, the assumptions, what each sheet holds) and the
Details (the solves' internals: solver, bound, gap, time)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from openpyxl.styles import Alignment, Font
from openpyxl.worksheet.worksheet import Worksheet

from gpuplan.planner.io.exporters.workbook.style import LINE_HEIGHT, font, printable
from gpuplan.planner.io.exporters.workbook.tables import HOURS_PER_YEAR, Facts

#: Width of the Cover's label and text columns (characters).
LABEL_WIDTH, TEXT_WIDTH, DIGEST_WIDTH = 18, 64, 62


@dataclass(frozen=True)
class InputFile:
    """One input of the workbook: its role, its name and the SHA-256 of its bytes."""

    role: str
    name: str
    sha256: str


@dataclass(frozen=True)
class About:
    """What the Cover says was asked, of which inputs; ``made`` defaults to the time of writing."""

    asked: str = ""
    inputs: tuple[InputFile, ...] = ()
    made: datetime | None = None


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file's bytes, in hex."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def about_files(asked: str, files: dict[str, str | None]) -> About:
    """An :class:`About` of the input files given (role -> path; ``None`` for one not given)."""
    inputs = tuple(InputFile(role, path, sha256_of(Path(path))) for role, path in files.items() if path)
    return About(asked=asked, inputs=inputs)


def _assumptions(facts: Facts) -> list[str]:
    out = []
    if facts.has_gap:
        out += [
            "The capacity gap is the demand of every waiting replica without a predicted start within its "
            "tier's target wait.",
            "It is served first by re-partitioning idle MIG instances and changing the sharing mode of "
            "drained nodes, then by purchases; a workload keeps its GPU class unless the run allowed other "
            "models (then its class moves are listed).",
            "Each purchase is checked by placing the demand on the bought nodes ('Verified by placement'); "
            "a purchase not verified leaves the replicas it could not place out of its cost.",
        ]
    if facts.amortisation_years is not None:
        out.append(
            f"Showback: GPU-hours over each workload's expected duration, else {facts.period_h:g} hours; a "
            f"GPU-hour costs the node type's price / its GPUs / ({facts.amortisation_years:g} years x "
            f"{HOURS_PER_YEAR:,} hours), the cheapest node type of each GPU model."
        )
    if facts.team_view:
        out.append("A team's view: placements, waits and showback hold only its workloads; the fleet sheets "
                   "hold the whole fleet.")  # fmt: skip
    out.append("Solver internals (bounds, gaps, wall times, passes cut short by the time limit) are on the "
               "Details sheet.")  # fmt: skip
    return out


def write_cover(ws: Worksheet, title: str, facts: Facts, about: About, sheets: dict[str, str]) -> None:
    """The Cover: a title, label and text rows, the inputs as a small table, the assumptions and what
    each of the workbook's ``sheets`` holds; printable."""
    made = (about.made or datetime.now(UTC)).astimezone(UTC)
    ws.column_dimensions["A"].width = LABEL_WIDTH
    ws.column_dimensions["B"].width = TEXT_WIDTH
    ws.column_dimensions["C"].width = DIGEST_WIDTH
    ws["A1"] = title
    ws["A1"].font = font(bold=True, size=16)
    ws.row_dimensions[1].height = 24
    prices = facts.price_source or "no prices in this workbook"
    rows: list[tuple[str, str]] = [
        ("What was asked", about.asked or ("a capacity gap of the plan" if facts.has_gap else "a plan")),
        ("Made", made.strftime("%Y-%m-%d %H:%M UTC")),
        ("Plan time", facts.plan_time or "not recorded"),
        ("Prices", prices),
    ]
    if facts.currency:
        rows.append(("Currency", facts.currency))
    if not facts.has_gap:
        rows.append(
            (
                "Capacity gap",
                "none in this workbook: run `gpuplan capacity-gap --cluster C --workloads W --xlsx F`, or "
                "`gpuplan export ... --gap gap.json` with its --out file",
            )
        )
    r = 3
    wrap = Alignment(wrap_text=True, vertical="top")
    for label, text in rows:
        r = _line(ws, r, label, text, wrap)
        if label == "Prices" and facts.example_prices:
            ws.cell(row=r - 1, column=2).font = font(bold=True, color="C00000")
    r += 1
    ws.cell(row=r, column=1, value="Inputs").font = font(bold=True)
    ws.cell(row=r, column=2, value="File").font = font(bold=True)
    ws.cell(row=r, column=3, value="SHA-256").font = font(bold=True)
    r += 1
    inputs = list(about.inputs)
    if facts.inputs_sha256:
        inputs.append(InputFile("planning inputs", "cluster, workloads and policy as planned (digest)",
                                facts.inputs_sha256))  # fmt: skip
    for f in inputs:
        ws.cell(row=r, column=1, value=f.role).alignment = wrap
        ws.cell(row=r, column=2, value=f.name).alignment = wrap
        ws.cell(row=r, column=3, value=f.sha256).font = Font(name="Courier New", size=9)
        r += 1
    r += 1
    for i, text in enumerate(_assumptions(facts)):
        r = _line(ws, r, "Assumptions" if i == 0 else "", f"- {text}", wrap)
    r += 1
    for i, (sheet, what) in enumerate(sheets.items()):
        r = _line(ws, r, "Sheets" if i == 0 else "", f"{sheet}: {what}", wrap)
    printable(ws, title_row=False)


def _line(ws: Worksheet, row: int, label: str, text: str, wrap: Alignment) -> int:
    """One label and its text (wrapped over the text and digest columns); the next row."""
    ws.cell(row=row, column=1, value=label).font = font(bold=True)
    ws.cell(row=row, column=1).alignment = Alignment(vertical="top")
    cell = ws.cell(row=row, column=2, value=text)
    cell.data_type = "s"
    cell.alignment = wrap
    ws.merge_cells(start_row=row, start_column=2, end_row=row, end_column=3)
    lines = -(-len(text) // int((TEXT_WIDTH + DIGEST_WIDTH) * 1.1))
    if lines > 1:
        ws.row_dimensions[row].height = LINE_HEIGHT * lines
    return row + 1
