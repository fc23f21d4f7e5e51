"""``gpuplan import …``: nvidia-smi topology and MIG tables, the Alibaba openb trace, and a Kubernetes fleet's
nodes and pods."""

from __future__ import annotations

import argparse
from pathlib import Path

import yaml

from gpuplan.cli import common
from gpuplan.models.base import InputError, did_you_mean
from gpuplan.models.catalog import default_catalog


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except FileNotFoundError:
        raise InputError(f"{path}: file not found") from None


def _known_model(name: str | None) -> None:
    """Refuse an unknown ``--model`` as the option's mistake (not the file's), naming the closest catalog
    models and how to add one."""
    from gpuplan.planner.io.importers.nvidia_smi import lookup_gpu_model

    if name is None or lookup_gpu_model(name) is not None:
        return
    known = [m.name for m in default_catalog().models]
    raise InputError(
        f"--model {name}: not a GPU model of the hardware catalog{did_you_mean(name, known)}; "
        "describe it in a YAML file and add it with --hardware-catalog FILE (see README, Hardware catalog)"
    )


def cmd_topo(args: argparse.Namespace) -> int:
    """Print (or write) a cluster node built from ``nvidia-smi topo -m`` output."""
    from gpuplan.planner.io.importers import node_from_topo

    _known_model(args.model)
    try:
        node = node_from_topo(
            _read(args.file),
            name=args.name,
            gpu_model=args.model,
            cpu_milli=args.cpu_milli,
            memory_mib=args.memory_mib,
            pool=args.pool,
        )
    except ValueError as exc:
        raise InputError(f"{args.file}: {exc}") from None
    text = yaml.safe_dump({"nodes": [node]}, sort_keys=False)
    if args.out:
        Path(args.out).write_text(text)
        print(f"node {args.name} written to {args.out}")
    else:
        print(text, end="")
    return 0


def cmd_mig(args: argparse.Namespace) -> int:
    """Compare ``nvidia-smi mig -lgipp`` output with the catalog, or read the GPU-instance layout of
    ``nvidia-smi mig -lgi`` output; exit 1 on differences."""
    from gpuplan.planner.io.importers import compare_mig_with_catalog, parse_mig_lgipp, resolve_mig_model
    from gpuplan.planner.io.importers.nvidia_smi import is_mig_lgi

    _known_model(args.model)
    text = _read(args.file)
    if is_mig_lgi(text):
        return _mig_layout(args, text)
    try:
        model = resolve_mig_model(text, args.model)
        diffs = compare_mig_with_catalog(parse_mig_lgipp(text, model=args.model), model)
    except ValueError as exc:
        raise InputError(f"{args.file}: {exc}") from None
    if not diffs:
        print(f"{args.file}: MIG profiles and placements agree with the catalog for {model}")
        return 0
    print(f"{args.file}: {len(diffs)} difference(s) from the catalog for {model}")
    for d in diffs:
        print(f"  {d}")
    return 1


def _mig_layout(args: argparse.Namespace, text: str) -> int:
    """Print the GPU-instance layout of ``mig -lgi`` output as cluster GPUs; exit 1 when the catalog's model
    does not allow it."""
    from gpuplan.planner.io.importers.nvidia_smi import layout_from_lgi, lgi_model, parse_mig_lgi

    try:
        instances = parse_mig_lgi(text)
        model = lgi_model(instances, args.model)
        layout, problems = layout_from_lgi(instances, model)
    except ValueError as exc:
        raise InputError(f"{args.file}: {exc}") from None
    gpus = [{"index": gpu, "model": model, "mig": {"instances": found}} for gpu, found in layout.items()]
    verdict = f"{len(problems)} difference(s) from the catalog" if problems else "valid in the catalog"
    print(f"{args.file}: GPU instance layout of {model} ({verdict})")
    for p in problems:
        print(f"  {p}")
    print(yaml.safe_dump({"gpus": gpus}, sort_keys=False), end="")
    return 1 if problems else 0


def cmd_openb(args: argparse.Namespace) -> int:
    """Convert the Alibaba openb node and pod lists to a cluster and a workloads CSV."""
    from gpuplan.planner.io.importers import import_openb

    try:
        summary = import_openb(Path(args.nodes), Path(args.pods), Path(args.out))
    except ValueError as exc:
        raise InputError(str(exc)) from None
    print(summary.describe())
    return 0


def cmd_kubernetes(args: argparse.Namespace) -> int:
    """Convert ``kubectl get nodes/pods -o json`` dumps to a cluster and workloads with ``running_on``.
    ``-q`` prints errors only (no summary, no warnings)."""
    from gpuplan.planner.io.files import load_policy
    from gpuplan.planner.io.importers.kubernetes import (
        MAPPING_FILE,
        load_mapping,
        load_mig_parted,
        load_pdbs,
        load_priority_classes,
        load_tier_map,
        read_state,
        write_state,
    )

    policy = load_policy(Path(args.policy) if args.policy else None)
    out = Path(args.out)
    before = load_mapping(out / MAPPING_FILE)
    state = read_state(
        Path(args.nodes),
        Path(args.pods),
        tier_map=load_tier_map(Path(args.tier_map) if args.tier_map else None),
        team_label=args.team_label,
        pod_resources=[Path(f) for f in args.pod_resources],
        tiers=policy.tiers,
        topologies=_topologies(args.topology),
        priority_classes=load_priority_classes(Path(args.priority_classes))
        if args.priority_classes
        else None,
        pdbs=load_pdbs(Path(args.pdbs)) if args.pdbs else (),
        mig_parted=load_mig_parted(Path(args.mig_parted_config)) if args.mig_parted_config else None,
        previous_mapping=(before, f"the previous import's {out / MAPPING_FILE}") if before else None,
    )
    cluster_path, workloads_path = write_state(state, out)
    if not args.quiet:
        print(state.describe())
        print(f"wrote {cluster_path} and {workloads_path}")
    return 0


def _topologies(given: list[str]) -> dict[str, str]:
    """``--topology NODE=FILE|REFERENCE`` options as node (or pattern) to file or reference name."""
    out: dict[str, str] = {}
    for text in given:
        node, sep, spec = text.partition("=")
        if not sep or not node.strip() or not spec.strip():
            raise InputError(f"--topology {text}: expected NODE=FILE or NODE=REFERENCE")
        if node.strip() in out:
            raise InputError(f"--topology {text}: node '{node.strip()}' is given twice")
        out[node.strip()] = spec.strip()
    return out


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``import topo|mig|openb|kubernetes``."""
    imp = sub.add_parser("import", help="import nvidia-smi outputs, the openb trace or a Kubernetes fleet")
    kinds = imp.add_subparsers(dest="kind", required=True)

    p = kinds.add_parser("topo", help="a cluster node from `nvidia-smi topo -m` output")
    p.add_argument("file")
    p.add_argument("--name", required=True, help="node name")
    p.add_argument("--model", required=True, help="GPU model (catalog name or alias)")
    p.add_argument("--cpu-milli", type=int, required=True)
    p.add_argument("--memory-mib", type=int, required=True)
    p.add_argument("--pool")
    p.add_argument("--out", help="write the node as cluster YAML here")
    p.set_defaults(func=cmd_topo)

    p = kinds.add_parser(
        "mig", help="check `nvidia-smi mig -lgipp` output against the catalog, or read a `mig -lgi` layout"
    )
    p.add_argument("file")
    p.add_argument("--model", help="GPU model, when the text does not tell (catalog name or alias)")
    p.set_defaults(func=cmd_mig)

    p = kinds.add_parser("openb", help="the Alibaba openb trace as cluster.yaml + workloads.csv")
    p.add_argument("--nodes", required=True)
    p.add_argument("--pods", required=True)
    p.add_argument("--out", required=True, help="output directory")
    p.set_defaults(func=cmd_openb)

    p = kinds.add_parser(
        "kubernetes", help="a Kubernetes GPU fleet (kubectl JSON) as cluster.yaml + workloads.csv"
    )
    p.add_argument("--nodes", required=True, help="output of `kubectl get nodes -o json`")
    p.add_argument("--pods", required=True, help="output of `kubectl get pods -A -o json`")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument(
        "--tier-map",
        help="YAML mapping of priorityClassName to a tier or {tier: T, preemptible: true|false} ('*': "
        "the rest), over the defaults",
    )
    p.add_argument("--team-label", help="pod label naming the team (default: the namespace)")
    p.add_argument(
        "--pod-resources",
        action="append",
        default=[],
        metavar="FILE",
        help="a node's kubelet PodResources dump (ListPodResourcesResponse JSON); repeat for more nodes",
    )
    p.add_argument(
        "--topology",
        action="append",
        default=[],
        metavar="NODE=FILE|REFERENCE",
        help="the GPU topology of a node (or of nodes matching a pattern such as 'gpu-*') the labels do "
        "not give: an `nvidia-smi topo -m` dump, or a catalog reference topology (dgx-h100, ...); repeatable",
    )
    p.add_argument("--policy", help="policy whose tiers the priority classes are mapped onto (default tiers)")
    p.add_argument(
        "--priority-classes",
        metavar="FILE",
        help="output of `kubectl get priorityclasses -o json`: classes are ranked onto the tiers by their "
        "values, whether or not a pod uses them today (a stable mapping)",
    )
    p.add_argument(
        "--pdbs",
        metavar="FILE",
        help="output of `kubectl get pdb -A -o json`: pods a PodDisruptionBudget allows no more evictions "
        "of are kept where they run (disruptible: false)",
    )
    p.add_argument(
        "--mig-parted-config",
        metavar="FILE",
        help="the GPU Operator's mig-parted ConfigMap (`kubectl get configmap -n gpu-operator "
        "default-mig-parted-config -o json`): which GPUs a node's nvidia.com/mig.config puts in MIG mode",
    )
    p.set_defaults(func=cmd_kubernetes)
