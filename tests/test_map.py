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

from gpuplan.models.catalog import data_dir
from gpuplan.planner.cli import main
from gpuplan.planner.io.exporters.map import TEAM_PALETTE, TIER_PALETTE
from tests._api import PLANNER, VIEWER_ML, Server, live

__all__ = ["live"]

EXAMPLES = data_dir() / "examples"
NOW = "2026-11-29T12:00:00+00:00"
A100 = "A100-SXM4-80GB"
#: Two A100s joined by NVLink (0-1, 2-3), two of them MIG-partitioned; two L40S for fractions.
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
        },
        {
            "name": "shared-1",
            "pool": "shared",
            "cpu_milli": 64000,
            "memory_mib": 524288,
            "gpus": [{"index": 0, "model": "L40S-48GB"}, {"index": 1, "model": "L40S-48GB"}],
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
WINDOW = (1400, 900)


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

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found.append((tag, {k: v or "" for k, v in attrs}))

    def of(self, tag: str, cls: str) -> list[dict[str, str]]:
        """The attributes of each ``tag`` element with class ``cls``."""
        return [a for t, a in self.found if t == tag and cls in a.get("class", "").split()]


def parse(dom: str) -> Elements:
    found = Elements()
    found.feed(dom)
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
    assert near(seen, "#e07b00") > 50, "no hatching"


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
