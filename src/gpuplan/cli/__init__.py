"""The ``gpuplan`` command line: every command, grouped by use in ``gpuplan --help``.

Each command group is a module whose ``add_parsers`` adds its sub-commands to the parser
(:data:`GROUPS`). The command line is the outermost layer, in the root package on top of both the API
and the planner (see the layer contract in ``pyproject.toml``): ``serve`` and ``worker`` are the API's
(``gpuplan.api.cli``), every other command the planner's. A group module imports only what its parser
needs; its commands import the heavy modules (planning, pandas exports, the capacity MILPs, the
SQLAlchemy plan history, FastAPI) when they run, so that ``gpuplan --help`` and ``gpuplan plan`` start
fast: a ``--time-limit`` counts from the process start.
"""

from __future__ import annotations

import argparse
import logging
import sys
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import cast

from pydantic import ValidationError

from gpuplan.api import cli as api_cli
from gpuplan.cli import (
    capacity,
    cluster_map,
    explain,
    frontier,
    history,
    horizon,
    imports,
    plan,
    policy,
    request,
    rounds,
)
from gpuplan.cli.common import EXIT_INPUT, EXIT_OK, Subparsers, add_common_options, command_context
from gpuplan.cli.parser import Parser
from gpuplan.models.base import InputError
from gpuplan.planner.pipeline.deadline import command_start

#: What ``gpuplan --help`` says first.
DESCRIPTION = (
    "gpuplan places GPU workloads on a cluster: it plans who runs where (whole GPUs, MIG slices, "
    "time-sliced shares), says why the rest waits and what would place it, and checks any plan against "
    "the same rules."
)
#: The commands ``gpuplan --help`` lists, grouped by use, each with one example line.
COMMAND_GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    (
        "plan and check",
        (
            ("demo", "gpuplan demo"),
            ("plan", "gpuplan plan --cluster cluster.yaml --workloads workloads.csv --out plan.json"),
            ("validate", "gpuplan validate --cluster cluster.yaml --workloads workloads.csv --plan p.json"),
            ("capacity-gap", "gpuplan capacity-gap --cluster cluster.yaml --workloads workloads.csv"),
            ("capacity-plan", "gpuplan capacity-plan --cluster c.yaml --workloads w.csv --growth g.yaml"),
            ("simulate", "gpuplan simulate --rho 0.9 --hours 2"),
            ("policy-cost", "gpuplan policy-cost --cluster cluster.yaml --workloads w.csv --policy p.yaml"),
            ("frontier", "gpuplan frontier --cluster cluster.yaml --workloads w.csv --out frontier.json"),
        ),
    ),
    (
        "explain and look",
        (
            ("explain", "gpuplan explain nlp/finetune --plan plan.json"),
            ("map", "gpuplan map --plan plan.json --cluster cluster.yaml --workloads w.csv --out map.html"),
            ("schema", "gpuplan schema workloads"),
        ),
    ),
    (
        "import and export",
        (
            ("import", "gpuplan import topo topo.txt --name node-01 --model H100 --cpu-milli 96000 "
             "--memory-mib 1048576"),
            ("export", "gpuplan export --plan plan.json --xlsx plan.xlsx"),
            ("request", "gpuplan request --cluster cluster.yaml --workloads workloads.csv > request.json"),
        ),
    ),
    (
        "nightly and history",
        (
            ("replan", "gpuplan replan --cluster cluster.yaml --workloads workloads.csv --db plans.db"),
            ("history", "gpuplan history list"),
            ("replay", "gpuplan replay --db plans.db --policy new-policy.yaml --last 7"),
        ),
    ),
    (
        "service",
        (
            ("serve", "gpuplan serve --create-admin-key"),
            ("worker", "gpuplan worker --database postgresql://..."),
            ("keys", "gpuplan keys create --role planner --expires 30d"),
        ),
    ),
)  # fmt: skip
#: The functions that register each command group's sub-commands, in the order ``gpuplan --help``
#: lists them.
GROUPS: tuple[Callable[[Subparsers], None], ...] = (
    plan.add_parsers,
    imports.add_parsers,
    request.add_parsers,
    rounds.add_parsers,
    history.add_parsers,
    capacity.add_parsers,
    api_cli.add_parsers,
    explain.add_parsers,
    cluster_map.add_parsers,
    horizon.add_parsers,
    policy.add_parsers,
    frontier.add_parsers,
)


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parsers of the commands under ``parser`` (``import mig`` under ``import``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                subs = list(_commands(command))
                yield from subs or [command]


def _epilog(sub: Subparsers) -> str:
    """The commands by use (:data:`COMMAND_GROUPS`): each with its one-line help and an example."""
    helps = {a.dest: a.help or "" for a in sub._choices_actions}
    lines: list[str] = []
    for title, commands in COMMAND_GROUPS:
        lines.append(f"{title}:")
        for name, example in commands:
            lines.append(f"  {name:<14}{helps[name]}")
            lines.append(f"  {'':<14}  $ {example}")
        lines.append("")
    lines.append("gpuplan COMMAND --help shows a command's options.")
    return "\n".join(lines)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command; ``--help`` lists them grouped by use."""
    parser = Parser(
        prog="gpuplan",
        usage="gpuplan [-h] [-v] [-q] [--hardware-catalog FILE] COMMAND ...",
        description=textwrap.fill(DESCRIPTION, 100),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    add_common_options(parser, top=True)
    # The epilog lists the commands by use; argparse's own list (in registration order) is hidden.
    # Sub-command parsers are Parsers too (argparse makes them of the parent's class).
    sub = cast(
        "Subparsers",
        parser.add_subparsers(
            dest="command", required=True, metavar="COMMAND", help=argparse.SUPPRESS, prog="gpuplan"
        ),
    )
    for register in GROUPS:
        register(sub)
    parser.epilog = _epilog(sub)
    for command in _commands(parser):
        add_common_options(command, top=False)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``gpuplan`` console script."""
    args = build_parser().parse_args(argv)
    # A --time-limit counts from the process start when the process runs just this command.
    args.started = command_start(whole_process=argv is None)
    logging.basicConfig(
        level=logging.ERROR if args.quiet else logging.INFO if args.verbose else logging.WARNING,
        format="gpuplan: %(levelname)s: %(message)s",
        stream=sys.stderr,
    )
    func: Callable[[argparse.Namespace], int] = args.func
    try:
        with command_context(args, console=argv is None) as progress:
            args.progress = progress
            return func(args)
    except InputError as exc:
        print(f"gpuplan: error: {exc}", file=sys.stderr)
        return EXIT_INPUT
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        print(f"gpuplan: error: {'.'.join(map(str, first['loc']))}: {first['msg']}", file=sys.stderr)
        return EXIT_INPUT
    except BrokenPipeError:
        return EXIT_OK
