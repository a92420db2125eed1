"""Command lines that fail in one clear line: the parser, the error convention and the shared
options, written once.

Every ``python -m`` entry point of the package builds its parser with :class:`OneLineParser`
(an argument error is one line naming the option, without the usage block; ``--help`` shows
everything) and runs its body through :func:`run`, which turns a ``ValueError`` or ``OSError``
into one line on stderr and exit status 2 (a ``MemoryError`` too) — unless ``--debug`` asks
for the traceback.

Values are checked when they are parsed: the ``type=`` callables :func:`positive_int`,
:func:`nonnegative_int`, :func:`positive_float`, :func:`temperature` and
:func:`positive_temperature` apply the checks of :mod:`treespec_sim.validation` (its messages),
so ``--workers 0`` fails as ``prog: error: argument --workers: must be a positive integer;
got 0`` (exit status 2) before anything runs. The options that several entry points share are
added by one helper each (:func:`add_out`, :func:`add_seed`, :func:`add_device`, ...): the same
name, type and value check everywhere; the default and the help text are the caller's where
the entry points legitimately differ.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from .validation import check_nonnegative_int, check_positive_int, check_temperature

__all__ = ["DEVICE_HELP", "OneLineParser", "add_budgets", "add_checkpoints", "add_debug",
           "add_device", "add_dtype", "add_json_flag", "add_new_tokens", "add_out",
           "add_prompts", "add_repeats", "add_seed", "add_temperature", "add_threads",
           "nonnegative_int", "positive_float", "positive_int", "positive_temperature", "run",
           "run_subcommand", "temperature"]

#: The help of ``--device`` (the devices :func:`real_models.bundle.check_device` accepts).
DEVICE_HELP = "'cpu', 'cuda', 'cuda:N' or 'mps' (default: %(default)s)"


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
    except MemoryError:
        if getattr(args, "debug", False):
            raise
        print(f"{parser.prog}: error: out of memory (a file's contents within the readers' "
              "limits, docs/traces.md 'What the readers guarantee', still did not fit; lower "
              "them or free memory)", file=sys.stderr)
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


# --------------------------------------------------------------------- value types (type=)
def _checked(check: Callable, value, **kwargs):
    """``check(value)`` with its ``ValueError`` as argparse's error; argparse prefixes the
    option (``argument --workers: must be ...``), so the check is given no name."""
    try:
        return check(value, "", **kwargs)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc).strip()) from None


def _number(text: str, kind: type):
    """``kind(text)``, or argparse's own message for a value that is not a number."""
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"invalid {kind.__name__} value: {text!r}") from None


def positive_int(text: str) -> int:
    """``type=``: an integer ``>= 1`` (:func:`~treespec_sim.validation.check_positive_int`)."""
    return _checked(check_positive_int, _number(text, int))


def nonnegative_int(text: str) -> int:
    """``type=``: an integer ``>= 0``
    (:func:`~treespec_sim.validation.check_nonnegative_int`)."""
    return _checked(check_nonnegative_int, _number(text, int))


def positive_float(text: str) -> float:
    """``type=``: a finite number ``> 0`` (the finite-and-positive check of
    :func:`~treespec_sim.validation.check_temperature`, which is not specific to
    temperatures)."""
    return _checked(check_temperature, _number(text, float), positive=True)


def temperature(text: str) -> float:
    """``type=``: a sampling temperature, finite and ``>= 0`` (``0``: greedy)
    (:func:`~treespec_sim.validation.check_temperature`)."""
    return _checked(check_temperature, _number(text, float))


def positive_temperature(text: str) -> float:
    """``type=``: a sampling temperature, finite and ``> 0`` (for what needs sampling)."""
    return _checked(check_temperature, _number(text, float), positive=True)


# --------------------------------------------------------------------- shared options
def add_out(parser: argparse.ArgumentParser, help: str | None = None, *,
            metavar: str | None = None, default: Path | None = None,
            required: bool = False) -> None:
    """Add ``--out`` (a path: the file or folder to write; what it is, the caller's help)."""
    parser.add_argument("--out", type=Path, metavar=metavar, default=default,
                        required=required, help=help)


def add_seed(parser: argparse.ArgumentParser, help: str | None = None, *,
             default: int | None = 0) -> None:
    """Add ``--seed`` (an integer ``>= 0``, as ``numpy.random.default_rng`` takes)."""
    parser.add_argument("--seed", type=nonnegative_int, default=default, help=help)


def add_device(parser: argparse.ArgumentParser) -> None:
    """Add ``--device`` (default ``cpu``; the model code checks it before loading anything)."""
    parser.add_argument("--device", default="cpu", help=DEVICE_HELP)


def add_dtype(parser: argparse.ArgumentParser, choices: Sequence[str], help: str) -> None:
    """Add ``--dtype``, one of ``choices`` (default ``None``: the caller's default dtype)."""
    parser.add_argument("--dtype", choices=sorted(choices), default=None, help=help)


def add_threads(parser: argparse.ArgumentParser,
                help: str = "torch threads (default: %(default)s)") -> None:
    """Add ``--threads`` (an integer ``>= 1``, default 1)."""
    parser.add_argument("--threads", type=positive_int, default=1, help=help)


def add_checkpoints(parser: argparse.ArgumentParser) -> None:
    """Add ``--target DIR`` and ``--drafter DIR`` (default ``None``: the shipped tiny models)."""
    parser.add_argument("--target", type=Path, metavar="DIR", default=None,
                        help="target checkpoint directory (default: the shipped tiny target)")
    parser.add_argument("--drafter", type=Path, metavar="DIR", default=None,
                        help="drafter checkpoint directory (default: the shipped tiny "
                             "drafter)")


def add_temperature(parser: argparse.ArgumentParser, *, default: float, help: str,
                    positive: bool = False) -> None:
    """Add ``--temperature T``: ``>= 0`` (``0``: greedy), ``> 0`` with ``positive=True``."""
    parser.add_argument("--temperature", type=positive_temperature if positive else temperature,
                        metavar="T", default=default, help=help)


def add_prompts(parser: argparse.ArgumentParser, *, default: int | None,
                help: str = "held-out prompts (default: %(default)s)") -> None:
    """Add ``--prompts N`` (how many prompts to decode, ``>= 1``)."""
    parser.add_argument("--prompts", type=positive_int, metavar="N", default=default, help=help)


def add_new_tokens(parser: argparse.ArgumentParser, *, default: int | None,
                   help: str = "tokens to generate per prompt (default: %(default)s)") -> None:
    """Add ``--new-tokens N`` (tokens to generate per prompt, ``>= 1``)."""
    parser.add_argument("--new-tokens", type=positive_int, metavar="N", default=default,
                        help=help)


def add_repeats(parser: argparse.ArgumentParser, *, default: int, help: str | None = None
                ) -> None:
    """Add ``--repeats N`` (timed repetitions, ``>= 1``)."""
    parser.add_argument("--repeats", type=positive_int, metavar="N", default=default, help=help)


def add_budgets(parser: argparse.ArgumentParser, *, default: Sequence[int],
                help: str | None = None) -> None:
    """Add ``--budgets B [B ...]`` (tree budgets, each ``>= 1``)."""
    parser.add_argument("--budgets", type=positive_int, nargs="+", metavar="B",
                        default=list(default), help=help)


def add_json_flag(parser: argparse.ArgumentParser,
                  help: str = "print results as JSON only") -> None:
    """Add ``--json`` (a flag: print the results as JSON and nothing else)."""
    parser.add_argument("--json", action="store_true", help=help)
