"""``python -m proofs_check``: run every theorem check and print the table.

``--json`` prints only the table, as a JSON list of objects with keys ``theorem``, ``kind``,
``instances``, ``max_violation``, ``tolerance`` and ``passed``. The exit status is 1 if any
``theorem`` or ``caught[...]`` row fails; ``claim`` rows (published claims about reconstructed
methods, measured) are reported but do not decide the exit status.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from treespec_sim.cli import OneLineParser, add_debug, add_json_flag, add_seed, run

from .theorems import CHECKS, run_checks


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``python -m proofs_check``."""
    parser = OneLineParser(
        prog="python -m proofs_check",
        description="Run every theorem of the verification theory as an exact check, with "
                    "known-buggy variants that must be caught, witnesses and measured claims.",
        epilog="exit status: 0 every theorem and caught[...] row passed, 1 one failed, "
               "2 bad input")
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
    parser = build_parser()
    return run(parser, parser.parse_args(argv), _main)


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
