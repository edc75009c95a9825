"""`python -m sparkctl evals compare A B`: paired pass/fail comparison with the exact McNemar p (sparkctl/evals.py)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sparkctl import evals


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("evals", help="compare eval results (paired, exact McNemar)",
                              description="Paired comparisons of per-problem eval results.")
    sub = p.add_subparsers(dest="evals_command", required=True)
    c = sub.add_parser("compare", help="both-solved / both-failed / each-alone and the exact McNemar p",
                       description=evals.__doc__.split("\n\n")[0])
    c.add_argument("a", help="results A: BigCodeBench *_eval_results.json or JSON lines {task_id, passed}")
    c.add_argument("b", help="results B, same problems")
    c.add_argument("--names", default=None, help="display names A,B (default: the file names)")
    c.add_argument("--json", action="store_true",
                   help='print {"both_pass", "both_fail", "only_a", "only_b", "n", "p_value"} only')
    c.set_defaults(func=run_compare)


def run_compare(args: argparse.Namespace) -> int:
    a, b = evals.load_results(args.a), evals.load_results(args.b)
    if args.names:
        names = [n.strip() for n in args.names.split(",")]
        if len(names) != 2 or not all(names):
            raise evals.EvalsError(f"--names {args.names!r}: expected two names, A,B")
    else:
        names = [Path(args.a).name, Path(args.b).name]
    c = evals.compare(a, b)
    if c.n == 0:
        raise evals.EvalsError(f"{args.a} and {args.b} have no problem in common")
    note = evals.unpaired_note(c, *names)
    if args.json:
        print(json.dumps(c.to_dict()))
        if note:
            print(f"sparkctl evals: {note}", file=sys.stderr)
        return 0
    from rich.console import Console

    Console().print(evals.comparison_table(c, *names))
    return 0
