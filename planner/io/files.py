"""Reading and writing gpuplan files, with one-line errors that name the file, the field and the reason."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, TypeVar, Union, get_args, get_origin

import yaml
from pydantic import BaseModel, ValidationError

from gpuplan.models.base import InputError, closest, did_you_mean
from gpuplan.models.catalog import default_catalog
from gpuplan.models.cluster import Cluster
from gpuplan.models.hardware import HardwareCatalog
from gpuplan.models.inputs import PlanningInput
from gpuplan.models.plan import Plan
from gpuplan.models.policy import Policy
from gpuplan.models.workload import Workload
from gpuplan.planner.validation.inputs import BadInput, checked_input

#: Column order of the workloads CSV (docs/FORMATS.md).
WORKLOAD_COLUMNS: tuple[str, ...] = (
    "id", "team", "tier", "priority", "replicas", "gpus", "gpu_milli", "gpu_memory_mib", "mig_profile",
    "gpu_models", "cpu_milli", "memory_mib", "topology", "gang", "preemptible", "queued_since", "duration_s",
    "running_on", "gpus_guessed", "namespace", "image", "owner", "labels", "scheduler_name",
    "scheduling_gates", "disruptible", "resource", "tolerations", "node_selector", "node_affinity",
)  # fmt: skip

_ID_KEYS = ("name", "id", "workload")

M = TypeVar("M", bound=BaseModel)

#: libyaml's safe loader when available (about 5x faster on fleet-sized files), else the pure one.
_YamlLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _label(raw: Any, loc: tuple[int | str, ...]) -> str:
    """Render a pydantic location, adding the id or name of list items found in ``raw``."""
    parts: list[str] = []
    node: Any = raw
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            node = node[item] if isinstance(node, list | tuple) and item < len(node) else None
            if isinstance(node, dict):
                ident = next((node[k] for k in _ID_KEYS if k in node), None)
                if ident is not None:
                    label += f" ({ident})"
            parts.append(label)
        else:
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts) or "(top level)"


def _models_in(tp: Any) -> list[Any]:
    """The types ``tp`` stands for: ``Annotated``, ``Optional`` and unions unwrapped."""
    origin = get_origin(tp)
    if origin is Annotated:
        return _models_in(get_args(tp)[0])
    if origin in (Union, UnionType):
        return [t for arg in get_args(tp) for t in _models_in(arg)]
    return [tp]


def known_fields(model: Any, loc: tuple[int | str, ...]) -> set[str]:
    """The field names (and aliases) of the schema object at ``loc`` inside ``model`` (empty when the
    location cannot be followed); a tagged union's tag in ``loc`` is skipped."""
    types = _models_in(model)
    for item in loc:
        inner: list[Any] = []
        for tp in types:
            if isinstance(item, int) and get_origin(tp) in (list, tuple):
                inner += _models_in(get_args(tp)[0])
            elif isinstance(tp, type) and issubclass(tp, BaseModel) and item in tp.model_fields:
                inner += _models_in(tp.model_fields[str(item)].annotation)
        types = inner or types  # a tag of a discriminated union names no field: stay on the union
    found: set[str] = set()
    for tp in types:
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            found.update(tp.model_fields)
            found.update(f.alias for f in tp.model_fields.values() if f.alias)
    return found


def describe(exc: ValidationError, raw: Any, model: type[BaseModel] | None = None) -> str:
    """The root error of ``exc`` as 'field: reason', plus how many more there are.

    An unknown field comes first, named with the closest fields of ``model`` at its place (``unknown field
    cpu_mili (did you mean cpu_milli?)``); a required field it misspells is the same mistake, not one more.
    """
    errors = exc.errors(include_url=False)
    unknown = [e for e in errors if e["type"] == "extra_forbidden"]
    if not unknown:
        first = errors[0]
        msg = str(first["msg"]).removeprefix("Value error, ")
        text, rest = f"{_label(raw, tuple(first['loc']))}: {msg}", len(errors) - 1
    else:
        loc = tuple(unknown[0]["loc"])
        parent, name = loc[:-1], str(loc[-1])
        missing = {
            str(e["loc"][-1]) for e in errors if e["type"] == "missing" and tuple(e["loc"][:-1]) == parent
        }
        hint = closest(name, (known_fields(model, parent) if model else set()) | missing, n=1)
        explained = {(*parent, h) for h in hint if h in missing}
        where = f"{_label(raw, parent)}: " if parent else ""
        text = f"{where}unknown field {name}{did_you_mean(name, hint)}"
        rest = sum(1 for e in errors if e is not unknown[0] and tuple(e["loc"]) not in explained)
    if rest:
        text += f" (and {rest} more error{'s' if rest > 1 else ''})"
    return text


def read_structured(path: Path) -> Any:
    """Parse a YAML or JSON file."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read ({exc.strerror})") from None
    try:
        if path.suffix.lower() == ".json":
            return json.loads(text)
        return yaml.load(text, Loader=_YamlLoader)
    except (json.JSONDecodeError, yaml.YAMLError) as exc:
        reason = str(exc).replace("\n", " ")
        raise InputError(f"{path}: not valid {path.suffix.lstrip('.').upper() or 'YAML'}: {reason}") from None


def _validate(model: type[M], raw: Any, path: Path, catalog: HardwareCatalog | None = None) -> M:
    try:
        return model.model_validate(raw, context={"catalog": catalog} if catalog else None)
    except ValidationError as exc:
        raise InputError(f"{path}: {describe(exc, raw, model)}") from None


def load_cluster(path: Path, catalog: HardwareCatalog | None = None) -> Cluster:
    """A cluster from YAML/JSON (``nodes:`` list, or a bare list of nodes)."""
    raw = read_structured(path)
    if isinstance(raw, list):
        raw = {"nodes": raw}
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping with 'nodes'")
    return _validate(Cluster, raw, path, catalog)


def _csv_rows(path: Path) -> list[dict[str, str]]:
    try:
        with path.open(newline="") as fh:
            reader = csv.DictReader(fh)
            unknown = [c for c in reader.fieldnames or () if c not in WORKLOAD_COLUMNS]
            if unknown:
                name = unknown[0]
                raise InputError(f"{path}: unknown column '{name}'{did_you_mean(name, WORKLOAD_COLUMNS)}")
            if "id" not in (reader.fieldnames or ()):
                raise InputError(f"{path}: missing column 'id'")
            return [{k: v.strip() for k, v in row.items() if k and v and v.strip()} for row in reader]
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None
    except (csv.Error, UnicodeDecodeError) as exc:
        raise InputError(f"{path}: not a readable CSV ({exc})") from None


def _raw_workloads(path: Path) -> list[Any]:
    if path.suffix.lower() == ".csv":
        rows: list[Any] = _csv_rows(path)
        return rows
    raw = read_structured(path)
    if isinstance(raw, dict) and "workloads" in raw:
        raw = raw["workloads"]
    if not isinstance(raw, list):
        raise InputError(f"{path}: expected a list of workloads (or a mapping with 'workloads')")
    return raw


def load_workloads(path: Path) -> tuple[Workload, ...]:
    """Workloads from CSV (docs/FORMATS.md columns) or YAML/JSON (with ``alternatives``)."""
    raw = _raw_workloads(path)
    out: list[Workload] = []
    for i, item in enumerate(raw):
        try:
            out.append(Workload.model_validate(item))
        except ValidationError as exc:
            where = f"row {i + 2}" if path.suffix.lower() == ".csv" else f"workloads[{i}]"
            ident = item.get("id") if isinstance(item, dict) else None
            label = f"{where} (id '{ident}')" if ident else where
            raise InputError(f"{path}: {label}: {describe(exc, item, Workload)}") from None
    return tuple(out)


def load_policy(path: Path | None) -> Policy:
    """A policy from YAML/JSON, or the default policy when ``path`` is None."""
    if path is None:
        return Policy()
    raw = read_structured(path)
    return _validate(Policy, raw or {}, path)


def load_plan(path: Path) -> Plan:
    """A plan JSON written by gpuplan (or another tool following docs/FORMATS.md)."""
    return _validate(Plan, read_structured(path), path)


def planning_input(
    cluster: Cluster,
    workloads: tuple[Workload, ...],
    policy: Policy,
    catalog: HardwareCatalog | None = None,
    source: str = "input",
) -> PlanningInput:
    """Combine the three inputs through the one input check (``validation.inputs.checked_input``:
    cross-references, then running work that over-commits a GPU or node), its error in one line that
    starts with ``source``."""
    try:
        return checked_input(cluster, workloads, policy, catalog)
    except BadInput as exc:
        raise InputError(f"{source}: {exc}") from None


def load_input(
    cluster: str | Path,
    workloads: str | Path,
    policy: str | Path | None = None,
    catalog: HardwareCatalog | None = None,
) -> PlanningInput:
    """The cluster, workloads and policy files (the default policy without one) as one checked planning
    input: every error names the file and the field, and running work that over-commits a GPU or node
    is an input error."""
    catalog = catalog or default_catalog()
    return planning_input(
        load_cluster(Path(cluster), catalog),
        load_workloads(Path(workloads)),
        load_policy(Path(policy) if policy is not None else None),
        catalog,
        source=str(workloads),
    )


def write_json(path: Path, model: BaseModel) -> None:
    """Write a model as indented JSON (aliases, no None fields)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(model.model_dump_json(indent=2, by_alias=True, exclude_none=True) + "\n")
