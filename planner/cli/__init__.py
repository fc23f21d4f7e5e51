"""The ``gpuplan`` command line.

Each command group is a module named in :data:`GROUPS` by its path and the function that adds its
sub-commands to the parser, imported when the parser is built, as the solver registry does: ``serve``
belongs to the API (``gpuplan.api.cli``) and the planner never imports the API. A group module imports
only what its parser needs; its commands import the heavy modules (planning, pandas exports, the
capacity MILPs, the SQLAlchemy plan history, FastAPI) when they run, so that ``gpuplan --help`` and
``gpuplan plan`` start fast: a ``--time-limit`` counts from the process start.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Iterator, Sequence

from pydantic import ValidationError

from gpuplan.models.base import InputError
from gpuplan.planner.cli.common import EXIT_INPUT, EXIT_OK, Subparsers, add_common_options, command_context
from gpuplan.planner.pipeline.deadline import command_start

#: What ``gpuplan --help`` says first.
DESCRIPTION = "The ``gpuplan`` command line: plan, validate, schema, demo and import."
#: The command groups, in the order ``gpuplan --help`` lists them: module and the function of it that
#: registers the group's sub-commands.
GROUPS: tuple[tuple[str, str], ...] = (
    ("gpuplan.planner.cli.plan", "add_parsers"),
    ("gpuplan.planner.cli.imports", "add_parsers"),
    ("gpuplan.planner.cli.rounds", "add_parsers"),
    ("gpuplan.planner.cli.history", "add_parsers"),
    ("gpuplan.planner.cli.capacity", "add_parsers"),
    ("gpuplan.api.cli", "add_parsers"),
    ("gpuplan.planner.cli.keys", "add_parsers"),
    ("gpuplan.planner.cli.explain", "add_parsers"),
    ("gpuplan.planner.cli.cluster_map", "add_parsers"),
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
    for module, name in GROUPS:
        register: Callable[[Subparsers], None] = getattr(importlib.import_module(module), name)
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
