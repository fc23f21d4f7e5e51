"""``gpuplan map``: draw a plan as a cluster map (one self-contained HTML or SVG file)."""

from __future__ import annotations

import argparse
from pathlib import Path

from gpuplan.cli import common
from gpuplan.models.base import InputError
from gpuplan.models.catalog import default_catalog
from gpuplan.planner.io.files import load_plan

#: Output formats by file suffix.
FORMATS = (".html", ".svg")


def cmd_map(args: argparse.Namespace) -> int:
    """Draw the plan made from the given inputs and write it to ``--out``."""
    from gpuplan.planner.io.exporters.map import render_html, render_svg

    out = Path(args.out)
    if out.suffix.lower() not in FORMATS:
        raise InputError(f"--out {args.out}: the file name must end in .html or .svg")
    plan = load_plan(Path(args.plan))
    catalog = default_catalog()
    inp = common.input_from_args(args, catalog)
    common.check_made_from(plan, inp, args.plan)
    if out.suffix.lower() == ".svg":
        text = render_svg(plan, inp, catalog, colour=args.colour)
    else:
        text = render_html(
            plan, inp, catalog, title=f"gpuplan cluster map: {Path(args.plan).name}", colour=args.colour
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    print(f"map written to {out}")
    return common.EXIT_OK


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``map``."""
    p = sub.add_parser("map", help="draw a plan as a cluster map (HTML with a colour switch, or SVG)")
    p.add_argument("--plan", required=True, help="plan JSON")
    common.add_input_options(p)
    p.add_argument("--out", required=True, help="map.html (self-contained page) or map.svg")
    p.add_argument(
        "--colour",
        choices=("tier", "team"),
        default="tier",
        help="colour work by tier or team (default tier)",
    )
    p.set_defaults(func=cmd_map)
