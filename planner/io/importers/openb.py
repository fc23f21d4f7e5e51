"""Import of the Alibaba GPU cluster trace v2023 ("openb") into a gpuplan cluster and workload list.

The trace gives node and pod lists as CSV (see ``data/traces/alibaba-gpu-v2023/README.md``). Nodes
become GPUs of the catalog model their code resolves to, on NUMA node 0 without links (the trace
has no topology); pods become one-replica workloads of team ``openb`` whose tier follows their QoS
class. Times are not imported: the trace's times do not describe load (see its README).
:func:`import_openb` writes the files ``gpuplan import openb`` produces; :func:`read_cluster` and
:func:`read_workloads` return the same nodes and workloads in memory (``gpuplan simulate`` and the
benchmarks read the trace through them).
"""

from __future__ import annotations

import csv
import logging
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuplan.models import (
    BACKGROUND,
    LATENCY_SENSITIVE,
    STANDARD,
    Cluster,
    HardwareCatalog,
    Workload,
    default_catalog,
)
from gpuplan.models.hardware import MILLI_PER_GPU

log = logging.getLogger(__name__)

#: Workload CSV columns, in the order of docs/FORMATS.md.
WORKLOAD_COLUMNS: tuple[str, ...] = (
    "id", "team", "tier", "priority", "replicas", "gpus", "gpu_milli", "mig_profile", "gpu_models",
    "cpu_milli", "memory_mib", "topology", "gang", "preemptible", "queued_since", "duration_s",
    "running_on",
)  # fmt: skip

NODE_COLUMNS: tuple[str, ...] = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS: tuple[str, ...] = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")

#: Tier of each QoS class of the trace (lower-cased; no QoS column or an empty cell: standard).
QOS_TIERS: dict[str, str] = {
    "ls": LATENCY_SENSITIVE,
    "guaranteed": LATENCY_SENSITIVE,
    "burstable": STANDARD,
    "be": BACKGROUND,
    "": STANDARD,
}

TEAM = "openb"
CPU_POOL = "cpu"

_EXTRA = "\0extra"  # DictReader key of the surplus fields of a too-long row

# libyaml's emitter, when present, writes the full-trace cluster about 2.5x faster.
_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


@dataclass(frozen=True)
class OpenbSummary:
    """What an openb import wrote: node, GPU and workload counts and the total GPU request."""

    cluster_path: Path
    workloads_path: Path
    nodes: int
    gpu_nodes: int
    gpus: int
    gpus_by_model: dict[str, int]
    workloads: int
    workloads_by_kind: dict[str, int]
    multi_gpu_workloads: int
    gpu_request_milli: int

    @property
    def gpu_request(self) -> float:
        """Total GPU request in GPUs (``num_gpu * gpu_milli / 1000`` summed over pods)."""
        return self.gpu_request_milli / MILLI_PER_GPU

    def describe(self) -> str:
        """A short human-readable report of the import."""
        models = ", ".join(f"{m} {n}" for m, n in sorted(self.gpus_by_model.items(), key=lambda x: -x[1]))
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(self.workloads_by_kind.items()))
        return "\n".join(
            [
                f"cluster: {self.nodes} nodes ({self.gpu_nodes} with GPUs), {self.gpus} GPUs"
                + (f" ({models})" if models else ""),
                f"workloads: {self.workloads} ({kinds}; {self.multi_gpu_workloads} multi-GPU)",
                f"total GPU request: {self.gpu_request:,.1f} GPUs",
                f"wrote {self.cluster_path} and {self.workloads_path}",
            ]
        )


class _Rows:
    """CSV rows with error messages naming the file, the row and the column."""

    def __init__(self, path: Path, required: tuple[str, ...]) -> None:
        self.path = path
        self.required = required

    def __iter__(self) -> Iterator[tuple[int, dict[str, str]]]:
        """Yield ``(row number, row)`` (rows count from 1 after the header)."""
        try:
            with self.path.open(newline="", encoding="utf-8") as fh:
                reader = csv.DictReader(fh, restkey=_EXTRA)
                header = reader.fieldnames or []
                missing = [c for c in self.required if c not in header]
                if missing:
                    raise ValueError(
                        f"{self.path}: missing column(s) {', '.join(repr(c) for c in missing)} "
                        f"(header: {','.join(header) or 'empty'})"
                    )
                for number, row in enumerate(reader, start=1):
                    extra = row.pop(_EXTRA, None)
                    if extra is not None or None in row.values():
                        raise ValueError(
                            f"{self.path}: row {number} (line {reader.line_num}) has "
                            f"{'more' if extra is not None else 'fewer'} fields than the "
                            f"{len(header)} columns of the header"
                        )
                    yield number, {k: (v or "").strip() for k, v in row.items()}
        except (csv.Error, UnicodeDecodeError) as exc:
            raise ValueError(f"{self.path}: not a readable CSV file ({exc})") from None
        except OSError as exc:
            raise ValueError(f"{self.path}: cannot read ({exc.strerror})") from None

    def fail(self, number: int, row: dict[str, str], column: str, why: str) -> ValueError:
        """An error naming the file, the row (and its id) and the column."""
        key = row.get(self.required[0], "")
        ident = f" ('{key}')" if key else ""
        return ValueError(f"{self.path}: row {number}{ident}, column '{column}': {why}")

    def integer(self, number: int, row: dict[str, str], column: str) -> int:
        """The column as a non-negative whole number."""
        text = row.get(column, "")
        try:
            value = int(text)
        except ValueError:
            raise self.fail(number, row, column, f"'{text}' is not a whole number") from None
        if value < 0:
            raise self.fail(number, row, column, f"{value} is negative")
        return value


class _ModelCodes:
    """GPU model codes of the trace resolved to catalog names (memoised: 8,000 pods share 7 codes)."""

    def __init__(self, catalog: HardwareCatalog) -> None:
        self.catalog = catalog
        self.memo: dict[str, str] = {}

    def __call__(self, code: str) -> str | None:
        """The catalog name for ``code``, ``None`` if the catalog does not know it."""
        if code not in self.memo:
            if not self.catalog.has_model(code):
                return None
            self.memo[code] = self.catalog.canonical(code)
        return self.memo[code]


def _read_nodes(path: Path, resolve: _ModelCodes) -> list[dict[str, Any]]:
    """Cluster nodes of an openb node list."""
    rows = _Rows(path, NODE_COLUMNS)
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for number, row in rows:
        name = row["sn"]
        if not name:
            raise rows.fail(number, row, "sn", "empty node name")
        if name in seen:
            raise rows.fail(number, row, "sn", f"node '{name}' appears more than once")
        seen.add(name)
        count = rows.integer(number, row, "gpu")
        code = row["model"]
        node: dict[str, Any] = {
            "name": name,
            "pool": code if count and code else CPU_POOL,
            "cpu_milli": rows.integer(number, row, "cpu_milli"),
            "memory_mib": rows.integer(number, row, "memory_mib"),
        }
        if count:
            if not code:
                raise rows.fail(number, row, "model", f"{count} GPUs but no GPU model")
            model = resolve(code)
            if model is None:
                raise rows.fail(number, row, "model", f"unknown GPU model '{code}'")
            node["gpus"] = [{"index": i, "model": model, "numa": 0} for i in range(count)]
        nodes.append(node)
    return nodes


def _read_pods(path: Path, resolve: _ModelCodes) -> tuple[list[dict[str, Any]], Counter[str], int, int]:
    """Workload fields of an openb pod list (set fields only), counts by shape kind, multi-GPU count,
    GPU request."""
    rows = _Rows(path, POD_COLUMNS)
    out: list[dict[str, Any]] = []
    kinds: Counter[str] = Counter()
    multi = 0
    request = 0
    seen: set[str] = set()
    for number, row in rows:
        name = row["name"]
        if not name:
            raise rows.fail(number, row, "name", "empty pod name")
        if name in seen:
            raise rows.fail(number, row, "name", f"pod '{name}' appears more than once")
        seen.add(name)
        num_gpu = rows.integer(number, row, "num_gpu")
        milli = rows.integer(number, row, "gpu_milli")
        qos = row.get("qos", "")
        tier = QOS_TIERS.get(qos.lower())
        if tier is None:
            raise rows.fail(number, row, "qos", f"unknown QoS class '{qos}' (LS, Guaranteed, Burstable, BE)")
        models = []
        for code in filter(None, (c.strip() for c in row.get("gpu_spec", "").split("|"))):
            model = resolve(code)
            if model is None:
                raise rows.fail(number, row, "gpu_spec", f"unknown GPU model '{code}'")
            models.append(model)
        values: dict[str, Any] = {
            "id": name,
            "team": TEAM,
            "tier": tier,
            "cpu_milli": rows.integer(number, row, "cpu_milli"),
            "memory_mib": rows.integer(number, row, "memory_mib"),
        }
        if models:
            values["gpu_models"] = "|".join(dict.fromkeys(models))
        if num_gpu == 0:
            kinds["cpu"] += 1
        elif not 1 <= milli <= MILLI_PER_GPU:
            raise rows.fail(number, row, "gpu_milli", f"{milli} is not a share of 1-1000 milli-GPU")
        elif milli < MILLI_PER_GPU:
            if num_gpu > 1:
                raise rows.fail(
                    number,
                    row,
                    "gpu_milli",
                    f"{milli} milli-GPU on each of {num_gpu} GPUs: a fractional share is one GPU only",
                )
            values["gpu_milli"] = milli
            kinds["fraction"] += 1
            request += milli
        else:
            values["gpus"] = num_gpu
            if num_gpu > 1:
                values["topology"] = "same-node"
                multi += 1
            kinds["whole"] += 1
            request += MILLI_PER_GPU * num_gpu
        out.append(values)
    return out, kinds, multi, request


def read_cluster(nodes_csv: Path, *, catalog: HardwareCatalog | None = None) -> Cluster:
    """The nodes of an openb node list as a validated cluster, in file order.

    Raises ``ValueError`` naming the file, row and column of the first bad value.
    """
    cat = catalog or default_catalog()
    nodes = _read_nodes(Path(nodes_csv), _ModelCodes(cat))
    return Cluster.model_validate({"nodes": nodes}, context={"catalog": cat})


def read_workloads(pods_csv: Path, *, catalog: HardwareCatalog | None = None) -> tuple[Workload, ...]:
    """The pods of an openb pod list as validated one-replica workloads, in file order.

    Raises ``ValueError`` naming the file, row and column of the first bad value.
    """
    pods, _, _, _ = _read_pods(Path(pods_csv), _ModelCodes(catalog or default_catalog()))
    return tuple(Workload.model_validate(p) for p in pods)


def import_openb(
    nodes_csv: Path, pods_csv: Path, out_dir: Path, *, catalog: HardwareCatalog | None = None
) -> OpenbSummary:
    """Convert an openb node list and pod list into ``out_dir/cluster.yaml`` and ``out_dir/workloads.csv``.

    Raises ``ValueError`` naming the file, row and column of the first bad value; nothing is
    written then.
    """
    cat = catalog or default_catalog()
    resolve = _ModelCodes(cat)
    nodes = _read_nodes(Path(nodes_csv), resolve)
    pods, kinds, multi, request = _read_pods(Path(pods_csv), resolve)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    cluster_path = out / "cluster.yaml"
    workloads_path = out / "workloads.csv"
    with cluster_path.open("w", encoding="utf-8") as fh:
        yaml.dump({"nodes": nodes}, fh, Dumper=_DUMPER, sort_keys=False, default_flow_style=None)
    with workloads_path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(WORKLOAD_COLUMNS)
        writer.writerows([str(p.get(c, "")) for c in WORKLOAD_COLUMNS] for p in pods)
    by_model = Counter(g["model"] for n in nodes for g in n.get("gpus", []))
    summary = OpenbSummary(
        cluster_path=cluster_path,
        workloads_path=workloads_path,
        nodes=len(nodes),
        gpu_nodes=sum(1 for n in nodes if n.get("gpus")),
        gpus=sum(by_model.values()),
        gpus_by_model=dict(by_model),
        workloads=len(pods),
        workloads_by_kind=dict(kinds),
        multi_gpu_workloads=multi,
        gpu_request_milli=request,
    )
    log.info("openb import: %s", summary.describe().replace("\n", "; "))
    return summary
