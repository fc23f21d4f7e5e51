"""The cluster map: ``gpuplan map`` and ``GET /v1/plans/{id}/map``, rendered by a real headless Chromium.

The browser tests skip when no Chromium is installed (``.ci/run`` installs Debian's through
``.ci/chromium.sh`` and names it in ``GPUPLAN_TEST_CHROMIUM``). Every expectation on the drawing is
computed here from the inputs, the plan and the catalog's JSON file, not with the renderer's helpers.
With ``GPUPLAN_MAP_SCREENSHOT=<png>`` the example fleet's screenshot is also copied there (the README's
``docs/map.png``).
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import struct
import subprocess
import zlib
from collections import Counter
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from gpuplan.cli import main
from gpuplan.models.catalog import data_dir
from gpuplan.planner.io.exporters.map import TEAM_PALETTE, TIER_PALETTE
from tests._api import PLANNER, VIEWER_ML, Server, live
from tests._factories import node_data

__all__ = ["live"]

EXAMPLES = data_dir() / "examples"
NOW = "2026-11-29T12:00:00+00:00"
A100 = "A100-SXM4-80GB"
#: Four A100s joined by NVLink (0-1, 2-3), two of them MIG-partitioned and the others exclusive; two L40S
#: time-sliced in 4 replicas for fractions.
CLUSTER: dict[str, Any] = {
    "nodes": [
        {
            "name": "mig-1",
            "pool": "mig",
            "cpu_milli": 64000,
            "memory_mib": 524288,
            "gpus": [
                {"index": 0, "model": A100, "mig": {"instances": [{"profile": "3g.40gb", "start": 4},
                                                                {"profile": "1g.10gb", "start": 0},
                                                                {"profile": "1g.10gb", "start": 1}]}},
                {"index": 1, "model": A100, "mig": {"instances": [{"profile": "4g.40gb", "start": 0},
                                                                {"profile": "3g.40gb", "start": 4}]}},
                {"index": 2, "model": A100},
                {"index": 3, "model": A100},
            ],
            "links": [{"a": 0, "b": 1, "kind": "NV12"}, {"a": 2, "b": 3, "kind": "NV12"}],
            "sharing": "exclusive",
        },
        {
            "name": "shared-1",
            "pool": "shared",
            "cpu_milli": 64000,
            "memory_mib": 524288,
            "gpus": [{"index": 0, "model": "L40S-48GB"}, {"index": 1, "model": "L40S-48GB"}],
            "sharing": {"time-slicing": {"replicas": 4}},
        },
    ]
}  # fmt: skip
WORKLOADS: list[dict[str, Any]] = [
    {"id": "train-ml", "team": "ml", "tier": "latency-sensitive", "gpus": 2, "topology": "nvlink"},
    {"id": "nb-ml", "team": "ml", "tier": "background", "mig_profile": "3g.40gb", "gpu_models": [A100]},
    {"id": "nb-web", "team": "web", "tier": "standard", "mig_profile": "1g.10gb", "gpu_models": [A100]},
    {"id": "frac-web", "team": "web", "tier": "background", "gpu_milli": 300, "gpu_models": ["L40S-48GB"]},
    {"id": "frac-ml", "team": "ml", "tier": "standard", "gpu_milli": 500, "gpu_models": ["L40S-48GB"]},
    {"id": "huge-ml", "team": "ml", "tier": "standard", "gpus": 8},
    {"id": "huge-web", "team": "web", "tier": "standard", "gpus": 8},
]
WEB = {w["id"] for w in WORKLOADS if w["team"] == "web"}
#: Chromium's options: headless, no network of its own, a fresh profile (``--user-data-dir``) per run.
BROWSER_FLAGS = (
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
)  # fmt: skip
WINDOW = (1400, 1000)


def chromium() -> str:
    """The Chromium to test with, or a skip saying how to get one."""
    found = (
        os.environ.get("GPUPLAN_TEST_CHROMIUM")
        or shutil.which("chromium")
        or shutil.which("chromium-browser")
    )
    if not found:
        pytest.skip("no chromium (install Debian's chromium; .ci/run does it with .ci/chromium.sh)")
    return found


def browse(page: str, tmp: Path, *, shot: Path | None = None, dom: bool = True) -> str:
    """Load ``page`` (a file URL, with an optional #fragment) headless: its DOM after the scripts ran
    (unless not ``dom``), and a screenshot to ``shot``."""
    base = [chromium(), *BROWSER_FLAGS, f"--window-size={WINDOW[0]},{WINDOW[1]}"]
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    if shot is not None:
        subprocess.run(
            [*base, f"--user-data-dir={profile}-shot", f"--screenshot={shot}", page],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip
    if not dom:
        return ""
    dumped = subprocess.run(
        [*base, f"--user-data-dir={profile}", "--dump-dom", page],
        check=True, capture_output=True, timeout=120, text=True,
    )  # fmt: skip
    return dumped.stdout


def read_png(path: Path) -> np.ndarray[Any, np.dtype[np.uint8]]:
    """The pixels (height x width x RGB or RGBA) of an 8-bit, non-interlaced PNG: stdlib zlib and numpy."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, chunks = 8, b""
    width = height = channels = 0
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            chunks += body
        pos += 12 + length
    raw = np.frombuffer(zlib.decompress(chunks), dtype=np.uint8).reshape(height, width * channels + 1)
    out = np.zeros((height, width * channels), dtype=np.int32)
    prev = np.zeros(width * channels, dtype=np.int32)
    for y in range(height):
        kind, line = raw[y, 0], raw[y, 1:].astype(np.int32)
        if kind == 1:  # Sub: a running sum per channel
            line = np.cumsum(line.reshape(width, channels), axis=0).reshape(-1)
        elif kind == 2:  # Up
            line = line + prev
        elif kind in (3, 4):  # Average, Paeth: each byte depends on the one decoded before it
            cur, up = line.tolist(), prev.tolist()
            for i in range(len(cur)):
                a = cur[i - channels] if i >= channels else 0
                b, c = up[i], up[i - channels] if i >= channels else 0
                if kind == 3:
                    cur[i] = (cur[i] + (a + b) // 2) & 255
                else:
                    p = a + b - c
                    pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                    cur[i] = (cur[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
            line = np.array(cur, dtype=np.int32)
        out[y] = prev = line & 255
    return out.astype(np.uint8).reshape(height, width, channels)


def colours(path: Path) -> Counter[str]:
    """How many pixels of the screenshot have each colour, as ``#rrggbb``."""
    pixels = read_png(path)
    assert pixels.shape[:2] == (WINDOW[1], WINDOW[0])
    rgb = pixels[:, :, :3].astype(np.int32)
    packed, counts = np.unique((rgb[:, :, 0] << 16) | (rgb[:, :, 1] << 8) | rgb[:, :, 2], return_counts=True)
    return Counter({f"#{int(v):06x}": int(n) for v, n in zip(packed, counts, strict=True)})


def near(seen: Counter[str], colour: str, tolerance: int = 24) -> int:
    """Pixels within ``tolerance`` of ``colour`` on every channel (thin lines are anti-aliased)."""
    want = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return sum(
        n
        for c, n in seen.items()
        if all(abs(int(c[i : i + 2], 16) - w) <= tolerance for i, w in zip((1, 3, 5), want, strict=True))
    )


class Elements(HTMLParser):
    """Every element of a DOM dump: tag and attributes."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[tuple[str, dict[str, str]]] = []
        #: The DOM as dumped, for the text of elements.
        self.dom = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def of(self, tag: str, cls: str) -> list[dict[str, str]]:
        """The attributes of each ``tag`` element with class ``cls``."""
        return [a for t, a in self.found if t == tag and cls in a.get("class", "").split()]


def parse(dom: str) -> Elements:
    found = Elements()
    found.feed(dom)
    found.dom = dom
    return found


def write_inputs(root: Path, workloads: list[dict[str, Any]] | None = None) -> tuple[Path, Path]:
    (root / "cluster.yaml").write_text(yaml.safe_dump(CLUSTER))
    (root / "workloads.yaml").write_text(yaml.safe_dump({"workloads": workloads or WORKLOADS}))
    return root / "cluster.yaml", root / "workloads.yaml"


@pytest.fixture(scope="module")
def small(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A CP-SAT plan of the small fleet, and the input options of ``gpuplan map`` for it."""
    root = tmp_path_factory.mktemp("map")
    cluster, workloads = write_inputs(root)
    inputs = ["--cluster", str(cluster), "--workloads", str(workloads)]
    assert main(["plan", *inputs, "--now", NOW, "--time-limit", "10", "--out", str(root / "plan.json")]) == 0
    return root / "plan.json", inputs


def mig_geometry() -> dict[str, tuple[int, dict[tuple[str, int], int]]]:
    """Per GPU model (and alias) in the catalog's JSON: memory slices, and each (profile, start)'s size."""
    raw = json.loads((data_dir() / "hardware" / "mig_profiles.json").read_text())
    out = {}
    for m in raw["models"]:
        sizes = {(p["name"], pl["start"]): pl["size"] for p in m["profiles"] for pl in p["placements"]}
        for name in (m["model"], *(m.get("aliases") or ())):
            out[name] = (m["memory_slices"], sizes)
    return out


def test_the_map_in_a_browser_shows_nodes_gpus_mig_fractions_nvlink_and_the_queue(
    small: tuple[Path, list[str]], tmp_path: Path
) -> None:
    plan_path, inputs = small
    plan = json.loads(plan_path.read_text())
    out = tmp_path / "map.html"
    assert main(["map", "--plan", str(plan_path), *inputs, "--out", str(out)]) == 0
    fetches = re.search(r"(src|href)=[\"']?(https?:|//)|url\(\s*[\"']?https?:|<link|@import", out.read_text())
    assert fetches is None, f"not self-contained: {fetches}"
    shot = tmp_path / "map.png"
    page = parse(browse(out.as_uri(), tmp_path, shot=shot))

    # One row per node, grouped by pool; one cell per GPU.
    rows = page.of("g", "node")
    assert [(r["data-node"], r["data-pool"]) for r in rows] == [("mig-1", "mig"), ("shared-1", "shared")]
    cells = {(c["data-node"], int(c["data-gpu"])): c for c in page.of("rect", "gpu")}
    assert Counter(node for node, _ in cells) == {"mig-1": 4, "shared-1": 2}

    # MIG instances at their memory-slice start: x = cell x + start / slices of the cell's width.
    geometry = mig_geometry()
    placed = [(a, g) for a in plan["assignments"] for g in a["gpus"]]
    migs = {(m["data-workload"], m["data-node"], int(m["data-gpu"])): m for m in page.of("rect", "mig")}
    expected_mig = [(a, g) for a, g in placed if g.get("mig_profile")]
    assert expected_mig and len(migs) == len(expected_mig)
    for a, g in expected_mig:
        cell = cells[(a["node"], g["index"])]
        slices, sizes = geometry[A100]
        unit = float(cell["width"]) / slices
        drawn = migs[(a["workload"], a["node"], g["index"])]
        assert float(drawn["x"]) == pytest.approx(float(cell["x"]) + g["mig_start"] * unit)
        assert float(drawn["width"]) == pytest.approx(sizes[(g["mig_profile"], g["mig_start"])] * unit)

    # Fractions fill their share of the cell; the rest of a shared GPU is stranded (hatched).
    fractions = {m["data-workload"]: m for m in page.of("rect", "fraction")}
    for a, g in placed:
        if g.get("milli"):
            cell = cells[(a["node"], g["index"])]
            assert float(fractions[a["workload"]]["width"]) == pytest.approx(
                float(cell["width"]) * g["milli"] / 1000
            )
    assert page.of("rect", "stranded")

    # NVLink cliques: pairs joined by NV# links in the cluster file.
    cliques = {(lk["a"], lk["b"]) for lk in CLUSTER["nodes"][0]["links"] if lk["kind"].startswith("NV")}
    assert {
        tuple(map(int, p["data-gpus"].split())) for p in page.of("path", "nvlink") if "data-gpus" in p
    } == cliques

    # Each node's sharing mode as the plan leaves it, under its name; each GPU's index above its cell, its
    # mode on the cell, and under a MIG GPU its layout (the plan's when it re-partitions the GPU).
    modes = {n["name"]: n.get("sharing") for n in CLUSTER["nodes"]}
    modes.update({s["node"]: s["sharing"] for s in plan["sharing"]})
    assert modes == {"mig-1": "exclusive", "shared-1": {"time-slicing": {"replicas": 4}}}, (
        "test expects no change"
    )
    assert {r["data-node"]: r["data-sharing"] for r in rows} == {
        "mig-1": "exclusive",
        "shared-1": "time-slicing:4",
    }
    dom = page.dom
    labels = dict(
        re.findall(
            r'<text [^>]*class="label"[^>]*>([^<]*)<title>.*?<text [^>]*class="mode"[^>]*>([^<]*)', dom
        )
    )
    assert labels == {"mig-1": "MIG + exclusive", "shared-1": "time-sliced, 4 replicas"}
    layouts = {
        (n["name"], g["index"]): g["mig"]["instances"]
        for n in CLUSTER["nodes"]
        for g in n["gpus"]
        if "mig" in g
    }
    layouts.update({(m["node"], m["gpu"]): m["instances"] for m in plan["mig_layouts"]})
    for (node, index), cell in cells.items():
        assert cell["data-mode"] == (
            "mig" if (node, index) in layouts else {"mig-1": "exclusive"}.get(node, "time-slicing:4")
        )
    indices = page.of("text", "gpu-index")
    assert len(indices) == len(cells)
    captions = re.findall(r'<text x="([\d.]+)" y="([\d.]+)" class="gpu-index">GPU (\d+)</text>', dom)
    for node, index in cells:
        cell = cells[(node, index)]
        mid, top = float(cell["x"]) + float(cell["width"]) / 2, float(cell["y"])
        assert any(
            float(x) == pytest.approx(mid) and float(y) < top and int(i) == index for x, y, i in captions
        )
    drawn_layouts = {int(t["data-gpu"]): t["data-layout"] for t in page.of("text", "mig-layout")}
    assert drawn_layouts == {
        index: " ".join(f"{i['profile']}@{i['start']}" for i in sorted(insts, key=lambda i: i["start"]))
        for (node, index), insts in layouts.items()
    }
    assert "3g.40gb@4" in drawn_layouts[0] and "4g.40gb@0" in drawn_layouts[1]
    # A time-sliced GPU's replicas are marked by ticks: 4 replicas, 3 ticks on each of shared-1's GPUs.
    ticks = page.of("path", "replica")
    assert [p["data-replicas"] for p in ticks] == ["4", "4"]
    assert all(p["d"].count("M") == 3 for p in ticks)

    # The waiting queue: each waiting replica with its reason code, hover text with the predicted start.
    waiting = {(w["data-workload"], w["data-code"]) for w in page.of("g", "waiting")}
    assert waiting == {(u["workload"], u["code"]) for u in plan["unplaced"]}
    assert {"huge-ml", "huge-web"} <= {w for w, _ in waiting}

    # The screenshot is a real image in which the tiers' colours and the hatching show.
    seen = colours(shot)
    tiers = ["latency-sensitive", "standard", "background"]
    used_tiers = {next(w["tier"] for w in WORKLOADS if w["id"] == a["workload"]) for a, _ in placed}
    for tier in used_tiers:
        assert seen[TIER_PALETTE[tiers.index(tier)]] > 50, tier
    assert near(seen, "#40004b") > 50, "no hatching"


@pytest.mark.slow
def test_the_colour_switch_and_the_svg_colour_by_team(small: tuple[Path, list[str]], tmp_path: Path) -> None:
    plan_path, inputs = small
    html, svg = tmp_path / "map.html", tmp_path / "map.svg"
    assert main(["map", "--plan", str(plan_path), *inputs, "--out", str(html)]) == 0
    assert main(["map", "--plan", str(plan_path), *inputs, "--out", str(svg), "--colour", "team"]) == 0
    teams = sorted({w["team"] for w in WORKLOADS})
    team_colours = {TEAM_PALETTE[i] for i in range(len(teams))}
    # The page's control: a link to #team opens the map coloured by team (the script sets the class).
    shot = tmp_path / "team.png"
    dom = browse(html.as_uri() + "#team", tmp_path, shot=shot)
    assert re.search(r'<svg[^>]*class="gpumap by-team"', dom)
    seen = colours(shot)
    assert all(seen[c] > 50 for c in team_colours), {c: seen[c] for c in team_colours}
    # The SVG alone: by team, every workload with a hover title naming workload, tier, team and start.
    text = svg.read_text()
    assert 'class="gpumap by-team"' in text
    assert "nb-ml replica 0 · tier background · team ml · running or starting now</title>" in text
    plan = json.loads(plan_path.read_text())
    for u in plan["unplaced"]:
        w = next(w for w in WORKLOADS if w["id"] == u["workload"])
        start = (
            f"predicted start {u['predicted_start']}" if u.get("predicted_start") else "no predicted start"
        )
        assert f"{w['id']} replica {u['replica']} · tier {w['tier']} · team {w['team']} · {start}" in text
    svg_shot = tmp_path / "svg.png"
    browse(svg.as_uri(), tmp_path, shot=svg_shot, dom=False)
    assert all(colours(svg_shot)[c] > 50 for c in team_colours)


#: Colour vision deficiency as Machado, Oliveira and Fernandes (2009) simulate it at full severity, on
#: linear RGB: protanopia, deuteranopia, tritanopia (and normal vision).
CVD = {
    "normal": np.eye(3),
    "protan": np.array([[0.152286, 1.052583, -0.204868], [0.114503, 0.786281, 0.099216],
                        [-0.003882, -0.048116, 1.051998]]),
    "deutan": np.array([[0.367322, 0.860646, -0.227968], [0.280085, 0.672501, 0.047413],
                        [-0.011820, 0.042940, 0.968881]]),
    "tritan": np.array([[1.255528, -0.076749, -0.178779], [-0.078411, 0.930809, 0.147602],
                        [0.004733, 0.691367, 0.303900]]),
}  # fmt: skip


def seen_as(colour: str, vision: str) -> np.ndarray[Any, np.dtype[np.float64]]:
    """CIELAB (D65) of an sRGB ``#rrggbb`` as ``vision`` sees it."""
    srgb = np.array([int(colour[i : i + 2], 16) for i in (1, 3, 5)]) / 255
    rgb = np.clip(
        CVD[vision] @ np.where(srgb <= 0.04045, srgb / 12.92, ((srgb + 0.055) / 1.055) ** 2.4), 0, 1
    )
    xyz = np.array([[0.4124, 0.3576, 0.1805], [0.2126, 0.7152, 0.0722], [0.0193, 0.1192, 0.9505]]) @ rgb
    f = (lambda v: np.where(v > (6 / 29) ** 3, np.cbrt(v), v / (3 * (6 / 29) ** 2) + 4 / 29))(
        xyz / np.array([0.95047, 1.0, 1.08883])
    )
    return np.array([116 * f[1] - 16, 500 * (f[0] - f[1]), 200 * (f[1] - f[2])])


def distance(a: str, b: str) -> float:
    """The smallest CIE76 colour difference of ``a`` and ``b`` over normal vision and the three dichromacies
    (about 2.3 is just noticeable; fills in a chart want well over 10)."""
    return min(float(np.linalg.norm(seen_as(a, v) - seen_as(b, v))) for v in CVD)


def fills(svg: str) -> dict[str, str]:
    """The fill of each CSS selector of the drawing's style sheet (one entry per selector of a rule)."""
    style = re.search(r"<style>(.*?)</style>", svg, re.S)
    assert style is not None
    out = {}
    for selectors, fill in re.findall(r"([^{}]+)\{[^{}]*?fill: ([^;]+);", style.group(1)):
        for s in selectors.split(","):
            out[s.strip()] = fill.strip()
    return out


@pytest.mark.slow
def test_every_team_gets_its_own_colour_blind_safe_fill_far_from_the_other_teams_grey(tmp_path: Path) -> None:
    """Eight teams (more than any one palette of colours tells apart) on eight exclusive GPUs: each team's
    fill differs from every other and from another team's grey under protan, deutan and tritan vision, and
    the screenshot shows them all."""
    teams = ["ads", "assistant", "nlp", "research", "search", "speech", "vision", "web"]
    cluster = {
        "nodes": [
            {"name": "gpu-1", "pool": "l40s", "cpu_milli": 64000, "memory_mib": 524288,
             "sharing": "exclusive", "gpus": [{"index": i, "model": "L40S-48GB"} for i in range(8)]}
        ]
    }  # fmt: skip
    workloads = [{"id": f"job-{t}", "team": t, "tier": "standard", "gpus": 1} for t in teams]
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": workloads}))
    inputs = ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.yaml")]
    plan, svg = tmp_path / "plan.json", tmp_path / "map.svg"
    assert main(["plan", *inputs, "--solver", "first-fit", "--now", NOW, "--out", str(plan)]) == 0
    assert main(["map", "--plan", str(plan), *inputs, "--out", str(svg), "--colour", "team"]) == 0
    text = svg.read_text()
    rules = fills(text)
    team_fill = {t: rules[f".by-team .team-{t}"] for t in teams}
    assert len(set(team_fill.values())) == len(teams), team_fill
    other, free = rules[".gpumap .use.other"], rules[".gpumap .free"]
    solid = {t: f for t, f in team_fill.items() if f.startswith("#")}
    # A fill past the palette is a pattern: a palette colour dotted in white, told apart by its texture.
    for t, f in team_fill.items():
        if t not in solid:
            pid = re.fullmatch(r"url\(#([\w-]+)\)", f)
            assert pid is not None, f
            pattern = re.search(rf'<pattern id="{pid.group(1)}"[^>]*>(.*?)</pattern>', text)
            assert pattern is not None and "<circle" in pattern.group(1), f
            base = re.search(r'<rect [^>]*fill="(#[0-9a-f]{6})"', pattern.group(1))
            assert base is not None and base.group(1) in solid.values()
    assert len(solid) >= 6
    for (a, fa), (b, fb) in itertools.combinations(solid.items(), 2):
        assert distance(fa, fb) > 15, (a, fa, b, fb)
    for t, f in solid.items():
        assert distance(f, other) > 20, (t, f, other)
        assert distance(f, free) > 15, (t, f, free)
    # The old palette's research grey was this close to the other teams' grey: far below the bound.
    assert distance("#7f7f7f", "#9e9e9e") < 15
    shot = tmp_path / "team.png"
    browse(svg.as_uri(), tmp_path, shot=shot, dom=False)
    seen = colours(shot)
    assert all(seen[f] > 200 for f in solid.values()), {f: seen[f] for f in solid.values()}


@pytest.mark.slow
def test_the_example_fleet_map(tmp_path: Path) -> None:
    """The bundled example fleet (14 nodes in 4 pools): every node and GPU drawn; the screenshot is the
    README's picture."""
    inputs = ["--cluster", str(EXAMPLES / "cluster.yaml"), "--workloads", str(EXAMPLES / "workloads.yaml")]
    inputs += ["--policy", str(EXAMPLES / "policy.yaml")]
    now = (EXAMPLES / "now.txt").read_text().strip()
    plan = tmp_path / "plan.json"
    assert main(["plan", *inputs, "--solver", "first-fit", "--now", now, "--out", str(plan)]) == 0
    out = tmp_path / "map.html"
    assert main(["map", "--plan", str(plan), *inputs, "--out", str(out)]) == 0
    shot = tmp_path / "map.png"
    page = parse(browse(out.as_uri(), tmp_path, shot=shot))
    cluster = yaml.safe_load((EXAMPLES / "cluster.yaml").read_text())
    rows = [(r["data-node"], r["data-pool"]) for r in page.of("g", "node")]
    assert sorted(rows) == sorted((n["name"], n.get("pool", "")) for n in cluster["nodes"])
    pools = [pool for pool, _ in itertools.groupby(p for _, p in rows)]
    assert len(pools) == len(set(pools)), "a pool's nodes are not drawn together"
    assert len(page.of("rect", "gpu")) == 112
    assert len(page.of("g", "waiting")) == len(json.loads(plan.read_text())["unplaced"])
    assert sum(colours(shot)[c] for c in TIER_PALETTE[:3]) > 10000
    if target := os.environ.get("GPUPLAN_MAP_SCREENSHOT"):
        shutil.copyfile(shot, target)


def test_bad_map_options_are_one_line_errors(
    small: tuple[Path, list[str]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    plan_path, inputs = small
    assert main(["map", "--plan", str(plan_path), *inputs, "--out", str(tmp_path / "map.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--out" in err and ".html or .svg" in err
    other = [w for w in WORKLOADS if w["id"] != "huge-web"]
    cluster, workloads = write_inputs(tmp_path, other)
    args = ["map", "--plan", str(plan_path), "--cluster", str(cluster), "--workloads", str(workloads)]
    assert main([*args, "--out", str(tmp_path / "map.svg")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "other inputs" in err
    assert not (tmp_path / "map.svg").exists()


def test_every_sharing_mode_is_named_under_its_node(tmp_path: Path) -> None:
    """Exclusive, time-sliced, MPS (time-sliced with the GPU Operator's ``mps`` label the Kubernetes
    import keeps), no mode, and MIG on every GPU: each node's label says its mode and replicas."""

    sevens = {"instances": [{"profile": "1g.10gb", "start": s} for s in range(7)]}
    big = 524_288  # MiB of host memory each node has
    cluster = {
        "nodes": [
            node_data("ex", "L40S-48GB", 1, memory_mib=big, sharing="exclusive"),
            node_data("ts", "L40S-48GB", 1, memory_mib=big, sharing={"time-slicing": {"replicas": 2}}),
            node_data(
                "mps",
                "L40S-48GB",
                1,
                memory_mib=big,
                sharing={"time-slicing": {"replicas": 3}},
                labels={"nvidia.com/gpu.sharing-strategy": "mps"},
            ),
            node_data("none", "L40S-48GB", 1, memory_mib=big),
            node_data("mig", memory_mib=big, gpus=[{"index": 0, "model": A100, "mig": sevens}]),
        ]
    }
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump(cluster))
    work = [{"id": "one", "team": "ml", "tier": "standard", "gpus": 1, "gpu_models": ["L40S-48GB"]}]
    (tmp_path / "workloads.yaml").write_text(yaml.safe_dump({"workloads": work}))
    inputs = ["--cluster", str(tmp_path / "cluster.yaml"), "--workloads", str(tmp_path / "workloads.yaml")]
    plan, svg = tmp_path / "plan.json", tmp_path / "map.svg"
    assert main(["plan", *inputs, "--solver", "first-fit", "--now", NOW, "--out", str(plan)]) == 0
    assert json.loads(plan.read_text())["sharing"] == []
    assert main(["map", "--plan", str(plan), *inputs, "--out", str(svg)]) == 0
    text = svg.read_text()
    labels = re.findall(
        r'class="label">([^<]*)<title>[^<]*</title></text><text [^>]*class="mode">([^<]*)<title>', text
    )
    assert dict(labels) == {
        "ex": "exclusive",
        "ts": "time-sliced, 2 replicas",
        "mps": "MPS, 3 replicas",
        "none": "whole or fractions",
        "mig": "MIG",
    }
    layout = " ".join(f"1g.10gb@{s}" for s in range(7))
    assert f'class="mig-layout" data-gpu="0" data-layout="{layout}">7x1g.10gb<' in text
    ticks = dict(
        re.findall(r'data-node="(\w+)"[^>]*>(?:(?!</g>).)*?class="replica" data-replicas="(\d+)"', text)
    )
    assert ticks == {"ts": "2", "mps": "3"}


@pytest.fixture(scope="module")
def mixed_job(live: Server) -> str:
    """A finished plan of the small fleet, labelled ``ml``, holding workloads of ml and web."""
    body = {"cluster": CLUSTER, "workloads": WORKLOADS, "team": "ml"}
    body["options"] = {"solver": "cpsat", "time_limit_s": 2.0, "now": NOW}
    with live.client(PLANNER) as c:
        r = c.post("/v1/plans", params={"wait": 60}, json=body)
        assert r.status_code == 200, r.text
        job: str = r.json()["job"]["id"]
    return job


def test_a_viewers_map_names_only_its_teams_workloads(live: Server, mixed_job: str) -> None:
    with live.client(PLANNER) as c:
        full = c.get(f"/v1/plans/{mixed_job}/map", params={"format": "svg"})
        plan = c.get(f"/v1/plans/{mixed_job}/result").json()["plan"]
    with live.client(VIEWER_ML) as c:
        seen = c.get(f"/v1/plans/{mixed_job}/map")
    assert full.status_code == 200 and full.headers["content-type"].startswith("image/svg+xml")
    assert seen.status_code == 200 and seen.headers["content-type"].startswith("text/html")
    web_placed = [a for a in plan["assignments"] if a["workload"] in WEB]
    assert web_placed, "the plan places no web workload: nothing to hide"
    assert all(w in full.text for w in WEB)
    assert not [w for w in WEB if w in seen.text]
    assert "web" not in seen.text, "the viewer's map names another team"
    assert "nb-ml" in seen.text and "huge-ml" in seen.text
    # Other teams' work is still drawn, anonymously.
    others = [r for r in parse(seen.text).of("rect", "other") if "data-node" in r]
    assert len(others) == sum(len(a["gpus"]) for a in web_placed)


def test_bad_map_queries_name_the_parameter(live: Server, mixed_job: str) -> None:
    with live.client(VIEWER_ML) as c:
        for param, value in (("colour", "pink"), ("format", "png")):
            r = c.get(f"/v1/plans/{mixed_job}/map", params={param: value})
            assert r.status_code == 422, r.text
            assert param in json.dumps(r.json()), r.text
        assert c.get(f"/v1/plans/{'0' * 32}/map").status_code == 404
