"""docs/FORMATS.md against the code: every schema property has a row in its object's table and every
row names a property, the CSV columns are listed in the writers' order, and every example loads.

The schemas are the ones users see: what ``gpuplan schema`` prints, and the JSON Schemas of the
capacity files (the capacity report, the node-type catalog, the scenarios file).
"""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter

from gpuplan.cli import main
from gpuplan.models.capacity import CapacityReport, NodeTypeCatalog, ScenarioFile
from gpuplan.models.catalog import default_catalog, extend_catalog
from gpuplan.models.review import Frontier, ReplayReport, RuleCost
from gpuplan.planner.capacity.node_types import load_node_types
from gpuplan.planner.capacity.scenarios import load_scenarios
from gpuplan.planner.io.files import WORKLOAD_COLUMNS, load_cluster, load_input, load_plan
from gpuplan.planner.validation.validate import check_plan

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "FORMATS.md"

#: The ``## `` section of the doc that documents each format.
SECTIONS = {
    "cluster": "Cluster",
    "workloads": "Workloads",
    "policy": "Policy",
    "plan": "Plan",
    "capacity-gap": "Capacity gap",
    "node-types": "Node-type catalog",
    "scenarios": "Scenarios",
    "policy-cost": "Policy cost",
    "replay": "Policy replay",
    "frontier": "Fairness frontier",
}
#: File suffix each example kind is written with before it is loaded.
SUFFIX = {
    "cluster": ".yaml",
    "workloads": ".yaml",
    "workloads-csv": ".csv",
    "policy": ".yaml",
    "plan": ".json",
    "capacity-gap": ".json",
    "node-types": ".yaml",
    "scenarios": ".yaml",
    "hardware-catalog": ".yaml",
    "policy-cost": ".json",
    "replay": ".json",
    "frontier": ".json",
}

_EXAMPLE = re.compile(r"<!-- example: ([\w-]+)(?: file: (\S+))? -->\n```\w*\n(.*?)\n```\n", re.S)
_FENCE = re.compile(r"^```\w*$", re.M)
_ROW = re.compile(r"^\| `([^`]+)` \|", re.M)


@dataclass
class Section:
    """A ``##`` section of the doc and its ``###`` subsections (heading -> body)."""

    body: str
    subsections: dict[str, str] = field(default_factory=dict)


def sections(text: str) -> dict[str, Section]:
    """The doc's ``##`` sections by title, each with its ``###`` subsections by heading."""
    out: dict[str, Section] = {}
    for chunk in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = chunk.partition("\n")
        parts = re.split(r"^### ", body, flags=re.M)
        subs = {}
        for part in parts[1:]:
            heading, _, sub = part.partition("\n")
            subs[heading.strip()] = sub
        out[title.strip()] = Section(body, subs)
    return out


def rows(body: str) -> list[str]:
    """The names in the first cell of each table row (``| `name` |``), in order."""
    return _ROW.findall(body)


def schemas() -> dict[str, dict[str, Any]]:
    """``gpuplan schema``'s output, and the schemas of the capacity files."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["schema"]) == 0
    printed: dict[str, dict[str, Any]] = json.loads(buffer.getvalue())
    return {
        **printed,
        "capacity-gap": CapacityReport.model_json_schema(by_alias=True),
        "node-types": NodeTypeCatalog.model_json_schema(by_alias=True),
        "scenarios": ScenarioFile.model_json_schema(by_alias=True),
        "policy-cost": TypeAdapter(list[RuleCost]).json_schema(by_alias=True),
        "replay": ReplayReport.model_json_schema(by_alias=True),
        "frontier": Frontier.model_json_schema(by_alias=True),
    }


@dataclass
class Found:
    """The objects (title -> property names) and enums (title -> values) reachable in a schema."""

    objects: dict[str, set[str]] = field(default_factory=dict)
    enums: dict[str, set[str]] = field(default_factory=dict)


def walk(schema: dict[str, Any]) -> Found:
    """Every object and enum reachable from the root of ``schema``, following ``$ref`` into ``$defs``."""
    defs: dict[str, Any] = schema.get("$defs", {})
    found = Found()
    seen: set[str] = set()

    def visit(node: Any) -> None:
        if isinstance(node, list):
            for item in node:
                visit(item)
            return
        if not isinstance(node, dict):
            return
        ref = node.get("$ref")
        if isinstance(ref, str):
            name = ref.rsplit("/", 1)[-1]
            if name not in seen:
                seen.add(name)
                visit(defs[name])
            return
        if "properties" in node:
            found.objects.setdefault(str(node["title"]), set()).update(node["properties"])
            for sub in node["properties"].values():
                visit(sub)
        if "enum" in node and "title" in node:
            found.enums.setdefault(str(node["title"]), set()).update(str(v) for v in node["enum"])
        for key in ("items", "anyOf", "oneOf", "allOf", "prefixItems", "additionalProperties"):
            if key in node:
                visit(node[key])

    visit({k: v for k, v in schema.items() if k != "$defs"})
    return found


def table_of(doc: dict[str, Section], section: str, title: str) -> str | None:
    """The body of the ``###`` subsection whose heading names ``title`` in backticks: in ``section``
    first (where the format documents it), else anywhere (objects shared by formats are documented
    once)."""
    mark = f"`{title}`"
    for name in [section, *doc]:
        for heading, body in doc[name].subsections.items():
            if mark in heading.split("(")[0]:
                return body
    return None


def gaps(kind: str, schema: dict[str, Any], doc: dict[str, Section]) -> list[str]:
    """Sentences naming every property or value of ``schema`` the doc lacks, and every row the doc has
    that the schema does not."""
    found = walk(schema)
    section = SECTIONS[kind]
    problems = []
    for title, names in [*found.objects.items(), *found.enums.items()]:
        body = table_of(doc, section, title)
        if body is None:
            problems.append(f"{kind}: no '### `{title}`' table in docs/FORMATS.md")
            continue
        documented = set(rows(body))
        problems += [f"{kind}: {title}.{n} is not documented" for n in sorted(names - documented)]
        problems += [
            f"{kind}: {title}.{n} is documented but not in the schema" for n in sorted(documented - names)
        ]
    return problems


@pytest.fixture(scope="module")
def doc() -> dict[str, Section]:
    return sections(DOC.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def all_schemas() -> dict[str, dict[str, Any]]:
    return schemas()


def test_walk_finds_nested_properties_through_refs() -> None:
    schema = {
        "title": "Top",
        "properties": {"a": {"$ref": "#/$defs/A"}, "bs": {"type": "array", "items": {"$ref": "#/$defs/B"}}},
        "$defs": {
            "A": {"title": "A", "properties": {"x": {"anyOf": [{"$ref": "#/$defs/E"}, {"type": "null"}]}}},
            "B": {
                "title": "B",
                "properties": {"y": {}, "z": {"additionalProperties": {"$ref": "#/$defs/A"}}},
            },
            "E": {"title": "E", "enum": ["p", "q"]},
            "Unused": {"title": "Unused", "properties": {"w": {}}},
        },
    }
    found = walk(schema)
    assert found.objects == {"Top": {"a", "bs"}, "A": {"x"}, "B": {"y", "z"}}
    assert found.enums == {"E": {"p", "q"}}


def test_gaps_name_missing_and_stale_rows() -> None:
    text = "## Cluster\n\n### `Cluster` (top level)\n\n| `nodes` | list |\n| `old` | gone |\n"
    schema = {"title": "Cluster", "properties": {"nodes": {}, "extra": {}}}
    assert gaps("cluster", schema, sections(text)) == [
        "cluster: Cluster.extra is not documented",
        "cluster: Cluster.old is documented but not in the schema",
    ]


@pytest.mark.parametrize("kind", list(SECTIONS))
def test_every_schema_property_is_documented(
    kind: str, doc: dict[str, Section], all_schemas: dict[str, dict[str, Any]]
) -> None:
    assert SECTIONS[kind] in doc, f"docs/FORMATS.md has no '## {SECTIONS[kind]}' section"
    assert gaps(kind, all_schemas[kind], doc) == []


def test_schema_command_prints_the_documented_formats(all_schemas: dict[str, dict[str, Any]]) -> None:
    assert {"cluster", "workloads", "policy", "plan"} <= set(all_schemas)


def test_csv_columns_in_the_writers_order(doc: dict[str, Section]) -> None:
    assert tuple(rows(doc["Workloads"].subsections["Workloads CSV"])) == WORKLOAD_COLUMNS


def examples() -> Iterator[tuple[str, str | None, str]]:
    """(kind, bundled file or None, text) of each example block of the doc."""
    for m in _EXAMPLE.finditer(DOC.read_text(encoding="utf-8")):
        yield m.group(1), m.group(2), m.group(3) + "\n"


def test_every_code_block_is_a_checked_example() -> None:
    text = DOC.read_text(encoding="utf-8")
    blocks = len(_FENCE.findall(text)) // 2
    found = list(examples())
    assert len(found) == blocks, "a code block in docs/FORMATS.md lacks its '<!-- example: KIND -->' tag"
    assert {kind for kind, _, _ in found} == set(SUFFIX)


def test_examples_of_bundled_files_are_the_files() -> None:
    for kind, path, text in examples():
        if path is not None:
            assert text == (ROOT / path).read_text(encoding="utf-8"), f"{kind} example differs from {path}"


@pytest.fixture(scope="module")
def example_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each example written to a file of its kind."""
    folder = tmp_path_factory.mktemp("formats")
    out = {}
    for i, (kind, _, text) in enumerate(examples()):
        path = folder / f"{kind}-{i}{SUFFIX[kind]}"
        path.write_text(text, encoding="utf-8")
        out[kind] = path
    return out


def test_input_examples_load_together(example_files: dict[str, Path]) -> None:
    """The cluster, both workloads forms and the policy load and check as one input (the running work
    fits the cluster)."""
    cluster = load_cluster(example_files["cluster"])
    assert [n.name for n in cluster.nodes] == ["dgx-01", "l40s-01"]
    assert len(cluster.node_by_name["dgx-01"].gpus) == 8  # the reference topology filled them in
    for workloads in ("workloads", "workloads-csv"):
        inp = load_input(example_files["cluster"], example_files[workloads], example_files["policy"])
        assert len(inp.workloads) >= 3


def test_plan_example_is_a_valid_plan_of_the_input_examples(example_files: dict[str, Path]) -> None:
    plan = load_plan(example_files["plan"])
    inp = load_input(example_files["cluster"], example_files["workloads"], example_files["policy"])
    report = check_plan(plan, inp)
    assert report.valid, report.violations
    assert {(a.workload, a.replica) for a in plan.assignments} | {
        (u.workload, u.replica) for u in plan.unplaced
    } == {(w.id, r) for w in inp.workloads for r in range(w.replicas)}


def test_capacity_examples_load(example_files: dict[str, Path]) -> None:
    report = CapacityReport.model_validate_json(example_files["capacity-gap"].read_text(encoding="utf-8"))
    assert report.gap.purchases[0].node_type in {
        t.name for t in load_node_types(example_files["node-types"]).node_types
    }
    assert load_scenarios(example_files["scenarios"]).scenarios


def test_policy_review_examples_load(example_files: dict[str, Path]) -> None:
    costs = TypeAdapter(list[RuleCost]).validate_json(
        example_files["policy-cost"].read_text(encoding="utf-8")
    )
    assert costs and costs[0].given.solve.status
    report = ReplayReport.model_validate_json(example_files["replay"].read_text(encoding="utf-8"))
    assert report.plans and report.total.key == "total"
    frontier = Frontier.model_validate_json(example_files["frontier"].read_text(encoding="utf-8"))
    assert [p.level for p in frontier.points] == [0.0, 1.0] and frontier.points[0].current


def test_hardware_catalog_example_extends_the_catalog(example_files: dict[str, Path]) -> None:
    catalog = extend_catalog(default_catalog(), example_files["hardware-catalog"])
    assert catalog.canonical("H20") == "H20-96GB"
    assert catalog.model("H20-96GB").mig_capable
    assert catalog.topology("hgx-h20-8").gpu_model == "H20-96GB"
