"""The cluster map: a plan drawn as one self-contained SVG (or an HTML page holding it).

One row per node, grouped by pool; one cell per GPU, captioned with its index. Under the node's name
stands its sharing mode as the plan leaves it (exclusive, time-sliced or MPS with its replicas, no mode,
and which GPUs are MIG), and under each MIG GPU its layout. A whole GPU in use fills its cell, a fraction
fills its share of the width (ticks mark the replicas of a time-sliced GPU), and a MIG instance sits at
its memory-slice start (``x = start / memory slices`` of the cell, width = its slices). Free capacity on
a partly used GPU is *stranded* (only a smaller request can use it) and drawn hatched. NVLink cliques
are brackets under their GPUs. The waiting queue stands beside the map with each replica's reason code.
Every drawn workload carries an SVG ``<title>`` (workload, tier, team, start), which browsers show on
hover in both forms.

Colours follow the tier or the team: the SVG's root class (``by-tier`` / ``by-team``) selects one of two
style sets, so the HTML page switches colour with one control and no re-rendering. Both palettes are
Okabe and Ito's colour-blind-safe set, and another team's work is a dark grey none of them comes near
under protan, deutan or tritan vision; past the palette's length, names cycle through it again dotted
(then with larger dots), so no two names share one fill. A team's map (``visible``) reads the plan through
:func:`gpuplan.planner.explain.team_view.team_plan`; other teams' work is drawn as anonymous ``other``
occupancy.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from html import escape
from typing import TYPE_CHECKING, Literal

from gpuplan.models.cluster import EXCLUSIVE, TimeSliced, sharing_replicas, sharing_text
from gpuplan.models.hardware import MILLI_PER_GPU
from gpuplan.models.topology import nvlink_cliques
from gpuplan.planner.explain.team_view import team_plan
from gpuplan.planner.io.importers.kubernetes.conventions import SHARING
from gpuplan.planner.pipeline.layouts import cluster_after

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from gpuplan.models.cluster import Gpu, MigInstance, Node
    from gpuplan.models.hardware import HardwareCatalog
    from gpuplan.models.inputs import PlanningInput
    from gpuplan.models.plan import GpuUse, Plan

Colour = Literal["tier", "team"]
COLOURS: tuple[Colour, ...] = ("tier", "team")

#: Fill colours by tier (in the policy's order) and by team (sorted by name): Okabe and Ito's colour-blind
#: safe set (vermillion, blue, bluish green, reddish purple, sky blue, orange, yellow), without black.
TIER_PALETTE = ("#d55e00", "#0072b2", "#009e73", "#cc79a7", "#56b4e9", "#e69f00")
TEAM_PALETTE = ("#0072b2", "#e69f00", "#009e73", "#cc79a7", "#56b4e9", "#d55e00", "#f0e442")
#: Another team's work in a team's map: a neutral dark grey, far from every palette colour.
OTHER_FILL = "#555555"
FREE_FILL = "#f4f4f4"
#: The hatching of stranded capacity: a dark aubergine, far from the palettes and the grey of other teams.
STRANDED_STROKE = "#40004b"

#: Geometry (SVG user units): the GPU cell, the gap between cells, the node label column, row height, the
#: strips above (GPU index) and under (MIG layout) the cells.
CELL_W, CELL_GAP, LABEL_W, CELL_H, ROW_GAP, BRACKET_STEP = 64, 6, 190, 24, 5, 5
INDEX_H, LAYOUT_H = 11, 11
#: Replica ticks are drawn on time-sliced GPUs of at most this many replicas (more would be a grey bar).
MAX_TICKS = 16
QUEUE_W, LEGEND_W = 520, 620

_STYLE = f"""
svg.gpumap {{ font: 12px sans-serif; }}
.gpumap .free {{ fill: {FREE_FILL}; stroke: #bbb; }}
.gpumap .slot {{ fill: none; stroke: #666; stroke-dasharray: 2 1; }}
.gpumap .stranded {{ fill: url(#hatch); stroke: none; }}
.gpumap .use {{ stroke: #222; stroke-width: 0.5; }}
.gpumap .use.other {{ fill: {OTHER_FILL}; }}
.gpumap .nvlink {{ fill: none; stroke: #6a3d9a; stroke-width: 1.5; }}
.gpumap .pool {{ font-weight: bold; font-size: 14px; }}
.gpumap .code {{ font-family: monospace; }}
.gpumap .mode {{ font-size: 10px; fill: #444; }}
.gpumap .gpu-index, .gpumap .mig-layout {{ font-size: 9px; fill: #555; text-anchor: middle; }}
.gpumap .replica {{ stroke: #222; stroke-width: 1; pointer-events: none; }}
"""


def _class(prefix: str, name: str) -> str:
    """A CSS class name for a tier or team (names may hold characters CSS does not allow)."""
    return prefix + "-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in name)


def _fill(palette: tuple[str, ...], i: int) -> tuple[str, str]:
    """The fill of the ``i``-th name: its palette colour, dotted (in larger dots each further round) once
    the names outnumber the palette; and the ``<pattern>`` that dots need ("" for a plain colour)."""
    colour, rounds = palette[i % len(palette)], i // len(palette)
    if not rounds:
        return colour, ""
    pid = f"dots-{colour[1:]}-{rounds}"
    pattern = (
        f'<pattern id="{pid}" width="6" height="6" patternUnits="userSpaceOnUse">'
        f'<rect width="6" height="6" fill="{colour}"/><circle cx="3" cy="3" r="{0.6 + 0.5 * rounds:g}" '
        'fill="#fff"/></pattern>'
    )
    return f"url(#{pid})", pattern


def _mode(node: Node, *, mps: bool) -> tuple[str, str]:
    """A node's sharing mode as its label says it, and in full for the hover title: how the device plugin
    offers the non-MIG GPUs (``mps``: its replicas are MPS clients, planned as time-slicing), and which
    GPUs are MIG."""
    mig = [g.index for g in node.gpus if g.mig is not None]
    plain = len(node.gpus) - len(mig)
    sharing = node.sharing
    if isinstance(sharing, TimeSliced):
        r = sharing.time_slicing.replicas
        short, full = (
            (f"MPS, {r} replicas", f"MPS: {r} replicas per GPU, planned as time-slicing (fractions only)")
            if mps
            else (f"time-sliced, {r} replicas", f"time-sliced: {r} replicas per GPU (fractions only)")
        )
    elif sharing == EXCLUSIVE:
        short, full = "exclusive", "exclusive: whole GPUs only"
    else:
        short, full = "whole or fractions", "no sharing mode: whole GPUs or fractions"
    if not mig:
        return short, full
    on = f"MIG on GPU{'s' if len(mig) > 1 else ''} {', '.join(map(str, mig))}"
    if not plain:
        return "MIG", on
    return f"MIG + {short}", f"{on}; the others {full}"


def _layout_text(instances: tuple[MigInstance, ...]) -> str:
    """A MIG layout short enough for the strip under its GPU, in start order with repeats counted
    (``2x1g.10gb 3g.40gb``); profiles by their compute slices (``2x1g 3g``) when the names do not fit."""

    def runs(names: list[str]) -> str:
        out: list[tuple[str, int]] = []
        for n in names:
            if out and out[-1][0] == n:
                out[-1] = (n, out[-1][1] + 1)
            else:
                out.append((n, 1))
        return " ".join(n if k == 1 else f"{k}x{n}" for n, k in out)

    ordered = [i.profile for i in sorted(instances, key=lambda i: i.start)]
    full = runs(ordered)
    return full if len(full) <= (CELL_W + CELL_GAP) // 5 else runs([p.split(".")[0] for p in ordered])


@dataclass(frozen=True)
class _Who:
    """What a drawn piece of work shows: its workload (``None``: another team's), tier and team."""

    workload: str | None
    replica: int = 0
    tier: str = ""
    team: str = ""

    @property
    def classes(self) -> str:
        if self.workload is None:
            return "use other"
        return f"use {_class('tier', self.tier)} {_class('team', self.team)}"

    def title(self, start: str) -> str:
        if self.workload is None:
            return "another team's workload"
        return f"{self.workload} replica {self.replica} · tier {self.tier} · team {self.team} · {start}"


class _Canvas:
    """SVG elements written in order."""

    def __init__(self) -> None:
        self.parts: list[str] = []

    def rect(self, x: float, y: float, w: float, h: float, cls: str, title: str = "", **data: object) -> None:
        attrs = "".join(f' data-{k.replace("_", "-")}="{escape(str(v))}"' for k, v in data.items())
        body = f"<title>{escape(title)}</title>" if title else ""
        self.parts.append(
            f'<rect class="{cls}" x="{x:g}" y="{y:g}" width="{w:g}" height="{h:g}"{attrs}>{body}</rect>'
        )

    def text(self, x: float, y: float, text: str, cls: str = "", title: str = "") -> None:
        body = escape(text) + (f"<title>{escape(title)}</title>" if title else "")
        self.parts.append(f'<text x="{x:g}" y="{y:g}" class="{cls}">{body}</text>')


class _Map:
    """The drawing of one plan for one viewer."""

    def __init__(
        self, plan: Plan, inp: PlanningInput, catalog: HardwareCatalog, visible: AbstractSet[str] | None
    ) -> None:
        self.catalog = catalog
        self.inp = inp
        shown = plan if visible is None else team_plan(plan, visible)
        self.shown = shown
        self.unplaced = shown.unplaced
        self.uses: dict[tuple[str, int], list[tuple[_Who, GpuUse]]] = defaultdict(list)
        own = set(shown.assignments)
        for a in plan.assignments:
            who = self._who(a.workload, a.replica) if a in own else _Who(None)
            for g in a.gpus:
                self.uses[(a.node, g.index)].append((who, g))
        self.cluster = cluster_after(inp.cluster, plan)
        self.tiers = [t.name for t in inp.policy.tiers]
        named = [a.workload for a in shown.assignments] + [u.workload for u in shown.unplaced]
        self.teams = sorted({self._who(w).team for w in named})
        self.canvas = _Canvas()

    def _who(self, workload: str, replica: int = 0) -> _Who:
        w = self.inp.workload_by_id.get(workload)
        return _Who(workload, replica, w.tier if w else "", w.team if w else "")

    def _gpu(self, node: Node, gpu: Gpu, x: float, y: float) -> None:
        """One GPU cell: background, MIG slots, the work on it, its stranded free part."""
        c = self.canvas
        spec = self.catalog.model(gpu.model)
        uses = self.uses.get((node.name, gpu.index), [])
        layout = (
            "" if gpu.mig is None else " MIG " + " ".join(f"{i.profile}@{i.start}" for i in gpu.mig.instances)
        )
        mode = "mig" if gpu.mig is not None else sharing_text(node.sharing)
        c.rect(
            x, y, CELL_W, CELL_H, "free gpu", f"{node.name} GPU {gpu.index} · {spec.name}{layout}",
            node=node.name, gpu=gpu.index, model=spec.name, mode=mode,
        )  # fmt: skip
        c.text(x + CELL_W / 2, y - 3, f"GPU {gpu.index}", "gpu-index")
        start = "running or starting now"
        if gpu.mig is not None:
            unit = CELL_W / spec.memory_slices
            taken = {(g.mig_profile, g.mig_start): who for who, g in uses if g.mig_profile is not None}
            covered: set[int] = set()
            for inst in gpu.mig.instances:
                size = spec.profile(inst.profile).size_at(inst.start)
                covered.update(range(inst.start, inst.start + size))
                ix, iw = x + inst.start * unit, size * unit
                who = taken.get((inst.profile, inst.start))
                if who is None:
                    if taken:
                        c.rect(ix, y, iw, CELL_H, "stranded", f"{inst.profile}@{inst.start} free")
                    c.rect(ix, y, iw, CELL_H, "slot", f"{inst.profile}@{inst.start} free")
                    continue
                c.rect(
                    ix, y, iw, CELL_H, f"{who.classes} mig",
                    f"{inst.profile}@{inst.start} · {who.title(start)}",
                    node=node.name, gpu=gpu.index, start=inst.start, slices=size, profile=inst.profile,
                    **({"workload": who.workload} if who.workload else {}),
                )  # fmt: skip
            if taken:
                for s in sorted(set(range(spec.memory_slices)) - covered):
                    c.rect(x + s * unit, y, unit, CELL_H, "stranded", f"memory slice {s}: in no MIG instance")
            return
        used = 0
        for who, g in uses:
            milli = MILLI_PER_GPU if g.milli is None else g.milli
            kind = "whole" if g.milli is None else "fraction"
            c.rect(
                x + used * CELL_W / MILLI_PER_GPU, y, milli * CELL_W / MILLI_PER_GPU, CELL_H,
                f"{who.classes} {kind}", f"{milli} milli-GPU · {who.title(start)}" if kind == "fraction"
                else who.title(start), node=node.name, gpu=gpu.index, milli=milli,
                **({"workload": who.workload} if who.workload else {}),
            )  # fmt: skip
            used += milli
        if 0 < used < MILLI_PER_GPU:
            c.rect(
                x + used * CELL_W / MILLI_PER_GPU, y, (MILLI_PER_GPU - used) * CELL_W / MILLI_PER_GPU,
                CELL_H, "stranded", f"{MILLI_PER_GPU - used} milli-GPU free on a shared GPU",
            )  # fmt: skip
        replicas = sharing_replicas(node.sharing)
        if replicas is not None and 1 < replicas <= MAX_TICKS:
            ticks = "".join(
                f"M{x + k * CELL_W / replicas:g},{y:g} v4 m0,{CELL_H - 8:g} v4" for k in range(1, replicas)
            )
            c.parts.append(f'<path class="replica" data-replicas="{replicas}" d="{ticks}"/>')

    def _node(self, node: Node, y: float) -> float:
        """One node row; returns its height."""
        c = self.canvas
        models = sorted({self.catalog.canonical(g.model) for g in node.gpus})
        c.parts.append(
            f'<g class="node" data-node="{escape(node.name)}" data-pool="{escape(node.pool or "")}" '
            f'data-sharing="{escape(sharing_text(node.sharing))}">'
        )
        top, y = y, y + INDEX_H
        # The GPU Operator's label says MPS (kept by the Kubernetes import) while the plan keeps the mode.
        before = self.inp.cluster.node_by_name.get(node.name)
        mps = node.labels.get(SHARING) == "mps" and before is not None and before.sharing == node.sharing
        short, full = _mode(node, mps=mps)
        c.text(8, y + 9, node.name, "label", f"{node.name} · {', '.join(models)}")
        c.text(8, y + 21, short, "mode", full)
        xs = {g.index: LABEL_W + i * (CELL_W + CELL_GAP) for i, g in enumerate(node.gpus)}
        for g in node.gpus:
            self._gpu(node, g, xs[g.index], y)
        for g in node.gpus:
            if g.mig is None:
                continue
            layout = " ".join(
                f"{i.profile}@{i.start}" for i in sorted(g.mig.instances, key=lambda i: i.start)
            )
            c.parts.append(
                f'<text x="{xs[g.index] + CELL_W / 2:g}" y="{y + CELL_H + 9:g}" class="mig-layout" '
                f'data-gpu="{g.index}" data-layout="{escape(layout)}">{escape(_layout_text(g.mig.instances))}'
                f"<title>GPU {g.index} MIG layout: {escape(layout or 'no instance')}</title></text>"
            )
        y += LAYOUT_H if any(g.mig is not None for g in node.gpus) else 0
        cliques = [sorted(q) for q in nvlink_cliques(node) if len(q) > 1]
        lanes: list[list[tuple[float, float]]] = []
        for clique in cliques:
            left, right = min(xs[i] for i in clique), max(xs[i] for i in clique) + CELL_W
            # The first lane under the row where the bracket overlaps no other (disjoint cliques share).
            lane = next(
                (k for k, spans in enumerate(lanes) if all(right <= a or b <= left for a, b in spans)), None
            )
            if lane is None:
                lane = len(lanes)
                lanes.append([])
            lanes[lane].append((left, right))
            by = y + CELL_H + (lane + 1) * BRACKET_STEP
            ticks = "".join(f" M{xs[i] + CELL_W / 2:g},{by - BRACKET_STEP + 2:g} V{by:g}" for i in clique)
            gpus = " ".join(map(str, clique))
            c.parts.append(
                f'<path class="nvlink" data-gpus="{gpus}" d="M{left + 2:g},{by:g} H{right - 2:g}{ticks}">'
                f"<title>NVLink clique: GPUs {', '.join(map(str, clique))}</title></path>"
            )
        c.parts.append("</g>")
        return y - top + CELL_H + len(lanes) * BRACKET_STEP + ROW_GAP

    def _queue(self, x: float, y: float) -> float:
        """The waiting replicas, one line each with the reason code; returns the bottom."""
        c = self.canvas
        c.text(x, y, f"Waiting ({len(self.unplaced)})", "pool")
        y += 20
        for u in self.unplaced:
            who = self._who(u.workload, u.replica)
            start = f"predicted start {u.predicted_start}" if u.predicted_start else "no predicted start"
            c.parts.append(
                f'<g class="waiting" data-workload="{escape(u.workload)}" data-code="{escape(u.code)}">'
            )
            c.rect(x, y - 10, 10, 10, who.classes, who.title(start))
            c.text(x + 16, y, f"{u.workload} #{u.replica}", "", f"{who.title(start)} · {u.reason}")
            c.text(x + 250, y, u.code, "code", u.reason)
            c.parts.append("</g>")
            y += 16
        return y

    def _legend(self, x: float, y: float) -> float:
        """Swatches of both colourings (the unused one dimmed), other teams' work and stranded capacity;
        returns the bottom."""
        c = self.canvas
        for label, names, prefix in (("tier", self.tiers, "tier"), ("team", self.teams, "team")):
            c.parts.append(f'<g class="legend legend-{prefix}">')
            c.text(x, y, f"{label}:")
            for i, name in enumerate(names):
                lx = x + 50 + i * 130
                c.rect(lx, y - 10, 12, 12, f"use {_class(prefix, name)}", f"{label} {name}")
                c.text(lx + 16, y, name)
            c.parts.append("</g>")
            y += 18
        c.rect(x, y - 10, 12, 12, "use other", "another team's work")
        c.text(x + 16, y, "other team")
        c.rect(x + 180, y - 10, 12, 12, "stranded", "free capacity on a partly used GPU")
        c.text(x + 196, y, "stranded free capacity (hatched)")
        c.parts.append(f'<path class="nvlink" d="M{x + 440:g},{y:g} H{x + 480:g}"/>')
        c.text(x + 486, y, "NVLink clique")
        y += 18
        c.text(
            x, y, "Under each node: its sharing mode (exclusive, time-sliced with its replicas, whole or "
            "fractions, MIG); above each GPU its index, under a MIG GPU its layout.", "mode",
        )  # fmt: skip
        return y + 12

    def svg(self, colour: Colour) -> str:
        """The whole map as one SVG element."""
        self.canvas = _Canvas()
        top = y = self._legend(8, 24.0) + 12
        pools: dict[str, list[Node]] = defaultdict(list)
        for n in self.cluster.nodes:
            pools[n.pool or "(no pool)"].append(n)
        for pool, nodes in pools.items():
            count = f"{len(nodes)} node{'s' if len(nodes) > 1 else ''}"
            self.canvas.text(8, y + 14, f"pool {pool} ({count})", "pool")
            y += 22
            for n in nodes:
                y += self._node(n, y)
        widest = max((len(n.gpus) for n in self.cluster.nodes), default=0)
        qx = max(LABEL_W + widest * (CELL_W + CELL_GAP) + 30, LEGEND_W)
        bottom = max(y, self._queue(qx, top + 14))
        styles = [_STYLE]
        patterns: dict[str, None] = {}
        for prefix, names, palette in (
            ("tier", self.tiers, TIER_PALETTE),
            ("team", self.teams, TEAM_PALETTE),
        ):
            for i, name in enumerate(names):
                fill, pattern = _fill(palette, i)
                cls = _class(prefix, name)
                styles.append(f".by-{prefix} .{cls}, .legend-{prefix} .{cls} {{ fill: {fill}; }}")
                patterns[pattern] = None
            styles.append(f"svg.gpumap:not(.by-{prefix}) .legend-{prefix} {{ opacity: 0.35; }}")
        width, height = qx + QUEUE_W, bottom + 10
        hatch = (
            '<pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
            'patternTransform="rotate(45)">'
            f'<rect width="6" height="6" fill="{FREE_FILL}"/><line x1="0" y1="0" x2="0" y2="6" '
            f'stroke="{STRANDED_STROKE}" stroke-width="2"/></pattern>'
        )
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="gpumap by-{colour}" width="{width:g}" '
            f'height="{height:g}" viewBox="0 0 {width:g} {height:g}"><defs>{hatch}{"".join(patterns)}</defs>'
            f"<style>{''.join(styles)}</style>" + "".join(self.canvas.parts) + "</svg>"
        )


def render_svg(
    plan: Plan,
    inp: PlanningInput,
    catalog: HardwareCatalog,
    *,
    colour: Colour = "tier",
    visible: AbstractSet[str] | None = None,
) -> str:
    """The cluster map of ``plan`` (made from ``inp``) as a standalone SVG document, coloured by
    ``colour``; with ``visible``, a team's map (only those workloads named, the rest ``other``)."""
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _Map(plan, inp, catalog, visible).svg(colour) + "\n"


_SCRIPT = """
function colourBy(value) {
  var svg = document.querySelector('svg.gpumap');
  svg.classList.remove('by-tier', 'by-team');
  svg.classList.add('by-' + value);
  document.querySelector('input[name=colour][value=' + value + ']').checked = true;
}
document.querySelectorAll('input[name=colour]').forEach(function (radio) {
  radio.addEventListener('change', function () {
    colourBy(radio.value);
    history.replaceState(null, '', '#' + radio.value);
  });
});
if (location.hash === '#tier' || location.hash === '#team') { colourBy(location.hash.slice(1)); }
"""


def render_html(
    plan: Plan,
    inp: PlanningInput,
    catalog: HardwareCatalog,
    *,
    title: str = "gpuplan cluster map",
    colour: Colour = "tier",
    visible: AbstractSet[str] | None = None,
) -> str:
    """The cluster map as one self-contained HTML page (inline SVG, CSS and script; no network), first
    coloured by ``colour``; a radio control switches between tier and team (``#tier`` / ``#team`` in
    the page's address pick one as well)."""
    drawing = _Map(plan, inp, catalog, visible)
    svg = drawing.svg(colour)
    controls = "".join(
        f'<label><input type="radio" name="colour" value="{c}"{" checked" if c == colour else ""}> '
        f"{c}</label> "
        for c in COLOURS
    )
    shown = drawing.shown
    status = f"plan {shown.status.value} · {len(shown.assignments)} placed · {len(shown.unplaced)} waiting"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>body {{ font: 13px sans-serif; margin: 12px; }}</style></head>"
        f'<body><h1>{escape(title)}</h1><p id="status">{escape(status)}</p>'
        f'<form id="colour">Colour by: {controls}</form>{svg}<script>{_SCRIPT}</script></body></html>\n'
    )
