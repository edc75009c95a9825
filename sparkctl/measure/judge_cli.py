"""`python -m sparkctl bench judge RECORD.json --history HISTORY.jsonl [--json]`: a saved quick-run record judged
offline exactly as the deploy judges it (quick.judge_record: the reference chosen from the history, the catalog's
floors, the same thresholds), so an operator can audit or replay a verdict.

RECORD.json is a quick-run bench record, the verdict `bench gate --json` prints (its record is judged), or a line
of the history (`bench history --json`): a record found in the history is judged against the lines appended before
it, as it was when the deploy judged it. HISTORY.jsonl is the box's history file (a copy of
<STATE_DIR>/<ACCEPTANCE_HISTORY_FILE>). Settings are group data (--groups) with --data overrides, as the deploy
merges them. Exit 0 when the verdict passed, 1 when it failed, 2 when the record, the history or the settings
cannot be read (a non-finite or negative figure, a malformed cell, a byte that is not UTF-8: named with its file,
line and field, never a traceback). The history is read through its index (history_index.py): only the lines the
verdict needs, whatever its length; the index is rebuilt, reading every line, when the file changed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sparkctl.check.load import load
from sparkctl.config import groupdata
from sparkctl.measure import acceptance, history, history_index, quick, record


def add_parser(modes) -> None:
    """Register `bench judge` under `bench`'s subcommands."""
    j = modes.add_parser("judge", help="judge a saved quick-run record against a history file, offline",
                         description=__doc__.split("\n\n")[0])
    j.add_argument("record", help="quick-run record JSON (or a `bench gate --json` verdict, or a history line)")
    j.add_argument("--history", required=True, help="the box's history file (JSON lines)")
    j.add_argument("--groups", type=lambda s: [g.strip() for g in s.split(",") if g.strip()], default=None,
                   help="group data to merge (default: all,gx10 for a real box, all,gx10,sim else)")
    j.add_argument("--data", action="append", default=[], metavar="NAME=VALUE",
                   help="override a setting, parsed as pyinfra's --data parses it; repeatable")
    j.add_argument("--json", action="store_true", help="print the verdict as JSON (acceptance.Verdict.to_dict)")
    j.set_defaults(func=run_judge)


def read_record(path: str) -> dict:
    """The record in a record file, a `bench gate --json` verdict or a history line (its history part kept)."""
    try:
        raw = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise record.BenchError(f"{path}: not a readable bench record ({exc})") from None
    if isinstance(raw, dict) and isinstance(raw.get("record"), dict) and "decision" in raw:
        raw = raw["record"]
    if not isinstance(raw, dict):
        raise record.BenchError(f"{path}: not a sparkctl bench record (a JSON {type(raw).__name__}, not an object)")
    if "history" in raw:  # a history line: read as the history reads its lines
        return history.validate_line(raw, path)
    return record.validate_record(raw, path)


def lines_before(lines: list[dict], rec: dict) -> list[dict]:
    """The history as it was when rec was judged: the lines before rec's own, or all when rec is not in it. A
    history line is found as itself (its id and when it was appended: ids may repeat in a history an older version
    or a hand wrote), a record by its id."""
    tag = rec.get("history") or {}
    if tag:
        mine = [i for i, x in enumerate(lines) if (x["history"]["id"], x["history"]["appended"]) ==
                (tag.get("id"), tag.get("appended"))]
    else:
        rid = history.record_id(rec)
        mine = [i for i, x in enumerate(lines) if x["history"]["id"] == rid]
    return lines[:mine[0]] if mine else lines


def run_judge(args: argparse.Namespace) -> int:
    config = load(args.groups, overrides=groupdata.parse_data(args.data))
    rec = read_record(args.record)
    path = Path(args.history)
    try:
        lines, kinds, count = history_index.lines_for(path, rec)
    except OSError as exc:
        raise history.HistoryError(f"{args.history}: the history cannot be read ({exc})") from None
    verdict = quick.judge_record({k: v for k, v in rec.items() if k != "history"}, config, lines, args.record,
                                 kinds=kinds)
    if args.json:
        print(json.dumps(verdict.to_dict(), allow_nan=False))  # figures are finite: read so
    else:
        from rich.console import Console

        console = Console()
        console.print(acceptance.verdict_table(verdict, f"{args.record} ({count} history lines before it)"))
        console.print(verdict.reason(), markup=False)  # its [baseline <id>] tags are text, not rich markup
    return 0 if verdict.passed else 1
