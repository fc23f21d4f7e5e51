"""``gpuplan request``: the JSON body ``POST /v1/plans`` takes, made from the CSV and YAML input files."""

from __future__ import annotations

import argparse
import json
from typing import Any

from gpuplan.cli import common


def request_body(args: argparse.Namespace) -> dict[str, Any]:
    """The planning request of ``--cluster``, ``--workloads`` and ``--policy`` with the solve options given;
    the files are checked as ``gpuplan plan`` checks them, so a body printed is one the API accepts."""
    inp = common.input_from_args(args)
    options: dict[str, Any] = {"solver": args.solver}
    if args.time_limit is not None:
        options["time_limit_s"] = args.time_limit
    body: dict[str, Any] = {
        "cluster": inp.cluster.model_dump(mode="json", by_alias=True, exclude_none=True),
        "workloads": [w.model_dump(mode="json", by_alias=True, exclude_none=True) for w in inp.workloads],
        "policy": inp.policy.model_dump(mode="json", by_alias=True, exclude_none=True),
        "options": options,
    }
    if args.team:
        body["team"] = args.team
    return body


def cmd_request(args: argparse.Namespace) -> int:
    """Print the REST API's planning request for the input files."""
    print(json.dumps(request_body(args), indent=None if args.compact else 2))
    return common.EXIT_OK


def add_parsers(sub: common.Subparsers) -> None:
    """Register ``request``."""
    p = sub.add_parser("request", help="print the JSON body POST /v1/plans takes, made from the input files")
    common.add_input_options(p)
    common.add_solver_option(p)
    p.add_argument("--time-limit", type=float, help="seconds (default: the server's)")
    p.add_argument("--team", help="team owning the plan (default: the workloads' team when they share one)")
    p.add_argument("--compact", action="store_true", help="one line, no indentation")
    p.set_defaults(func=cmd_request)
