"""The command line's argument parser: argparse without abbreviations, whose errors suggest the closest
command, flag or value ("did you mean").

argparse takes ``--allow-other-model`` as ``--allow-other-models`` (abbreviations), answers a misspelt
flag beside a required one with the required one (``--clustr`` gives ``required: --cluster``) and lists
every choice of a misspelt command or value without naming the one meant. This parser never abbreviates,
names an unknown flag before a missing required one, and ends each such error with the closest names.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from gpuplan.models.base import did_you_mean

#: argparse's message for a value outside ``choices`` (commands, ``--solver``, ``schema KIND`` ...).
_INVALID_CHOICE = re.compile(r"invalid choice: '(?P<value>[^']*)' \(choose from (?P<choices>.*)\)$")
#: argparse's messages for flags it does not know and for required ones missing.
_UNRECOGNIZED = "unrecognized arguments: "
_REQUIRED = "the following arguments are required: "


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` that never abbreviates flags and suggests the closest name in its errors
    (its sub-command parsers are of this class too: ``add_subparsers`` makes them of the parent's)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["allow_abbrev"] = False
        super().__init__(*args, **kwargs)
        self._given: list[str] = []

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        self._given = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def error(self, message: str) -> NoReturn:
        """Exit 2 with ``message``, naming an unknown flag first and ending with the closest names."""
        super().error(self._suggested(message))

    def _suggested(self, message: str) -> str:
        choice = _INVALID_CHOICE.search(message)
        if choice is not None:  # the closest choice instead of them all, when one is close
            hint = did_you_mean(choice["value"], re.findall(r"'([^']*)'", choice["choices"]))
            return (
                f"{message[: choice.start()]}invalid choice: '{choice['value']}'{hint}" if hint else message
            )
        if message.startswith(_UNRECOGNIZED):
            flags = [t for t in message.removeprefix(_UNRECOGNIZED).split() if t.startswith("-")]
            if flags:
                return _unknown_flag(flags[0], _every_flag(self))
        if message.startswith(_REQUIRED):
            known = set(self._option_string_actions)
            unknown = [t.split("=", 1)[0] for t in self._given if t.startswith("--")]
            unknown = [t for t in unknown if t not in known]
            if unknown:
                return _unknown_flag(unknown[0], known)
        return message


def _unknown_flag(flag: str, known: Sequence[str] | set[str]) -> str:
    """``unrecognized argument --time-limt (did you mean --time-limit?)``."""
    return f"unrecognized argument {flag}{did_you_mean(flag, sorted(known))}"


def _every_flag(parser: argparse.ArgumentParser) -> list[str]:
    """The flags of ``parser`` and of every sub-command under it (the top parser reports a sub-command's
    unknown flags)."""
    return sorted(set(_flags(parser)))


def _flags(parser: argparse.ArgumentParser) -> Iterator[str]:
    yield from parser._option_string_actions
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _flags(sub)
