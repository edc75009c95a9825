"""Paired pass/fail comparison of two eval runs on the same problems, with the exact McNemar test.

Inputs (the format of each file is detected):
* BigCodeBench's own `*_eval_results.json`: {"date": ..., "eval": {"BigCodeBench/0": [{"task_id": ...,
  "status": "pass" | "fail" | "timeout", ...}], ...}}. One sample per problem (greedy, n = 1); a problem
  with several samples is refused, since a paired test needs one outcome per problem.
* JSON lines: one {"task_id": "...", "passed": true} per line (blank lines allowed).

Problems present in only one file are reported and left out; they are never paired with anything.

Exact McNemar: only the discordant problems count (b = A alone solved, c = B alone solved, n = b + c). Under
H0 each is a fair coin, so the two-sided p = min(1, 2 * P[X <= min(b, c)]), X ~ Binomial(n, 1/2), which is
scipy.stats.binomtest(min(b, c), n, 0.5).pvalue. Check value: 28/14/5/3 -> p = 186/256 = 0.7265625.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from sparkctl.errors import SparkctlError

BIGCODEBENCH_PASS = "pass"


class EvalsError(SparkctlError):
    """An eval results file that cannot be read as one pass/fail outcome per problem."""


def _bigcodebench(raw: dict, path: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for task_id, samples in raw["eval"].items():
        if isinstance(samples, dict):
            samples = [samples]
        if not isinstance(samples, list) or not samples:
            raise EvalsError(f"{path}: {task_id} has no evaluated sample")
        if len(samples) != 1:
            raise EvalsError(f"{path}: {task_id} has {len(samples)} samples; a paired comparison needs exactly one "
                             "outcome per problem (generate with --greedy, n = 1)")
        status = samples[0].get("status")
        if status is None:
            raise EvalsError(f"{path}: {task_id} has no status")
        out[str(task_id)] = status == BIGCODEBENCH_PASS
    return out


def _jsonl(text: str, path: str) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise EvalsError(f"{path}:{n}: not JSON ({exc.msg})") from None
        if not isinstance(row, dict) or "task_id" not in row or not isinstance(row.get("passed"), bool):
            raise EvalsError(f'{path}:{n}: expected {{"task_id": "...", "passed": true|false}}, '
                             f"got {line.strip()[:120]}")
        task_id = str(row["task_id"])
        if task_id in out:
            raise EvalsError(f"{path}:{n}: {task_id} appears twice")
        out[task_id] = row["passed"]
    return out


def _json_or_none(text: str):
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        return None


def _parse(text: str, path: str) -> dict[str, bool]:
    """task_id -> passed from a file's text, whichever supported format it is in."""
    raw = _json_or_none(text)
    if raw is None:
        return _jsonl(text, path)
    if not isinstance(raw, dict):
        raise EvalsError(f"{path}: a JSON {type(raw).__name__}, expected BigCodeBench's eval results or JSON lines")
    if isinstance(raw.get("eval"), dict):
        return _bigcodebench(raw, path)
    if "task_id" in raw:
        return _jsonl(text, path)  # a one-line JSON-lines file
    raise EvalsError(f'{path}: JSON without an "eval" object; expected BigCodeBench\'s *_eval_results.json')


def load_results(path: str | Path) -> dict[str, bool]:
    """task_id -> passed, from either supported format."""
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise EvalsError(f"{path}: {exc.strerror or exc}") from None
    out = _parse(text, str(path))
    if not out:
        raise EvalsError(f"{path}: no problems in the file")
    return out


def mcnemar_exact(only_a: int, only_b: int) -> float:
    """Two-sided exact McNemar p: binomial test of the discordant pairs against 1/2 (1.0 when there are none)."""
    from scipy.stats import binomtest

    n = only_a + only_b
    if n == 0:
        return 1.0
    return float(min(1.0, binomtest(min(only_a, only_b), n, 0.5).pvalue))


@dataclass(frozen=True)
class Comparison:
    both_pass: int
    both_fail: int
    only_a: int  # A passed, B failed
    only_b: int  # A failed, B passed
    p_value: float
    only_in_a: tuple[str, ...]  # problems missing from B: left out
    only_in_b: tuple[str, ...]  # problems missing from A: left out

    @property
    def n(self) -> int:
        return self.both_pass + self.both_fail + self.only_a + self.only_b

    @property
    def solved_a(self) -> int:
        return self.both_pass + self.only_a

    @property
    def solved_b(self) -> int:
        return self.both_pass + self.only_b

    def to_dict(self) -> dict:
        return {"both_pass": self.both_pass, "both_fail": self.both_fail, "only_a": self.only_a,
                "only_b": self.only_b, "n": self.n, "p_value": self.p_value}


def compare(a: dict[str, bool], b: dict[str, bool]) -> Comparison:
    """Pair two task_id -> passed maps on their common problems."""
    outcomes = Counter((bool(a[t]), bool(b[t])) for t in set(a) & set(b))
    oa, ob = outcomes[True, False], outcomes[False, True]
    return Comparison(both_pass=outcomes[True, True], both_fail=outcomes[False, False], only_a=oa, only_b=ob,
                      p_value=mcnemar_exact(oa, ob),
                      only_in_a=tuple(sorted(set(a) - set(b))), only_in_b=tuple(sorted(set(b) - set(a))))


def unpaired_note(c: Comparison, name_a: str = "A", name_b: str = "B") -> str | None:
    """The sentence that reports problems left out, or None when both files cover the same problems."""
    parts = []
    for name, other, ids in ((name_a, name_b, c.only_in_a), (name_b, name_a, c.only_in_b)):
        if ids:
            shown = ", ".join(ids[:10]) + (f", ... ({len(ids)} in all)" if len(ids) > 10 else "")
            parts.append(f"{len(ids)} problem(s) only in {name} (absent from {other}), left out: {shown}")
    return "; ".join(parts) or None


def comparison_table(c: Comparison, name_a: str = "A", name_b: str = "B"):
    from rich.table import Table

    t = Table(title=f"{name_a} vs {name_b}: {c.n} paired problems", caption=unpaired_note(c, name_a, name_b))
    t.add_column("")
    t.add_column(f"{name_b} passed", justify="right")
    t.add_column(f"{name_b} failed", justify="right")
    t.add_column("total", justify="right")
    t.add_row(f"{name_a} passed", str(c.both_pass), str(c.only_a), str(c.solved_a))
    t.add_row(f"{name_a} failed", str(c.only_b), str(c.both_fail), str(c.n - c.solved_a))
    t.add_row("total", str(c.solved_b), str(c.n - c.solved_b), str(c.n))
    t.add_section()
    t.add_row("exact McNemar p (two-sided)", f"{c.p_value:.4g}", "", f"{c.only_a + c.only_b} discordant")
    return t
