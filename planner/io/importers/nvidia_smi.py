"""Importers for ``nvidia-smi`` text: ``topo -m`` matrices and MIG profile listings.

Real outputs vary by driver generation (tab- or space-separated, ``SOC`` instead of ``SYS``, NIC
rows with or without a ``NIC Legend``, optional NUMA columns, empty CPU affinity under cgroups), so
the parsers read what every generation shares and name the line when the text is not what they
expect.
"""

from __future__ import annotations

import itertools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from gpuplan.models import HardwareCatalog, MigPlacement, default_catalog
from gpuplan.models.cluster import MigInstance, mig_layout_problems
from gpuplan.models.hardware import GpuModelSpec, MigProfile

log = logging.getLogger(__name__)

_GPU_LABEL = re.compile(r"^GPU(\d+)$")
_LINK_CELL = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_CPU_LIST = re.compile(r"^\d+(-\d+)?(,\d+(-\d+)?)*$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")

#: Extra columns of ``topo -m`` that the parser reads (others, such as GPU NUMA ID, are ignored).
CPU_AFFINITY = "CPU Affinity"
NUMA_AFFINITY = "NUMA Affinity"
# Column names after the devices: the known ones first, so that a single space left by tab expansion
# between two names does not join them; unknown names end at a double blank.
_EXTRA_NAME = re.compile(r"CPU Affinity|NUMA Affinity|GPU NUMA ID|\S+(?: \S+)*")


@dataclass(frozen=True)
class TopoGpu:
    """One GPU row of a ``topo -m`` matrix.

    ``numa_source`` says where ``numa`` came from: ``printed`` (the NUMA Affinity column),
    ``cpu-affinity`` (GPUs grouped by their CPU sets) or ``default`` (nothing to go by: 0).
    """

    index: int
    cpu_affinity: str
    cpus: frozenset[int]
    numa: int
    numa_source: str


@dataclass(frozen=True)
class TopoMatrix:
    """The GPU part of a ``topo -m`` matrix: GPUs, their affinity, and the link class of every pair.

    ``links`` maps each pair ``(a, b)`` with ``a < b`` to its class as printed (``NV#``, ``PIX``,
    ``PXB``, ``PHB``, ``NODE``, ``SYS``; old ``SOC`` is normalised to ``SYS``). ``nics`` lists the
    other devices of the matrix (NICs, resolved through the ``NIC Legend``), which are not modelled.
    """

    gpus: tuple[TopoGpu, ...]
    links: Mapping[tuple[int, int], str]
    nics: tuple[str, ...]

    @property
    def gpu_indices(self) -> tuple[int, ...]:
        """GPU indices in matrix order."""
        return tuple(g.index for g in self.gpus)

    def link(self, a: int, b: int) -> str:
        """Link class between GPUs ``a`` and ``b`` (either order)."""
        return self.links[(min(a, b), max(a, b))]


@dataclass(frozen=True)
class _Row:
    line_no: int
    label: str
    cells: tuple[str, ...]
    extras: dict[str, str]


def _parse_cpus(text: str, where: str) -> frozenset[int]:
    """CPU numbers of an affinity list such as ``0-23,48-71`` (empty text = no CPUs)."""
    if not text:
        return frozenset()
    if not _CPU_LIST.match(text):
        raise ValueError(f"{where}: CPU affinity '{text}' is not a CPU list such as 0-23,48-71")
    cpus: set[int] = set()
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        cpus.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cpus)


def _header_extras(header: str, labels: Sequence[str], line_no: int) -> list[str]:
    """Names of the columns after the device columns, checking the header names the row devices.

    Device names are matched in order while skipping blanks, so a header whose separators were
    lost in copying (``GPU0GPU1GPU2…``) still reads.
    """
    pos = 0
    for label in labels:
        while pos < len(header) and header[pos].isspace():
            pos += 1
        if not header.startswith(label, pos):
            found = header[pos:].split()[0] if header[pos:].split() else "the end of the line"
            raise ValueError(
                f"line {line_no}: the header should name the devices of the rows in order; "
                f"expected '{label}', found '{found}'"
            )
        pos += len(label)
    return _EXTRA_NAME.findall(header[pos:])


def _read_rows(lines: list[str], start: int) -> tuple[list[_Row], int]:
    """The matrix rows after the header (until a blank line or the legend), and the next line index."""
    rows: list[_Row] = []
    i = start
    while i < len(lines):
        line = lines[i]
        if not line.strip() or line.lstrip().startswith("Legend"):
            break
        if line[0].isspace():
            raise ValueError(
                f"line {i + 1}: a matrix row must start with a device name, found '{line.strip()}'"
            )
        tokens = line.split()
        rows.append(_Row(i + 1, tokens[0], tuple(tokens[1:]), {}))
        i += 1
    if not rows:
        raise ValueError(f"line {start}: the header is not followed by any matrix row")
    return rows, i


def _split_row(row: _Row, n: int, extras: list[str]) -> _Row:
    """Split a row's tokens into ``n`` link cells and its extra columns.

    Blank fields vanish when columns are space-padded; only CPU Affinity is ever blank in practice
    (NUMA columns print ``N/A``), so the values are aligned to the last extra columns.
    """
    if len(row.cells) < n:
        raise ValueError(
            f"line {row.line_no}: row '{row.label}' has {len(row.cells)} entries, "
            f"expected a link class for each of the {n} devices"
        )
    cells, rest = row.cells[:n], row.cells[n:]
    if len(rest) > len(extras):
        raise ValueError(
            f"line {row.line_no}: row '{row.label}' has {len(rest)} values after the link classes "
            f"but the header names only {len(extras)} columns ({', '.join(extras) or 'none'})"
        )
    values = dict.fromkeys(extras, "")
    values.update(zip(extras[len(extras) - len(rest) :], rest, strict=True))
    return _Row(row.line_no, row.label, cells, values)


def _nic_names(lines: list[str], start: int) -> dict[str, str]:
    """``NICn`` → device name from the ``NIC Legend`` block, if any."""
    names: dict[str, str] = {}
    for line in lines[start:]:
        m = _NIC_LEGEND.match(line)
        if m:
            names[m.group(1)] = m.group(2)
    return names


def _gpu_index(label: str) -> int | None:
    """GPU index of a row label (``GPU3`` → 3), ``None`` for NICs and other devices."""
    m = _GPU_LABEL.match(label)
    return int(m.group(1)) if m else None


def _check_gpu_row(row: _Row, diagonal: int, labels: Sequence[str]) -> None:
    """Every cell of a GPU row is a link class, with ``X`` exactly on the diagonal."""
    for col, cell in enumerate(row.cells):
        if not _LINK_CELL.match(cell):
            raise ValueError(
                f"line {row.line_no}: '{cell}' in row '{row.label}', column '{labels[col]}' "
                "is not a link class (X, NV#, PIX, PXB, PHB, NODE, SYS or SOC)"
            )
        if (cell == "X") != (col == diagonal):
            raise ValueError(
                f"line {row.line_no}: row '{row.label}' has '{cell}' in column '{labels[col]}'; "
                "X must appear exactly on the diagonal"
            )


def _gpu_numa(rows: dict[int, _Row], cpus: dict[int, frozenset[int]]) -> dict[int, tuple[int, str]]:
    """NUMA node and its source per GPU: printed, else grouped by CPU affinity, else 0.

    Distinct CPU sets are numbered by their lowest CPU, the way Linux numbers NUMA nodes.
    """
    groups = sorted({c for c in cpus.values() if c}, key=min)
    derived = {c: k for k, c in enumerate(groups)}
    out: dict[int, tuple[int, str]] = {}
    for index, row in rows.items():
        printed = row.extras.get(NUMA_AFFINITY, "")
        if printed.isdigit():
            out[index] = (int(printed), "printed")
        elif cpus[index]:
            out[index] = (derived[cpus[index]], "cpu-affinity")
        else:
            out[index] = (0, "default")
    return out


def parse_topo(text: str) -> TopoMatrix:
    """Parse ``nvidia-smi topo -m`` (or the older ``topo --matrix``) output.

    Returns GPU indices, CPU and NUMA affinity, and the link class of every GPU pair; NIC rows and
    columns are left out. Raises ``ValueError`` naming the line when the text is not such a matrix.
    """
    lines = text.splitlines()
    first = next((i for i, line in enumerate(lines) if line.strip()), None)
    if first is None:
        raise ValueError("empty text: expected the output of nvidia-smi topo -m")
    header = lines[first]
    if not re.match(r"^\s+GPU0", header):
        raise ValueError(
            f"line {first + 1}: expected the header of an nvidia-smi topo -m matrix "
            f"(blank first column, then GPU0, GPU1, …), found '{header.strip()[:60]}'"
        )
    raw_rows, end = _read_rows(lines, first + 1)
    labels = [r.label for r in raw_rows]
    for k, row in enumerate(raw_rows):
        if row.label in labels[:k]:
            raise ValueError(f"line {row.line_no}: device '{row.label}' already has a row")
    extras = _header_extras(header, labels, first + 1)
    rows = [_split_row(r, len(raw_rows), extras) for r in raw_rows]
    # Column position of each GPU (the same as its row position) by GPU index.
    pos = {i: k for k, r in enumerate(rows) if (i := _gpu_index(r.label)) is not None}
    if not pos:
        raise ValueError(f"line {first + 1}: the matrix has no GPU row")
    for k in pos.values():
        _check_gpu_row(rows[k], k, labels)
    links: dict[tuple[int, int], str] = {}
    for a, b in itertools.combinations(sorted(pos), 2):
        ra, rb = rows[pos[a]], rows[pos[b]]
        ab, ba = ra.cells[pos[b]], rb.cells[pos[a]]
        if ab != ba:
            raise ValueError(
                f"lines {ra.line_no} and {rb.line_no}: GPU{a}-GPU{b} reads '{ab}' one way "
                f"and '{ba}' the other"
            )
        links[(a, b)] = "SYS" if ab == "SOC" else ab
    gpu_rows = {i: rows[k] for i, k in pos.items()}
    cpus = {i: _parse_cpus(r.extras.get(CPU_AFFINITY, ""), f"line {r.line_no}") for i, r in gpu_rows.items()}
    numa = _gpu_numa(gpu_rows, cpus)
    gpus = tuple(
        TopoGpu(
            index=i,
            cpu_affinity=r.extras.get(CPU_AFFINITY, ""),
            cpus=cpus[i],
            numa=numa[i][0],
            numa_source=numa[i][1],
        )
        for i, r in gpu_rows.items()
    )
    legend = _nic_names(lines, end)
    nics = tuple(legend.get(r.label, r.label) for r in rows if _gpu_index(r.label) is None)
    return TopoMatrix(gpus=gpus, links=links, nics=nics)


def node_from_topo(
    text: str,
    *,
    name: str,
    gpu_model: str,
    cpu_milli: int,
    memory_mib: int,
    pool: str | None = None,
    catalog: HardwareCatalog | None = None,
) -> dict[str, Any]:
    """A cluster node (the docs/FORMATS.md dict shape) built from ``topo -m`` output.

    ``gpu_model`` may be any catalog name or alias; the catalog's own name is written.
    """
    cat = catalog or default_catalog()
    model = lookup_gpu_model(gpu_model, cat)
    if model is None:
        raise ValueError(f"unknown GPU model '{gpu_model}' (not a catalog name or alias)")
    topo = parse_topo(text)
    node: dict[str, Any] = {"name": name}
    if pool is not None:
        node["pool"] = pool
    node.update(
        cpu_milli=cpu_milli,
        memory_mib=memory_mib,
        gpus=[{"index": g.index, "model": model.name, "numa": g.numa} for g in topo.gpus],
        links=[{"a": a, "b": b, "kind": kind} for (a, b), kind in sorted(topo.links.items())],
    )
    return node


# --------------------------------------------------------------------------------------------
# GPU model names


def _tokens(name: str) -> frozenset[str]:
    """Lower-case words of a product name, without vendor words (``NVIDIA A100 80GB PCIe``)."""
    words = re.split(r"[^0-9a-z]+", name.lower())
    return frozenset(w for w in words if w and w not in ("nvidia", "tesla"))


def _name_keys(spec: GpuModelSpec) -> list[frozenset[str]]:
    """Word sets naming a catalog model: its name, aliases and parenthesised alias parts."""
    keys = [_tokens(spec.name)]
    for alias in spec.aliases:
        keys.append(_tokens(alias))
        keys.extend(_tokens(part) for part in re.findall(r"\(([^)]*)\)", alias))
    return [k for k in keys if k]


def lookup_gpu_model(name: str, catalog: HardwareCatalog | None = None) -> GpuModelSpec | None:
    """The catalog model a product name refers to, or ``None`` when unknown or ambiguous.

    Exact catalog names and aliases win; otherwise names are compared as word sets, so
    ``NVIDIA A100 80GB PCIe`` finds the model ``A100-PCIE-80GB`` and ``H100 80GB HBM3`` the alias
    ``H100-SXM5-80GB (H100 80GB HBM3)``. A name whose words fit only one model (``NVIDIA A30``)
    also resolves.
    """
    cat = catalog or default_catalog()
    if cat.has_model(name.strip()):
        return cat.model(name.strip())
    words = _tokens(name)
    if not words:
        return None
    exact = {m.name: m for m in cat.models if words in _name_keys(m)}
    if len(exact) == 1:
        return next(iter(exact.values()))
    partial = {m.name: m for m in cat.models if any(words <= k for k in _name_keys(m))}
    return next(iter(partial.values())) if len(partial) == 1 else None


# --------------------------------------------------------------------------------------------
# MIG profile listings

_LGIPP = re.compile(
    r"^\s*GPU\s+(\d+)\s+Profile\s+ID\s+(\d+)\s+Placements?\s*:\s*\{([\d,\s]*)\}\s*:\s*(\d+)\s*$"
)
_LGIP_ROW = re.compile(
    r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)/(\d+)\s+([\d.]+|N/A)\s+(?:Yes|No)\b.*\|\s*$"
)
_LIST_GPU = re.compile(r"^GPU\s+\d+:\s*(.+?)\s*\(UUID:.*\)\s*$")
_LIST_MIG = re.compile(r"^\s+MIG\s+\S+\s+Device\s+\d+:\s*\(UUID:.*\)\s*$")
_TABLE_DECOR = re.compile(r"^(\+[-=+]+\+|\|[=]+\|)\s*$")


@dataclass(frozen=True)
class ObservedProfile:
    """A MIG GPU-instance profile as ``nvidia-smi mig -lgipp`` / ``-lgip`` reports it.

    ``placements`` come from ``-lgipp``; ``name``, ``instances_total`` and ``memory_gib`` from
    ``-lgip`` (``name`` is filled from the catalog by profile ID when only ``-lgipp`` was given and
    the GPU model is known).
    """

    gpu: int
    profile_id: int
    name: str | None = None
    placements: tuple[MigPlacement, ...] = ()
    instances_total: int | None = None
    memory_gib: float | None = None


def _read_mig_text(text: str) -> tuple[list[ObservedProfile], list[str]]:
    """Profiles of ``-lgipp`` lines and ``-lgip`` tables (merged per GPU and ID), and ``-L`` names."""
    found: dict[tuple[int, int], ObservedProfile] = {}
    product_names: list[str] = []
    for no, line in enumerate(text.splitlines(), start=1):
        if not line.strip() or _TABLE_DECOR.match(line.strip()) or _LIST_MIG.match(line):
            continue
        if m := _LGIPP.match(line):
            gpu, pid, starts, size = int(m[1]), int(m[2]), m[3], int(m[4])
            if not starts.strip():
                raise ValueError(f"line {no}: profile ID {pid} lists no placement")
            if size < 1:
                raise ValueError(f"line {no}: profile ID {pid} has placements of size 0")
            placements = tuple(MigPlacement(start=int(s), size=size) for s in starts.split(",") if s.strip())
            old = found.get((gpu, pid), ObservedProfile(gpu=gpu, profile_id=pid))
            found[(gpu, pid)] = replace(old, placements=old.placements + placements)
        elif m := _LGIP_ROW.match(line):
            gpu, pid = int(m[1]), int(m[3])
            old = found.get((gpu, pid), ObservedProfile(gpu=gpu, profile_id=pid))
            found[(gpu, pid)] = replace(
                old,
                name=m[2],
                instances_total=int(m[5]),
                memory_gib=None if m[6] == "N/A" else float(m[6]),
            )
        elif m := _LIST_GPU.match(line):
            product_names.append(m[1])
        elif "GPU instances:" in line:
            raise ValueError(
                f"line {no}: this is an nvidia-smi mig -lgi table (created GPU instances), "
                "not a profile listing (mig -lgipp or mig -lgip)"
            )
        elif line.startswith("|") and "MIG" not in line:
            continue  # -lgip title, column headings and second lines of each profile
        else:
            raise ValueError(
                f"line {no}: not part of nvidia-smi mig -lgipp or -lgip output: '{line.strip()[:70]}'"
            )
    if not found:
        raise ValueError(
            "no MIG profile found: expected nvidia-smi mig -lgipp lines such as "
            "'GPU  0 Profile ID 19 Placements: {0,1,2}:1' or a mig -lgip table"
        )
    return list(found.values()), product_names


def _catalog_id_map(spec: GpuModelSpec) -> dict[int, MigProfile]:
    return {p.profile_id: p for p in spec.profiles if p.profile_id is not None}


def _model_from_profiles(observed: list[ObservedProfile], catalog: HardwareCatalog) -> GpuModelSpec | None:
    """The MIG model whose profiles include every observed name and ID (ties: closest memory)."""
    named = [o for o in observed if o.name is not None]
    if not named:
        return None
    candidates = [
        spec
        for spec in catalog.models
        if all(
            o.name in spec.profile_map and spec.profile_map[o.name].profile_id in (None, o.profile_id)
            for o in named
        )
    ]
    if len(candidates) <= 1:
        return candidates[0] if candidates else None

    def distance(spec: GpuModelSpec) -> float:
        return sum(
            abs(o.memory_gib - (spec.profile_map[o.name].memory_gib or 0.0))
            for o in named
            if o.name is not None and o.memory_gib is not None
        )

    ranked = sorted(candidates, key=distance)
    if distance(ranked[0]) == distance(ranked[1]):
        return None
    log.info(
        "MIG table fits %s; picked %s by instance memory sizes",
        ", ".join(c.name for c in candidates),
        ranked[0].name,
    )
    return ranked[0]


def identify_gpu_model(text: str, catalog: HardwareCatalog | None = None) -> str | None:
    """The catalog name of the GPU model a MIG listing was taken on, when the text tells.

    Looks at ``nvidia-smi -L`` lines (``GPU 0: NVIDIA H100 80GB HBM3 (UUID: …)``) and otherwise at
    the profile names and sizes of a ``-lgip`` table. ``-lgipp`` lines alone do not identify a
    model (H100 SXM and H100 NVL print the same placements): ``None``.
    """
    cat = catalog or default_catalog()
    observed, product_names = _read_mig_text(text)
    models = {s.name for s in (lookup_gpu_model(n, cat) for n in product_names) if s is not None}
    if len(models) == 1:
        return models.pop()
    if len(models) > 1:
        log.warning("MIG listing names several GPU models: %s", ", ".join(sorted(models)))
        return None
    spec = _model_from_profiles(observed, cat)
    return spec.name if spec is not None else None


def resolve_mig_model(text: str, model: str | None = None, catalog: HardwareCatalog | None = None) -> str:
    """The catalog name of the listing's GPU model: ``model`` if given, else identified from ``text``."""
    cat = catalog or default_catalog()
    if model is not None:
        spec = lookup_gpu_model(model, cat)
        if spec is None:
            raise ValueError(f"unknown GPU model '{model}' (not a catalog name or alias)")
        return spec.name
    found = identify_gpu_model(text, cat)
    if found is None:
        raise ValueError(
            "cannot tell the GPU model from this MIG listing; give --model "
            "(e.g. 'H100 80GB HBM3' or 'A100-PCIE-40GB')"
        )
    return found


def parse_mig_lgipp(
    text: str, *, model: str | None = None, catalog: HardwareCatalog | None = None
) -> list[ObservedProfile]:
    """Profiles of ``nvidia-smi mig -lgipp`` output (``-lgip`` tables and ``-L`` lines also accepted).

    Profile names missing from the text are filled from the catalog by profile ID when the GPU
    model is given as ``model`` or can be identified from the text. Raises ``ValueError`` naming
    the line on text that is not such a listing.
    """
    cat = catalog or default_catalog()
    observed, _ = _read_mig_text(text)
    if all(o.name is not None for o in observed):
        return observed
    name = resolve_mig_model(text, model, cat) if model else identify_gpu_model(text, cat)
    if name is None:
        return observed
    ids = _catalog_id_map(cat.model(name))
    return [
        replace(o, name=ids[o.profile_id].name) if o.name is None and o.profile_id in ids else o
        for o in observed
    ]


def _format_placements(placements: Sequence[MigPlacement]) -> str:
    """``{0,2,4}:2`` as nvidia-smi prints it (``0:1,2:2`` when sizes differ)."""
    ordered = sorted(placements, key=lambda p: p.start)
    sizes = {p.size for p in ordered}
    if len(sizes) == 1:
        return "{" + ",".join(str(p.start) for p in ordered) + "}:" + str(sizes.pop())
    return ",".join(f"{p.start}:{p.size}" for p in ordered)


def _compare_one_gpu(observed: list[ObservedProfile], spec: GpuModelSpec, prefix: str) -> list[str]:
    """Differences between one GPU's observed profiles and the catalog's profiles of ``spec``."""
    diffs: list[str] = []
    ids = _catalog_id_map(spec)
    matched: set[str] = set()
    for o in observed:
        label = f"profile ID {o.profile_id}" + (f" ('{o.name}')" if o.name else "")
        cat = ids.get(o.profile_id)
        if cat is None and o.name in spec.profile_map:
            cat = spec.profile_map[o.name]
            diffs.append(
                f"{prefix}{label} has ID {o.profile_id} in the table but "
                f"{cat.profile_id if cat.profile_id is not None else 'no ID'} in the catalog"
            )
        if cat is None:
            diffs.append(f"{prefix}the table lists {label} which the catalog's {spec.name} does not offer")
            continue
        matched.add(cat.name)
        if o.name is not None and o.name != cat.name:
            diffs.append(f"{prefix}{label} is called '{cat.name}' in the catalog")
        if o.placements and set(o.placements) != set(cat.placements):
            diffs.append(
                f"{prefix}{label}: placements {_format_placements(o.placements)} in the table, "
                f"{_format_placements(cat.placements)} in the catalog"
            )
        if o.instances_total is not None and o.instances_total != cat.max_instances:
            diffs.append(
                f"{prefix}{label}: at most {o.instances_total} instances in the table, "
                f"{cat.max_instances} in the catalog"
            )
    for p in spec.profiles:
        if p.name not in matched:
            pid = f"ID {p.profile_id}" if p.profile_id is not None else "no ID"
            diffs.append(
                f"{prefix}the catalog's {spec.name} offers profile '{p.name}' ({pid}) "
                "which the table does not list"
            )
    return diffs


def compare_mig_with_catalog(
    observed: Sequence[ObservedProfile], model_name: str, catalog: HardwareCatalog | None = None
) -> list[str]:
    """Every difference between observed MIG profiles and the catalog's entry for ``model_name``.

    Reports profiles missing on either side, different names, placements and instance counts;
    empty when they agree. With several GPUs in the listing each message starts with ``GPU n:``.
    """
    cat = catalog or default_catalog()
    spec = lookup_gpu_model(model_name, cat)
    if spec is None:
        raise ValueError(f"unknown GPU model '{model_name}' (not a catalog name or alias)")
    if not spec.mig_capable:
        return [f"the catalog's {spec.name} does not support MIG but the table lists MIG profiles"]
    gpus = sorted({o.gpu for o in observed})
    diffs: list[str] = []
    for gpu in gpus:
        prefix = f"GPU {gpu}: " if len(gpus) > 1 else ""
        diffs.extend(_compare_one_gpu([o for o in observed if o.gpu == gpu], spec, prefix))
    return diffs


# --------------------------------------------------------------------------------------------
# The current GPU-instance layout (nvidia-smi mig -lgi)

_LGI_TITLE = re.compile(r"^\|\s*GPU instances:\s*\|$")
_LGI_ROW = re.compile(r"^\|\s*(\d+)\s+MIG\s+(\S+)\s+(\d+)\s+(\d+)\s+(\d+):(\d+)\s*\|$")
_LGI_NONE = re.compile(r"No GPU instances? (?:was |were )?found", re.IGNORECASE)


@dataclass(frozen=True)
class GpuInstance:
    """A created MIG GPU instance as ``nvidia-smi mig -lgi`` lists it."""

    gpu: int
    profile: str
    profile_id: int
    instance_id: int
    start: int
    size: int


def is_mig_lgi(text: str) -> bool:
    """Whether ``text`` is ``nvidia-smi mig -lgi`` output (the created GPU instances)."""
    return any(_LGI_TITLE.match(line.strip()) for line in text.splitlines())


def parse_mig_lgi(text: str) -> list[GpuInstance]:
    """The GPU instances of ``nvidia-smi mig -lgi`` output; ``ValueError`` naming the line on other text."""
    found: list[GpuInstance] = []
    title = False
    for no, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if not stripped or _TABLE_DECOR.match(stripped) or _LGI_NONE.search(stripped):
            continue
        if _LGI_TITLE.match(stripped):
            title = True
        elif m := _LGI_ROW.match(stripped):
            gpu, profile, pid, gi, start, size = int(m[1]), m[2], int(m[3]), int(m[4]), int(m[5]), int(m[6])
            found.append(GpuInstance(gpu, profile, pid, gi, start, size))
        elif not (title and stripped.startswith("|") and "MIG" not in stripped):
            raise ValueError(f"line {no}: not part of nvidia-smi mig -lgi output: '{stripped[:70]}'")
    if not title:
        raise ValueError("not nvidia-smi mig -lgi output: no 'GPU instances:' table")
    return found


def _lgi_candidates(instances: Sequence[GpuInstance], catalog: HardwareCatalog) -> list[str]:
    """The MIG models whose catalog profiles have every listed name, ID and placement."""

    def fits(spec: GpuModelSpec) -> bool:
        for gi in instances:
            p = spec.profile_map.get(gi.profile)
            if p is None or p.profile_id not in (None, gi.profile_id):
                return False
            if MigPlacement(start=gi.start, size=gi.size) not in p.placements:
                return False
        return True

    return [spec.name for spec in catalog.models if spec.mig_capable and fits(spec)]


def lgi_model(
    instances: Sequence[GpuInstance], model: str | None, catalog: HardwareCatalog | None = None
) -> str:
    """The catalog name of the GPU model of a ``-lgi`` layout: ``model`` if given, else the one model
    whose profiles fit the listing; ``ValueError`` naming ``--model`` and the candidates when several
    (other products) or none fit."""
    cat = catalog or default_catalog()
    if model is not None:
        return resolve_mig_model("", model, cat)
    fits = _lgi_candidates(instances, cat)
    if len(fits) == 1:
        return fits[0]
    if not fits:
        raise ValueError("no GPU model of the catalog offers these GPU instances; give --model")
    raise ValueError(f"the GPU instances fit several GPU models; give --model (one of {', '.join(fits)})")


def layout_from_lgi(
    instances: Sequence[GpuInstance], model: str, catalog: HardwareCatalog | None = None
) -> tuple[dict[int, list[dict[str, Any]]], list[str]]:
    """The MIG layout of each GPU in cluster-file form (``{profile, start}`` per instance), and every
    way the listing disagrees with the catalog's ``model`` (profile IDs, sizes, invalid layouts)."""
    cat = catalog or default_catalog()
    spec = cat.model(model)
    gpus = sorted({gi.gpu for gi in instances})
    layout: dict[int, list[dict[str, Any]]] = {}
    problems: list[str] = []
    for gpu in gpus:
        prefix = f"GPU {gpu}: " if len(gpus) > 1 else ""
        mine = sorted((gi for gi in instances if gi.gpu == gpu), key=lambda gi: gi.start)
        for gi in mine:
            p = spec.profile_map.get(gi.profile)
            label = f"{prefix}GPU instance {gi.instance_id} ('{gi.profile}')"
            if p is not None and p.profile_id is not None and p.profile_id != gi.profile_id:
                problems.append(f"{label} has profile ID {gi.profile_id}, {p.profile_id} in the catalog")
            if p is not None and gi.start in p.starts and p.size_at(gi.start) != gi.size:
                problems.append(
                    f"{label} spans {gi.size} memory slices, {p.size_at(gi.start)} in the catalog"
                )
        placed = tuple(MigInstance(profile=gi.profile, start=gi.start) for gi in mine)
        problems.extend(prefix + msg for _, msg in mig_layout_problems(spec, placed))
        layout[gpu] = [{"profile": gi.profile, "start": gi.start} for gi in mine]
    return layout, problems
