"""Pod lists we have not seen: seeded variants of the shipped openb lists, built the way openb built its own.

The public openb set derives its lists from ``default`` (data/traces/alibaba-gpu-v2023/README.md, checked
against the shipped gpushare100 and multigpu50):

- ``gpushareXX``: XX% of the GPU request comes from GPU-sharing pods. GPU pods that do not share (taken
  in a seeded random order) become sharing pods (one GPU, ``gpu_milli`` drawn from the sharing pods'
  distribution) until the share is reached; below the list's own share, sharing pods become one-GPU pods.
- ``multigpuXX``: XX% of the GPU request comes from multi-GPU pods. Copies of multi-GPU pods (drawn
  from the list's own, new names) are appended until the share is reached; above it, multi-GPU pods
  are removed.
- ``gpuspecXX``: XX% of the GPU pods get a GPU-model constraint (``gpu_spec``), a model of the node list
  (weighted by its GPU count) with a node large enough for the pod, and a quarter of them a second one.
- ``cpuXXX``: XXX/10 % of the pods are CPU-only (``cpu050`` is 5.0%): CPU-only pods are removed, or
  copies of them appended.
- ``shuffle``: the rows in a seeded random order (the file order is an input order too).

Steps combine with ``+`` and apply left to right (``gpushare60+gpuspec20+shuffle``), each from its own
random stream derived from the seed, so the same spec and seed always give the same file. The output is
in the openb pod CSV format with all eleven columns. This is a test bed only: the engine is never tuned
to a list.

Run ``python -m benchmarks.variants SPEC --out FILE`` (``--help`` for the options).
"""

from __future__ import annotations

import argparse
import csv
import random
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from benchmarks.common import NODE_FILE, TRACE_DIR, pod_file

Row = dict[str, str]

#: Columns of the openb pod lists (the multigpu files have only the first five).
COLUMNS = (
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
)

#: Share of constrained pods that get a second allowed model.
TWO_MODELS = 0.25


def read_rows(path: Path) -> list[Row]:
    """The rows of an openb pod list, every column present (missing ones empty)."""
    with path.open(newline="") as f:
        return [{c: row.get(c) or "" for c in COLUMNS} for row in csv.DictReader(f)]


def write_rows(rows: Sequence[Row], path: Path) -> None:
    """Write ``rows`` as an openb pod list."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def gpu_request(row: Row) -> int:
    """The pod's GPU request in milli-GPU."""
    return int(row["num_gpu"]) * int(row["gpu_milli"] or 0)


def is_sharing(row: Row) -> bool:
    """One GPU, a share of it."""
    return int(row["num_gpu"]) == 1 and int(row["gpu_milli"]) < 1000


def is_multi(row: Row) -> bool:
    """More than one GPU."""
    return int(row["num_gpu"]) > 1


def share(rows: Sequence[Row], kind: Callable[[Row], bool]) -> float:
    """Share of the GPU request from the pods of ``kind``."""
    total = sum(gpu_request(r) for r in rows)
    return sum(gpu_request(r) for r in rows if kind(r)) / total if total else 0.0


class _Names:
    """New pod names, unique in the list."""

    def __init__(self, rows: Sequence[Row]) -> None:
        self.taken = {r["name"] for r in rows}
        self.next = 0

    def __call__(self) -> str:
        while f"openb-pod-v{self.next:05d}" in self.taken:
            self.next += 1
        name = f"openb-pod-v{self.next:05d}"
        self.taken.add(name)
        return name


def gpushare(rows: list[Row], percent: int, rng: random.Random) -> list[Row]:
    """``percent`` % of the GPU request from sharing pods (see the module docstring)."""
    target = percent / 100
    sizes = [r["gpu_milli"] for r in rows if is_sharing(r)]
    out = [dict(r) for r in rows]
    order = list(range(len(out)))
    rng.shuffle(order)
    total = sum(gpu_request(r) for r in out)
    shared = sum(gpu_request(r) for r in out if is_sharing(r))
    raise_share = shared < target * total
    for i in order:
        r = out[i]
        if (shared >= target * total) if raise_share else (shared <= target * total):
            break
        before = gpu_request(r)
        if raise_share and int(r["num_gpu"]) > 0 and not is_sharing(r):
            r.update(num_gpu="1", gpu_milli=rng.choice(sizes))
            shared += gpu_request(r)
        elif not raise_share and is_sharing(r):
            shared -= before
            r.update(gpu_milli="1000")
        total += gpu_request(r) - before
    return out


def multigpu(rows: list[Row], percent: int, rng: random.Random) -> list[Row]:
    """``percent`` % of the GPU request from multi-GPU pods (see the module docstring)."""
    target = percent / 100
    out = [dict(r) for r in rows]
    pool = [r for r in rows if is_multi(r)]
    names = _Names(out)
    total = sum(gpu_request(r) for r in out)
    multi = sum(gpu_request(r) for r in out if is_multi(r))
    while pool and multi < target * total:
        copy = dict(rng.choice(pool), name=names())
        out.append(copy)
        total += gpu_request(copy)
        multi += gpu_request(copy)
    while multi > target * total:
        i = rng.choice([i for i, r in enumerate(out) if is_multi(r)])
        total -= gpu_request(out[i])
        multi -= gpu_request(out.pop(i))
    return out


def node_models(path: Path) -> list[tuple[str, int, int, int, int]]:
    """Per GPU model of a node list: (model, GPUs, most GPUs, most CPU, most memory on one node)."""
    found: dict[str, list[int]] = {}
    with path.open(newline="") as f:
        for row in csv.DictReader(f):
            gpus = int(row["gpu"])
            if gpus and row["model"]:
                cur = found.setdefault(row["model"], [0, 0, 0, 0])
                cur[0] += gpus
                cur[1] = max(cur[1], gpus)
                cur[2] = max(cur[2], int(row["cpu_milli"]))
                cur[3] = max(cur[3], int(row["memory_mib"]))
    return [(m, *v) for m, v in sorted(found.items())]  # type: ignore[misc]


def gpuspec(rows: list[Row], percent: int, rng: random.Random) -> list[Row]:
    """``percent`` % of the GPU pods constrained to GPU models of the node list (see the module
    docstring); a model is only drawn for a pod some node of it could host."""
    models = node_models(TRACE_DIR / NODE_FILE)
    out = [dict(r) for r in rows]
    gpu_pods = [i for i, r in enumerate(out) if int(r["num_gpu"]) > 0 and not r["gpu_spec"]]
    rng.shuffle(gpu_pods)
    for i in gpu_pods[: round(percent / 100 * len(gpu_pods))]:
        r = out[i]
        need = (int(r["num_gpu"]), int(r["cpu_milli"]), int(r["memory_mib"]))
        fit = [(m, g) for m, g, *most in models if all(n <= k for n, k in zip(need, most, strict=True))]
        if not fit:
            continue
        names, weights = zip(*fit, strict=True)
        chosen = rng.choices(names, weights)
        if len(fit) > 1 and rng.random() < TWO_MODELS:
            chosen += rng.choices([n for n in names if n != chosen[0]], [w for n, w in fit if n != chosen[0]])
        r["gpu_spec"] = "|".join(chosen)
    return out


def cpu(rows: list[Row], permille: int, rng: random.Random) -> list[Row]:
    """``permille`` / 10 % of the pods CPU-only (see the module docstring)."""
    out = [dict(r) for r in rows]
    cpu_only = [r for r in rows if int(r["num_gpu"]) == 0]
    gpu_pods = len(out) - len(cpu_only)
    # c / (gpu_pods + c) = target, so c = target * gpu_pods / (1 - target).
    target = permille / 1000
    wanted = round(target * gpu_pods / (1 - target)) if target < 1 else len(cpu_only)
    names = _Names(out)
    have = len(cpu_only)
    while have < wanted and cpu_only:
        out.append(dict(rng.choice(cpu_only), name=names()))
        have += 1
    if have > wanted:
        drop = set(rng.sample([i for i, r in enumerate(out) if int(r["num_gpu"]) == 0], have - wanted))
        out = [r for i, r in enumerate(out) if i not in drop]
    return out


def shuffle(rows: list[Row], _arg: int, rng: random.Random) -> list[Row]:
    """The rows in a random order."""
    out = [dict(r) for r in rows]
    rng.shuffle(out)
    return out


STEPS: dict[str, Callable[[list[Row], int, random.Random], list[Row]]] = {
    "gpushare": gpushare,
    "multigpu": multigpu,
    "gpuspec": gpuspec,
    "cpu": cpu,
    "shuffle": shuffle,
}

_STEP = re.compile(r"(gpushare|multigpu|gpuspec|cpu)(\d+)|shuffle")


def parse(spec: str) -> list[tuple[str, int]]:
    """The steps of ``spec`` (``gpushare40+shuffle``); a bad step is a ValueError naming it."""
    out = []
    for step in spec.split("+"):
        found = _STEP.fullmatch(step)
        if found is None:
            raise ValueError(
                f"spec: unknown step '{step}' "
                "(gpushareXX, multigpuXX, gpuspecXX, cpuXXX or shuffle, joined by +)"
            )
        kind, number = found.group(1) or "shuffle", int(found.group(2) or 0)
        if number > (999 if kind == "cpu" else 100):
            raise ValueError(f"spec: '{step}' is beyond 100%")
        out.append((kind, number))
    return out


def variant(spec: str, seed: int, base: str = "default") -> list[Row]:
    """The rows of variant ``spec`` of the shipped list ``base``, the same for the same spec and seed."""
    rows = read_rows(pod_file(base))
    for k, (kind, number) in enumerate(parse(spec)):
        rows = STEPS[kind](rows, number, random.Random(f"{seed}:{k}:{kind}{number}"))
    return rows


def main(argv: Sequence[str] | None = None) -> None:
    """Command line."""
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("spec", help="e.g. gpushare40, multigpu30, gpuspec25, cpu050, gpushare60+shuffle")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--base", default="default", help="shipped list: default, gpushare100, multigpu50")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    try:
        rows = variant(args.spec, args.seed, args.base)
    except ValueError as e:
        parser.exit(2, f"{e}\n")
    write_rows(rows, args.out)
    print(f"{args.out}: {len(rows)} pods")


if __name__ == "__main__":
    main()
