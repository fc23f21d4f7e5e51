"""Spreadsheet exports: the workbook's sheets, headers, charts and formats, and the same numbers read back."""

from __future__ import annotations

import csv
import hashlib
import io
import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from openpyxl import load_workbook

from gpuplan.cli import main
from gpuplan.models import Plan, PlanningInput, default_catalog
from gpuplan.models.capacity import CapacityReport, NodeTypeCatalog, ScenarioResult
from gpuplan.planner.capacity.gap import capacity_gap
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.capacity.options import GapOptions
from gpuplan.planner.io.exporters.workbook import (
    EMPTY_HINTS,
    SHEETS,
    build_tables,
    gpu_hour_rates,
    write_csv,
    write_xlsx,
)
from gpuplan.planner.io.exporters.workbook.style import MONEY_FORMAT, PERCENT_FORMAT, shown
from gpuplan.planner.io.files import write_json
from gpuplan.planner.planning import make_plan
from tests.planner.io._workbook_example import CLUSTER, NOW, WORKLOADS, planned_gap


@pytest.fixture(scope="module")
def planned() -> tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog]:
    inp, plan, gap, types = planned_gap()
    # The gap records the inputs it was computed for: those of the plan.
    assert gap.inputs_sha256 == plan.provenance["inputs_sha256"]
    report = CapacityReport(
        gap=gap,
        scenarios=(
            ScenarioResult(name="today", gap=gap),
            ScenarioResult(name="double", gap=gap.model_copy(update={"gpus_added": 2 * gap.gpus_added})),
        ),
    )
    return inp, plan, report, types


def _tables(planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog]) -> dict[str, pd.DataFrame]:
    inp, plan, report, types = planned
    return build_tables(plan, default_catalog(), inp, report, types)


def _empty(value: Any) -> bool:
    return value == "" if isinstance(value, str) else value is None or bool(pd.isna(value))


def _same(written: pd.DataFrame, read: pd.DataFrame) -> None:
    """Equal cell by cell (an empty string and a missing value both read back as missing)."""
    assert list(read.columns) == list(written.columns)
    assert len(read) == len(written)
    for col in written.columns:
        for a, b in zip(written[col].tolist(), read[col].tolist(), strict=True):
            empty_a, empty_b = _empty(a), _empty(b)
            if empty_a or empty_b:
                assert empty_a and empty_b, (col, a, b)
            elif isinstance(a, int | float) and not isinstance(a, bool):
                assert float(b) == pytest.approx(float(a), rel=1e-9, abs=1e-9), (col, a, b)
            else:
                assert str(a) == str(b), (col, a, b)


def _read_back(path: Path, tables: dict[str, pd.DataFrame]) -> dict[str, pd.DataFrame]:
    """Each table's sheet read back with pandas, under the table's column names."""
    book = pd.read_excel(path, sheet_name=None)
    out = {}
    for name, frame in tables.items():
        title = TITLE.get(name, name)
        if title in book:
            read = book[title]
            read.columns = list(shown(name, frame).source)
            out[name] = read
    return out


#: The capacity workbook's sheets, in order.
CAPACITY_BOOK = ["Cover", "Summary", "Capacity gap", "Scenarios", "Placements", "Waiting", "Nodes", "Pools",
                 "Fragmentation", "Teams", "Details"]  # fmt: skip
#: The sheet of each table in the workbook.
TITLE = {"CapacityGap": "Capacity gap"}


def test_workbook_sheets_headers_charts_and_formats(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    tables = _tables(planned)
    path = tmp_path / "out.xlsx"
    write_xlsx(tables, path)
    wb = load_workbook(path)
    assert wb.sheetnames == CAPACITY_BOOK
    for name in [n for n in SHEETS if n != "Summary"]:
        ws = wb[TITLE.get(name, name)]
        headers = [c.value for c in ws[1]]
        # Human headers, never the CSV's snake_case names.
        assert not [h for h in headers if "_" in str(h)], (name, headers)
        assert all(c.font.b for c in ws[1]), name
        assert ws.freeze_panes == "A2" and ws.print_title_rows == "$1:$1"
        assert ws.page_setup.orientation == "landscape" and ws.page_setup.fitToWidth == 1
        assert ws.page_setup.fitToHeight == 0  # as many pages down as needed: readable, not shrunk
    assert [c.value for c in wb["Capacity gap"][1]][:4] == [
        "Section", "Item", "Replicas", "Served by re-partition (replicas)"
    ]  # fmt: skip
    charts = {name: len(wb[name]._charts) for name in CAPACITY_BOOK}
    assert charts == {
        "Cover": 0,
        "Summary": 1,
        "Capacity gap": 2,
        "Scenarios": 2,
        "Placements": 0,
        "Waiting": 0,
        "Nodes": 0,
        "Pools": 1,
        "Fragmentation": 0,
        "Teams": 1,
        "Details": 0,
    }
    for ws in wb.worksheets:
        for chart in ws._charts:
            assert (
                chart.title is not None and chart.x_axis.title is not None and chart.y_axis.title is not None
            )
    pools = [c.value for c in wb["Pools"][1]]
    assert wb["Pools"].cell(row=2, column=pools.index("Utilisation") + 1).number_format == PERCENT_FORMAT
    # The currency is said once, in the header; the cells hold plain money.
    gap = [c.value for c in wb["Capacity gap"][1]]
    assert "Cost, USD (EXAMPLE prices)" in gap
    assert wb["Capacity gap"].cell(
        row=2, column=gap.index("Cost, USD (EXAMPLE prices)") + 1
    ).number_format == (MONEY_FORMAT)
    teams = [c.value for c in wb["Teams"][1]]
    assert "Cost, USD (EXAMPLE prices)" in teams
    assert (
        wb["Teams"].cell(row=2, column=teams.index("Share of GPU-hours") + 1).number_format == PERCENT_FORMAT
    )
    # Truth values in words, solver internals on the Details sheet only.
    scen = [c.value for c in wb["Scenarios"][1]]
    verified = scen.index("Verified by placement")
    assert {r[verified] for r in wb["Scenarios"].iter_rows(min_row=2, values_only=True)} <= {"yes", "no"}
    assert "Lower bound, USD (EXAMPLE prices)" not in scen and "Wall time (s)" not in scen
    details = {(r[0], r[1]) for r in wb["Details"].iter_rows(min_row=2, values_only=True)}
    assert {
        ("plan", "Solver"),
        ("capacity gap", "Lower bound"),
        ("scenario double", "Wall time"),
    } <= details


def test_summary_formats_each_row_by_its_unit_with_totals(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    inp, plan, report, _ = planned
    write_xlsx(_tables(planned), tmp_path / "out.xlsx")
    book = load_workbook(tmp_path / "out.xlsx")
    ws = book["Summary"]
    assert [c.value for c in ws[1]] == ["Section", "Item", "Value", "Unit"]
    cells = {(r[0].value, r[1].value): r[2] for r in ws.iter_rows(min_row=2)}
    units = {(r[0].value, r[1].value): r[3].value for r in ws.iter_rows(min_row=2)}
    fraction = cells[("fleet", "Allocated GPU fraction")]
    assert fraction.data_type == "n" and fraction.number_format == PERCENT_FORMAT
    assert units[("fleet", "Allocated GPU fraction")] is None  # the % sign says it, once
    assert fraction.value == pytest.approx(plan.metrics["allocated_gpu_fraction"])
    cost = cells[("capacity gap", "Cost")]
    # The unit column says the currency, and that the bundled catalog's prices are examples; not the cell.
    assert cost.value == pytest.approx(report.gap.cost) and cost.number_format == MONEY_FORMAT
    assert units[("capacity gap", "Cost")] == units[("showback", "Cost")] == "USD (EXAMPLE prices)"
    assert cells[("capacity gap", "Verified by placement")].value in ("yes", "no")
    # Solver internals are on the Details sheet, not in the Summary.
    assert ("plan", "Gap to the bound") not in cells and ("capacity gap", "Lower bound") not in cells
    details = {(r[0].value, r[1].value): r[2] for r in book["Details"].iter_rows(min_row=2)}
    assert details[("plan", "Gap to the bound")].number_format == PERCENT_FORMAT
    assert details[("capacity gap", "Lower bound")].value == pytest.approx(report.gap.lower_bound)
    # Counts are whole numbers (the plan's metrics hold them as floats).
    total = cells[("fleet", "GPUs total")].value
    assert total == inp.cluster.gpu_count and isinstance(total, int)
    placed = {m: c.value for (s, m), c in cells.items() if s == "replicas placed"}
    waiting = {m: c.value for (s, m), c in cells.items() if s == "replicas waiting"}
    assert placed.pop("total") == len(plan.assignments) == sum(placed.values())
    assert waiting.pop("total") == len(plan.unplaced) == sum(waiting.values())
    assert list(placed) == ["latency-sensitive", "standard", "background"]  # the policy's tier order
    assert cells[("replicas placed", "total")].font.b and cells[("replicas waiting", "total")].font.b


def test_numbers_are_numbers_and_csv_integers_are_integers(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    tables = _tables(planned)
    write_xlsx(tables, tmp_path / "out.xlsx")
    write_csv(tables, tmp_path / "csv")
    book = load_workbook(tmp_path / "out.xlsx")
    for name in SHEETS:
        frame = tables[name]
        for i, col in enumerate(shown(name, frame).source, start=1):
            numeric = pd.api.types.is_numeric_dtype(frame[col]) and not pd.api.types.is_bool_dtype(frame[col])
            for (cell,) in book[TITLE.get(name, name)].iter_rows(min_row=2, min_col=i, max_col=i):
                if numeric:
                    assert cell.value is None or cell.data_type == "n", (name, col, cell.value)
                    assert cell.value is None or cell.number_format != "General", (name, col)
                elif isinstance(cell.value, str):
                    # No number is stored as text.
                    with pytest.raises(ValueError):
                        float(cell.value)
    integer = {
        "Nodes": (
            "gpu",
            "used_slices",
            "free_slices",
            "used_milli",
            "free_milli",
            "used_gpu_memory_mib",
            "free_gpu_memory_mib",
        ),
        "CapacityGap": ("replicas", "served_by_purchase", "lead_time_days"),
        "Waiting": ("replica",),
        "Placements": ("replica", "milli", "cpu_milli", "memory_mib", "gpu_memory_mib"),
        "Scenarios": ("demand_replicas", "gpus_added"),
    }
    for name, columns in integer.items():
        rows = list(csv.DictReader(io.StringIO((tmp_path / "csv" / f"{name}.csv").read_text())))
        assert rows, name
        for col in columns:
            values = [r[col] for r in rows if r[col] != ""]
            assert values and all(v.lstrip("-").isdigit() for v in values), (name, col, values)
    summary = list(csv.DictReader(io.StringIO((tmp_path / "csv" / "Summary.csv").read_text())))
    counts = [r["value"] for r in summary if r["unit"] == "replicas"]
    assert counts and all(v.isdigit() for v in counts)


def test_waiting_in_words_with_the_best_counterfactual(tmp_path: Path) -> None:
    """Reason code and sentence, predicted start and wait, reservation and counterfactual as text."""
    cluster = {
        "nodes": [{"name": "l40s-1", "cpu_milli": 32000, "memory_mib": 262144,
                   "gpus": [{"index": 0, "model": "L40S-48GB"}, {"index": 1, "model": "L40S-48GB"}]}]
    }  # fmt: skip
    workloads = [
        {"id": "serve", "team": "search", "tier": "latency-sensitive", "gpus": 2, "duration_s": 3600},
        {"id": "batch", "team": "vision", "tier": "background", "duration_s": 3600,
         "alternatives": [{"gpus": 1}, {"gpu_milli": 500}]},
    ]  # fmt: skip
    inp = PlanningInput.model_validate({"cluster": cluster, "workloads": workloads})
    plan = make_plan(inp, now=NOW, time_limit_s=3.0, explain=True)
    (waiting,) = plan.unplaced
    assert waiting.counterfactuals and waiting.predicted_start and waiting.reserved_node
    write_xlsx(build_tables(plan, default_catalog(), inp), tmp_path / "out.xlsx")
    ws = load_workbook(tmp_path / "out.xlsx")["Waiting"]
    row = dict(zip([c.value for c in ws[1]], [c.value for c in ws[2]], strict=True))
    assert not [v for v in row.values() if isinstance(v, str) and ("{" in v or "[" in v)], row
    assert row["Reason code"] == waiting.code and row["Why it waits"] == waiting.reason
    assert row["What would let it run"].startswith(waiting.counterfactuals[0].summary)
    assert "verified by a greedy-fgd re-solve" in row["What would let it run"]
    assert row["Options found"] == len(waiting.counterfactuals)
    assert row["Reserved on"].startswith(f"{waiting.reserved_node} GPU ")
    # It starts when serve ends, an hour after the plan's time.
    assert row["Wait (hours)"] == pytest.approx(1.0)
    if len(waiting.details) > 1:
        assert row["Its alternatives"].startswith("alternative 0: ")


def test_empty_sheets_say_how_to_fill_them(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    inp, plan, _, types = planned
    tables = build_tables(plan, default_catalog(), inp, None, types)
    write_xlsx(tables, tmp_path / "out.xlsx")
    book = load_workbook(tmp_path / "out.xlsx")
    # The plan workbook has no capacity-gap sheets: its cover says how to get them.
    assert book.sheetnames == ["Cover", "Summary", "Placements", "Waiting", "Nodes", "Pools", "Fragmentation",
                               "Teams", "Details"]  # fmt: skip
    cover = " ".join(str(c.value) for row in book["Cover"].iter_rows() for c in row if c.value)
    assert "gpuplan capacity-gap" in cover and "--gap gap.json" in cover
    for name in ("CapacityGap", "Scenarios"):
        assert tables[name].empty
        assert "gpuplan capacity-gap" in EMPTY_HINTS[name]
    # The CSV of an empty sheet is its header alone.
    write_csv(tables, tmp_path / "csv")
    assert (tmp_path / "csv" / "CapacityGap.csv").read_text().count("\n") == 1


def test_workbook_values_equal_the_plan(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    inp, plan, report, _ = planned
    path = tmp_path / "out.xlsx"
    tables = _tables(planned)
    write_xlsx(tables, path)
    sheets = _read_back(path, tables)
    placements = sheets["Placements"]
    assert sorted(
        zip(placements["workload"], placements["replica"], placements["node"], strict=True)
    ) == sorted((a.workload, a.replica, a.node) for a in plan.assignments)
    frame = sheets["Summary"]
    summary = dict(zip(zip(frame["section"], frame["metric"], strict=True), frame["value"], strict=True))
    assert summary[("plan", "Status")] == plan.status.value
    assert float(summary[("fleet", "Allocated GPU fraction")]) == pytest.approx(
        plan.metrics["allocated_gpu_fraction"]
    )
    # The plan's metrics are rounded to 4 decimals.
    assert float(summary[("fleet", "GPUs allocated")]) == pytest.approx(
        placements["gpu_equivalents"].sum(), abs=1e-4
    )
    waiting = sheets["Waiting"]
    assert sorted(zip(waiting["workload"], waiting["code"], strict=True)) == sorted(
        (u.workload, u.code) for u in plan.unplaced
    )
    gpus = sheets["Nodes"][sheets["Nodes"]["level"] == "gpu"]
    assert len(gpus) == inp.cluster.gpu_count
    mig = gpus[(gpus["node"] == "a100-1") & (gpus["gpu"] == 2)].iloc[0]
    assert mig["used_slices"] + mig["free_slices"] == 8
    nodes = sheets["Nodes"][sheets["Nodes"]["level"] == "node"]
    assert nodes["gpu_equivalents_used"].sum() == pytest.approx(gpus["gpu_equivalents_used"].sum())
    pools = sheets["Pools"].set_index("pool")
    assert pools.loc["infer", "gpu_equivalents_used"] == pytest.approx(1.5)
    gap_rows = sheets["CapacityGap"]
    total = gap_rows[gap_rows["section"] == "total"].iloc[0]
    assert total["cost"] == pytest.approx(report.gap.cost) and total["gpus_added"] == report.gap.gpus_added
    assert gap_rows[gap_rows["section"] == "purchase"]["cost"].sum() == pytest.approx(report.gap.cost)
    assert list(sheets["Scenarios"]["scenario"]) == ["today", "double"]
    assert list(sheets["Scenarios"]["gpus_added"]) == [report.gap.gpus_added, 2 * report.gap.gpus_added]


def test_teams_showback(planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog]) -> None:
    inp, plan, _, types = planned
    teams = _tables(planned)["Teams"]
    assert teams["share"].sum() == pytest.approx(1.0)
    rates = gpu_hour_rates(types, default_catalog())
    # Three half-GPU replicas on two L40S GPUs fit; each runs one hour.
    assert sum(1 for a in plan.assignments if a.workload == "emb") == 3
    row = teams[teams["team"] == "search"].iloc[0]
    assert row["gpu_hours"] == pytest.approx(3 * 0.5 * 1.0)
    assert row["cost"] == pytest.approx(3 * 0.5 * rates["L40S-48GB"], abs=0.01)
    assert set(teams["team"]) <= {w.team for w in inp.workloads}


def test_read_back_and_csv_give_the_same_numbers(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    tables = _tables(planned)
    write_xlsx(tables, tmp_path / "out.xlsx")
    paths = write_csv(tables, tmp_path / "csv")
    assert [p.stem for p in paths] == list(SHEETS)
    book = _read_back(tmp_path / "out.xlsx", tables)
    for name, frame in tables.items():
        view = shown(name, frame)
        _same(view.frame.set_axis(list(view.source), axis=1), book[name])
        _same(frame, pd.read_csv(tmp_path / "csv" / f"{name}.csv"))


def test_export_command(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    _, plan, report, _ = planned
    cluster, work, plan_path, gap_path = (tmp_path / f for f in ("c.yaml", "w.yaml", "plan.json", "gap.json"))
    cluster.write_text(yaml.safe_dump(CLUSTER))
    work.write_text(yaml.safe_dump({"workloads": WORKLOADS}))
    write_json(plan_path, plan)
    write_json(gap_path, report)
    args = ["export", "--plan", str(plan_path), "--cluster", str(cluster), "--workloads", str(work)]
    assert main([*args, "--gap", str(gap_path), "--xlsx", str(tmp_path / "x.xlsx")]) == 0
    book = load_workbook(tmp_path / "x.xlsx")
    assert book.sheetnames == CAPACITY_BOOK
    cover = [str(c.value) for row in book["Cover"].iter_rows() for c in row if c.value]
    # The cover names each input file given with its SHA-256.
    assert hashlib.sha256(cluster.read_bytes()).hexdigest() in cover
    assert hashlib.sha256(gap_path.read_bytes()).hexdigest() in cover
    assert main([*args, "--csv", str(tmp_path / "csv")]) == 0
    assert sorted(p.name for p in (tmp_path / "csv").iterdir()) == sorted(f"{s}.csv" for s in SHEETS)
    # The plan alone (no inputs): placements and waiting still come out.
    assert main(["export", "--plan", str(plan_path), "--csv", str(tmp_path / "bare")]) == 0
    bare = pd.read_csv(tmp_path / "bare" / "Placements.csv")
    assert len(bare) == len(plan.assignments)
    assert main(["export", "--plan", str(plan_path), "--cluster", str(cluster), "--csv", str(tmp_path)]) == 2
    gap_path.write_text("{}")
    assert main([*args, "--gap", str(gap_path), "--csv", str(tmp_path / "c2")]) == 2


#: Names a spreadsheet would run as formulas: a link, arithmetic, a DDE command, a function, a sign.
FORMULA_NAMES = {
    "node": "=1+1",
    "link": '=HYPERLINK("http://evil.example","click")',
    "dde": "+cmd|' /C calc'!A0",
    "at": "@SUM(A1)",
    "minus": "-2+3",
}


def test_names_that_look_like_formulas_stay_text(tmp_path: Path) -> None:
    """Workload ids, node names and teams are text in the workbook and escaped in the CSV (command line)."""
    cluster = {
        "nodes": [
            {"name": FORMULA_NAMES["node"], "cpu_milli": 64000, "memory_mib": 262144,
             "gpus": [{"index": 0, "model": "L40S-48GB"}]}
        ]
    }  # fmt: skip
    workloads = [
        {"id": FORMULA_NAMES["link"], "team": FORMULA_NAMES["dde"], "gpus": 1},
        {"id": FORMULA_NAMES["at"], "team": FORMULA_NAMES["minus"], "gpus": 1},
    ]
    inp = PlanningInput.model_validate({"cluster": cluster, "workloads": workloads})
    plan = make_plan(inp, solver="first-fit", now=NOW, time_limit_s=2.0)
    assert len(plan.assignments) == 1 and len(plan.unplaced) == 1
    paths = {name: tmp_path / f"{name}.yaml" for name in ("cluster", "workloads")}
    paths["cluster"].write_text(yaml.safe_dump(cluster))
    paths["workloads"].write_text(yaml.safe_dump({"workloads": workloads}))
    write_json(tmp_path / "plan.json", plan)
    args = ["export", "--plan", str(tmp_path / "plan.json")]
    args += ["--cluster", str(paths["cluster"]), "--workloads", str(paths["workloads"])]
    assert main([*args, "--xlsx", str(tmp_path / "plan.xlsx")]) == 0
    assert main([*args, "--csv", str(tmp_path / "csv")]) == 0

    book = load_workbook(tmp_path / "plan.xlsx")
    cells = [c for ws in book.worksheets for row in ws.iter_rows() for c in row]
    assert not [c.coordinate for c in cells if c.data_type == "f"]
    texts = {c.value for c in cells if isinstance(c.value, str)}
    assert set(FORMULA_NAMES.values()) <= texts

    fields = [
        field
        for sheet in SHEETS
        for row in csv.reader(io.StringIO((tmp_path / "csv" / f"{sheet}.csv").read_text()))
        for field in row
    ]
    assert not [f for f in fields if f.startswith(("=", "+", "-", "@", "\t", "\r"))]
    assert {"'" + name for name in FORMULA_NAMES.values()} <= set(fields)


def test_export_refuses_a_gap_of_other_inputs(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A gap records the digest of its inputs; one of other inputs is refused in one line (exit 2), and a
    gap written before the digest was recorded still loads."""
    _, plan, report, _ = planned
    cluster, work, plan_path = (tmp_path / f for f in ("c.yaml", "w.yaml", "plan.json"))
    cluster.write_text(yaml.safe_dump(CLUSTER))
    work.write_text(yaml.safe_dump({"workloads": WORKLOADS}))
    write_json(plan_path, plan)
    args = ["export", "--plan", str(plan_path), "--cluster", str(cluster), "--workloads", str(work)]
    # The gap of the same fleet with one workload more.
    other = PlanningInput.model_validate(
        {"cluster": CLUSTER, "workloads": [*WORKLOADS, {"id": "extra", "gpus": 1}]}
    )
    foreign = capacity_gap(other, load_node_types(None), GapOptions(time_limit_s=3.0, now=NOW))
    assert foreign.inputs_sha256 and foreign.inputs_sha256 != plan.provenance["inputs_sha256"]
    write_json(tmp_path / "other.json", CapacityReport(gap=foreign))
    capsys.readouterr()
    assert main([*args, "--gap", str(tmp_path / "other.json"), "--xlsx", str(tmp_path / "x.xlsx")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other inputs than the plan" in err and "Traceback" not in err
    assert not (tmp_path / "x.xlsx").exists()
    # A gap file without the digest (written before it was recorded) is exported as before.
    old = report.model_dump(mode="json")
    del old["gap"]["inputs_sha256"]
    (tmp_path / "old.json").write_text(json.dumps(old))
    assert main([*args, "--gap", str(tmp_path / "old.json"), "--csv", str(tmp_path / "csv")]) == 0
