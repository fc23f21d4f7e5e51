"""The ``gpuplan`` command line.

Each command group is a module whose ``add_parsers`` adds its sub-commands to the parser
(:data:`GROUPS`). The command line is the outermost layer: ``serve`` and ``worker`` are the API's
(``gpuplan.api.cli``), the one import from the planner's tree into the API (see the layer contract in
``pyproject.toml``). A group module imports only what its parser needs; its commands import the heavy
modules (planning, pandas exports, the capacity MILPs, the SQLAlchemy plan history, FastAPI) when they
run, so that ``gpuplan --help`` and ``gpuplan plan`` start fast: a ``--time-limit`` counts from the
process start.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable, Iterator, Sequence

from pydantic import ValidationError

from gpuplan.api import cli as api_cli
from gpuplan.models.base import InputError
from gpuplan.planner.cli import capacity, cluster_map, explain, history, imports, keys, plan, rounds
from gpuplan.planner.cli.common import EXIT_INPUT, EXIT_OK, Subparsers, add_common_options, command_context
from gpuplan.planner.pipeline.deadline import command_start

#: What ``gpuplan --help`` says first.
DESCRIPTION = "The ``gpuplan`` command line: plan, validate, schema, demo and import."
#: The functions that register each command group's sub-commands, in the order ``gpuplan --help``
#: lists them.
GROUPS: tuple[Callable[[Subparsers], None], ...] = (
    plan.add_parsers,
    imports.add_parsers,
    rounds.add_parsers,
    history.add_parsers,
    capacity.add_parsers,
    api_cli.add_parsers,
    keys.add_parsers,
    explain.add_parsers,
    cluster_map.add_parsers,
)


def _commands(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """The parsers of the commands under ``parser`` (``import mig`` under ``import``)."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for command in dict.fromkeys(action.choices.values()):
                subs = list(_commands(command))
                yield from subs or [command]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every sub-command."""
    parser = argparse.ArgumentParser(prog="gpuplan", description=DESCRIPTION)
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress")
    add_common_options(parser, top=True)
    sub = parser.add_subparsers(dest="command", required=True)
    for register in GROUPS:
        register(sub)
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
