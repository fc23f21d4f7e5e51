"""Spreadsheet exports: the workbook's sheets, headers, charts and formats, and the same numbers read back."""

from __future__ import annotations

import csv
import io
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from openpyxl import load_workbook

from gpuplan.models import Plan, PlanningInput, default_catalog
from gpuplan.models.capacity import CapacityReport, NodeTypeCatalog, ScenarioResult
from gpuplan.planner.capacity import GapOptions, capacity_gap, load_node_types
from gpuplan.planner.cli import main
from gpuplan.planner.export import SHEETS, build_tables, gpu_hour_rates, write_csv, write_xlsx
from gpuplan.planner.io import write_json
from gpuplan.planner.planning import make_plan
from gpuplan.planner.validate import validate_plan

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)

CLUSTER: dict[str, Any] = {
    "nodes": [
        {"name": "a100-1", "pool": "train", "cpu_milli": 64000, "memory_mib": 524288,
         "gpus": [{"index": 0, "model": "A100-SXM4-80GB"}, {"index": 1, "model": "A100-SXM4-80GB"},
                  {"index": 2, "model": "A100-SXM4-80GB",
                   "mig": {"instances": [{"profile": "3g.40gb", "start": 0}]}}]},
        {"name": "l40s-1", "pool": "infer", "cpu_milli": 32000, "memory_mib": 262144,
         "gpus": [{"index": 0, "model": "L40S-48GB"}, {"index": 1, "model": "L40S-48GB"}]},
    ]
}  # fmt: skip

WORKLOADS: list[dict[str, Any]] = [
    {"id": "train", "team": "vision", "tier": "standard", "gpus": 2, "gpu_models": "A100-SXM4-80GB",
     "cpu_milli": 16000, "memory_mib": 65536, "duration_s": 7200},
    {"id": "nb", "team": "research", "tier": "background", "mig_profile": "3g.40gb", "cpu_milli": 2000,
     "memory_mib": 8192},
    {"id": "emb", "team": "search", "tier": "latency-sensitive", "replicas": 3, "gpu_milli": 500,
     "gpu_models": "L40S-48GB", "cpu_milli": 2000, "memory_mib": 8192, "duration_s": 3600},
    {"id": "big", "team": "vision", "tier": "standard", "gpus": 8, "topology": "nvlink", "cpu_milli": 64000,
     "memory_mib": 524288},
]  # fmt: skip


@pytest.fixture(scope="module")
def planned() -> tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog]:
    inp = PlanningInput.model_validate({"cluster": CLUSTER, "workloads": WORKLOADS})
    plan = make_plan(inp, now=NOW, time_limit_s=3.0)
    assert validate_plan(plan, inp, default_catalog()) == []
    types = load_node_types(None)
    gap = capacity_gap(inp, types, GapOptions(time_limit_s=3.0, now=NOW), baseline=plan)
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


def _same(written: pd.DataFrame, read: pd.DataFrame) -> None:
    """Equal cell by cell (an empty string and a missing value both read back as missing)."""
    assert list(read.columns) == list(written.columns)
    assert len(read) == len(written)
    for col in written.columns:
        for a, b in zip(written[col].tolist(), read[col].tolist(), strict=True):
            empty_a = a is None or a == "" or (isinstance(a, float) and math.isnan(a))
            empty_b = b is None or b == "" or (isinstance(b, float) and math.isnan(b))
            if empty_a or empty_b:
                assert empty_a and empty_b, (col, a, b)
            elif isinstance(a, int | float) and not isinstance(a, bool):
                assert float(b) == pytest.approx(float(a), rel=1e-9, abs=1e-9), (col, a, b)
            else:
                assert str(a) == str(b), (col, a, b)


def test_workbook_sheets_headers_charts_and_formats(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    tables = _tables(planned)
    path = tmp_path / "out.xlsx"
    write_xlsx(tables, path)
    wb = load_workbook(path)
    assert wb.sheetnames == list(SHEETS)
    for name in SHEETS:
        ws = wb[name]
        assert [c.value for c in ws[1]] == list(tables[name].columns)
        assert ws.freeze_panes == "A2"
        assert ws.column_dimensions["A"].width >= len(str(tables[name].columns[0]))
    assert len(wb["Pools"]._charts) == 1
    assert len(wb["Scenarios"]._charts) == 2
    pools = wb["Pools"]
    util_col = list(tables["Pools"].columns).index("utilisation") + 1
    assert pools.cell(row=2, column=util_col).number_format == "0.0%"
    cost_col = list(tables["CapacityGap"].columns).index("cost") + 1
    assert wb["CapacityGap"].cell(row=2, column=cost_col).number_format == "#,##0.00"


def test_workbook_values_equal_the_plan(
    planned: tuple[PlanningInput, Plan, CapacityReport, NodeTypeCatalog], tmp_path: Path
) -> None:
    inp, plan, report, _ = planned
    path = tmp_path / "out.xlsx"
    write_xlsx(_tables(planned), path)
    sheets = pd.read_excel(path, sheet_name=None)
    placements = sheets["Placements"]
    assert sorted(
        zip(placements["workload"], placements["replica"], placements["node"], strict=True)
    ) == sorted((a.workload, a.replica, a.node) for a in plan.assignments)
    summary = dict(zip(sheets["Summary"]["metric"], sheets["Summary"]["value"], strict=True))
    assert summary["status"] == plan.status.value
    assert float(summary["allocated_gpu_fraction"]) == pytest.approx(plan.metrics["allocated_gpu_fraction"])
    # The plan's metrics are rounded to 4 decimals.
    assert float(summary["gpus_allocated"]) == pytest.approx(placements["gpu_equivalents"].sum(), abs=1e-4)
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
    book = pd.read_excel(tmp_path / "out.xlsx", sheet_name=None)
    for name, frame in tables.items():
        _same(frame, book[name])
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
    assert load_workbook(tmp_path / "x.xlsx").sheetnames == list(SHEETS)
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
