"""Command lines that fail in one clear line: the parser and the error convention, written once.

Every ``python -m`` entry point of the package builds its parser with :class:`OneLineParser`
(an argument error is one line naming the option, without the usage block; ``--help`` shows
everything) and runs its body through :func:`run`, which turns a ``ValueError`` or ``OSError``
into one line on stderr and exit status 2 — unless ``--debug`` asks for the traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

__all__ = ["OneLineParser", "add_debug", "run", "run_subcommand"]


class OneLineParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line (no usage block; ``--help`` has it)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}\n")


def add_debug(parser: argparse.ArgumentParser) -> None:
    """Add ``--debug`` (show the traceback of an error instead of one line)."""
    parser.add_argument("--debug", action="store_true",
                        help="show the full traceback of an error instead of one line")


def run(parser: argparse.ArgumentParser, args: argparse.Namespace,
        body: Callable[[argparse.Namespace], int]) -> int:
    """``body(args)``, with bad input reported as one line on stderr (exit status 2)."""
    try:
        return body(args)
    except (ValueError, OSError) as exc:
        if getattr(args, "debug", False):
            raise
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{parser.prog}: interrupted", file=sys.stderr)
        return 130


def run_subcommand(parser: argparse.ArgumentParser, argv, body: Callable[[argparse.Namespace], int]
                   ) -> int:
    """Parse ``argv`` with a parser of subcommands (``dest="cmd"``) and :func:`run` ``body``,
    its one-line errors naming the subcommand (``prog cmd: error: ...``), as argparse's own
    errors in the subcommand's options do."""
    args = parser.parse_args(argv)
    command = OneLineParser(prog=f"{parser.prog} {args.cmd}", add_help=False)
    return run(command, args, body)
