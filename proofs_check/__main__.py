"""``python -m proofs_check``: run every theorem check and print the table; or check a verifier.

``--json`` prints only the table, as a JSON list of objects with keys ``theorem``, ``kind``,
``instances``, ``max_violation``, ``tolerance`` and ``passed``. The exit status is 1 if any
``theorem`` or ``caught[...]`` row fails; ``claim`` rows (published claims about reconstructed
methods, measured) are reported but do not decide the exit status.

``python -m proofs_check verifier MODULE:FUNCTION --scheme S [--rounds N] [--seed K]``: check
one verifier for losslessness (:func:`proofs_check.check_verifier`). ``MODULE`` is an importable
module (``mypkg.verify``) or a ``.py`` file (``./my_verifier.py``); ``FUNCTION`` the sampler
``fn(tree, target_rows, proposal, rng) -> tokens`` in it (``--exact``: its exact round law).
Exit status 0: no loss found; 1: loss found (the worst case is printed); 2: bad input (no such
module or function, a bad option, a function that raised or returned something that is not a
round's output).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
import time

from treespec_sim.cli import OneLineParser, add_debug, add_json_flag, add_seed, positive_int, run
from treespec_sim.files import check_file

from .checker import (
    DEFAULT_CASES,
    DEFAULT_ROUNDS,
    SCHEMES,
    check_verifier,
    rule_law,
    rule_sampler,
)
from .theorems import CHECKS, run_checks


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m proofs_check``."""
    parser = OneLineParser(
        prog="python -m proofs_check",
        description="Run every theorem of the verification theory as an exact check, with "
                    "known-buggy variants that must be caught, witnesses and measured claims.",
        epilog="exit status: 0 every theorem and caught[...] row passed, 1 one failed, "
               "2 bad input. To check a verifier of your own: python -m proofs_check verifier "
               "MODULE:FUNCTION --scheme S (python -m proofs_check verifier --help)")
    parser.add_argument("--size", type=int, default=10,
                        help="instances per check, in units (default: %(default)s; under a "
                             "minute)")
    add_seed(parser, "base seed (default: %(default)s)")
    parser.add_argument("--only", metavar="TEXT", default=None,
                        help="run only checks whose name contains TEXT (default: all)")
    add_json_flag(parser, "print only the table, as JSON")
    parser.add_argument("--list", action="store_true", help="list the checks and exit")
    add_debug(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["verifier"]:
        vparser = build_verifier_parser()
        return run(vparser, vparser.parse_args(argv[1:]), _verifier_main)
    parser = build_parser()
    return run(parser, parser.parse_args(argv), _main)


def build_verifier_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m proofs_check verifier``."""
    parser = OneLineParser(
        prog="python -m proofs_check verifier",
        description="Check a verifier for losslessness: it verifies trees of small random "
                    "worlds many times, sequences are decoded on for several rounds, and the "
                    "law of the committed tokens is tested against the target's exact law.",
        epilog="exit status: 0 no loss found, 1 loss found (worst case printed), 2 bad input")
    parser.add_argument("target", metavar="MODULE:FUNCTION", nargs="?",
                        help="a module path (pkg.mod) or a .py file, and the sampler "
                             "fn(tree, target_rows, proposal, rng) -> tokens in it")
    parser.add_argument("--rule", metavar="NAME", default=None,
                        help="check a rule of treespec's rule table instead (e.g. univer, "
                             "sample-match, block, sibling-ratio)")
    parser.add_argument("--scheme", required=True, choices=SCHEMES,
                        help="how the trees' tokens are chosen: top-k (deterministic), i.i.d. "
                             "draws, draws without replacement in node order, or a chain")
    parser.add_argument("--rounds", type=positive_int, default=DEFAULT_ROUNDS,
                        help="calls of FUNCTION per case (default: %(default)s)")
    parser.add_argument("--cases", type=positive_int, default=DEFAULT_CASES,
                        help="cases: worlds and tree shapes (default: %(default)s)")
    add_seed(parser, "seed of the cases and of every draw (default: %(default)s)")
    parser.add_argument("--exact", action="store_true",
                        help="FUNCTION is the exact round law law(tree, target_rows, proposal) "
                             "-> {tokens: probability}: enumerate instead of sampling (V <= 4)")
    parser.add_argument("--planted", action="store_true",
                        help="also plant a loss of TV 0.02 in FUNCTION and report whether the "
                             "same check finds it (twice the time)")
    add_json_flag(parser, "print the report as JSON")
    add_debug(parser)
    return parser


def load_function(target: str):
    """``MODULE:FUNCTION`` -> the callable (``MODULE`` a module path or a ``.py`` file)."""
    module_name, sep, attr = str(target).rpartition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"expected MODULE:FUNCTION (e.g. my_verifier.py:verify); got "
                         f"{target!r}")
    if module_name.endswith(".py") or os.sep in module_name or "/" in module_name:
        path = check_file(module_name, "verifier module")
        spec = importlib.util.spec_from_file_location(f"_checked_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise ValueError(f"cannot load {module_name} as a Python module")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.resolve().parent))
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's module failed to import
            raise ValueError(f"importing {module_name} failed: {type(exc).__name__}: "
                             f"{exc}") from None
        finally:
            sys.path.remove(str(path.resolve().parent))
    else:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            raise ValueError(f"no module named {exc.name!r} (importing {module_name!r}; a file "
                             "is given as path/to/file.py)") from None
        except Exception as exc:  # the user's module failed to import
            raise ValueError(f"importing {module_name} failed: {type(exc).__name__}: "
                             f"{exc}") from None
    fn = module
    for part in attr.split("."):
        if not hasattr(fn, part):
            raise ValueError(f"{module_name} has no {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ValueError(f"{target} is not callable")
    return fn


def _guarded(fn, name: str):
    """``fn`` with any exception it raises as a ``ValueError`` naming it (bad input)."""
    def call(*args):
        try:
            return fn(*args)
        except Exception as exc:  # the user's verifier failed: bad input, not a loss
            raise ValueError(f"{name} raised {type(exc).__name__}: {exc}") from None
    return call


def _verifier_main(args: argparse.Namespace) -> int:
    if (args.target is None) == (args.rule is None):
        raise ValueError("give MODULE:FUNCTION or --rule NAME (one of them)")
    if args.rule is not None:
        fn = rule_law(args.rule) if args.exact else rule_sampler(args.rule)
    else:
        fn = _guarded(load_function(args.target), args.target)
    if args.exact:
        report = check_verifier(law=fn, scheme=args.scheme, cases=args.cases, seed=args.seed)
    else:
        report = check_verifier(fn, scheme=args.scheme, rounds=args.rounds, cases=args.cases,
                                seed=args.seed, planted=args.planted)
    if args.json:
        print(json.dumps(report.to_json(), indent=1))
    else:
        print(report.summary())
    return 0 if report.lossless else 1


def _main(args: argparse.Namespace) -> int:
    if args.size < 1:
        raise ValueError(f"--size must be >= 1; got {args.size}")
    if args.list:
        for c in CHECKS:
            print(f"{c.theorem:42s} {c.kind:8s} {c.statement}")
        return 0
    if args.only is not None and not any(args.only in c.theorem for c in CHECKS):
        raise ValueError(f"no check matches --only {args.only!r} (--list lists them)")
    start = time.perf_counter()
    results = run_checks(size=args.size, seed=args.seed, only=args.only)
    if not results:
        raise ValueError(f"no check matches --only {args.only!r} (--list lists them)")
    failed = [r for r in results if not r.passed and r.kind != "claim"]
    if args.json:
        rows = [{"theorem": r.theorem, "kind": r.kind, "instances": int(r.instances),
                 "max_violation": float(r.max_violation), "tolerance": float(r.tolerance),
                 "passed": bool(r.passed)} for r in results]
        print(json.dumps(rows, indent=1))
        return 1 if failed else 0
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title="proofs_check")
    for col in ("theorem", "kind", "instances", "worst violation", "tolerance", "result",
                "seconds"):
        table.add_column(col, justify="left" if col in ("theorem", "kind") else "right")
    for r in results:
        if r.kind == "caught":
            verdict = "caught" if r.passed else "MISSED"
        elif r.kind == "witness":
            verdict = "found" if r.passed else "NOT FOUND"
        elif r.kind == "claim":
            verdict = "holds" if r.passed else "does not hold"
        else:
            verdict = "pass" if r.passed else "FAIL"
        table.add_row(escape(r.theorem), r.kind, str(r.instances), f"{r.max_violation:.3g}",
                      f"{r.tolerance:.0e}", verdict, f"{r.seconds:.1f}")
    console = Console(width=150)
    console.print(table)
    console.print(f"{len(results)} checks, {len(failed)} failed, "
                  f"{time.perf_counter() - start:.1f} s. For caught[...] rows the violation is "
                  f"the losslessness gap of a known-buggy variant, which must exceed the "
                  f"tolerance.")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
