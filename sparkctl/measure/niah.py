"""Needle in a haystack (`python -m sparkctl niah`): long-context retrieval on a grid of lengths x depths.

Each cell is one chat request: deterministic filler prose (workloads/haystack.py, no digits anywhere) filled to
the cell's context length in the model's own tokens (measured with the server's /tokenize, chat template
included), with one needle sentence "The special magic number for <key> is <7 digits>." inserted at a sentence
boundary at the cell's depth (0 % = first sentence, 100 % = last), and the question asked after the haystack.
Scoring is deterministic, RULER-style: a cell passes when the needle's value appears in the answer (digit
groups separated by commas, spaces or underscores are joined first: "4,829,173" counts). No judge model.

Scores are out of 10: 10 x passed / scored cells, per length, per depth and overall. Cells that cannot fit the
server's max_model_len (length + max_tokens) are reported as skipped and left out of the score; a request that
fails (HTTP error, timeout) counts as a miss and carries its error.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass

import httpx

from sparkctl.measure.client import fit_text, make_client, server_info, tokenize_count
from sparkctl.measure.record import utc_timestamp
from sparkctl.measure.workloads import haystack

SCHEMA = "sparkctl.niah/1"
K = 1024
DEFAULT_LENGTHS = (32 * K, 95 * K, 157 * K, 220 * K)  # prompt tokens: "32K, 95K, 157K, 220K"
DEFAULT_DEPTHS = (10.0, 50.0, 90.0)  # needle position, % of the haystack
INTRO = "Below are some notes. Somewhere in them is a special magic number. Read carefully.\n\n"

KEY_ADJECTIVES = ["amber", "silver", "quiet", "northern", "crooked", "velvet", "hollow", "bright", "salted", "distant"]
KEY_NOUNS = ["lighthouse", "orchard", "ferry", "lantern", "archive", "meadow", "clocktower", "harbor", "quarry", "mill"]


# ---------------------------------------------------------------------------------------------------- pure parts

@dataclass(frozen=True)
class Needle:
    key: str  # e.g. "the amber lighthouse"
    value: str  # seven digits, no leading zero

    @property
    def sentence(self) -> str:
        return f"The special magic number for {self.key} is {self.value}. "

    @property
    def question(self) -> str:
        return (f"What is the special magic number for {self.key} mentioned in the notes above? "
                "Answer with the number only.")


def make_needle(length: int, depth: float, trial: int = 0, seed: int = 0) -> Needle:
    """The needle of one cell: reproducible from (seed, length, depth, trial), different across cells."""
    rng = random.Random(f"niah:{seed}:{length}:{depth:g}:{trial}")
    key = f"the {rng.choice(KEY_ADJECTIVES)} {rng.choice(KEY_NOUNS)}"
    return Needle(key=key, value=str(rng.randint(1_000_000, 9_999_999)))


def insert_needle(sentences: Sequence[str], needle_sentence: str, depth: float) -> str:
    """Haystack text with the needle placed before the sentence at depth % of the sentence list."""
    if not 0 <= depth <= 100:
        raise ValueError(f"depth {depth} is not within 0-100 %")
    pos = round(len(sentences) * depth / 100)
    return "".join(list(sentences[:pos]) + [needle_sentence] + list(sentences[pos:]))


def build_prompt(n_chars: int, needle: Needle, depth: float, seed: int = 0) -> str:
    """The user message of one cell with about n_chars of haystack."""
    sentences = haystack.sentence_list(n_chars, seed)
    # whole sentences step ~35 tokens: finish with the next sentence cut at a word boundary to size finely
    rest = n_chars - sum(len(x) for x in sentences)
    following = haystack.sentence_list(n_chars + 1000, seed)[len(sentences):len(sentences) + 1]
    if rest > 0 and following:
        partial = following[0][:rest]
        partial = partial[:partial.rfind(" ") + 1]
        if partial:
            sentences.append(partial)
    body = insert_needle(sentences, needle.sentence, depth)
    return INTRO + body + "\n\n" + needle.question


_DIGIT_GROUPS = re.compile(r"(?<=\d)[,\s_'\u2009\u202f](?=\d)")


def score_answer(answer: str | None, value: str) -> bool:
    """Deterministic scoring: the needle's value appears in the answer (digit-group separators ignored)."""
    if not answer:
        return False
    return value in _DIGIT_GROUPS.sub("", answer)


ANSWER_CHARS = 500  # of an answer kept in the record, characters


def kept_answer(answer: str, value: str) -> str:
    """What the record keeps of an answer: all of a short one; of a long one, ANSWER_CHARS around the needle's value
    when it is there (the judge re-scores the cell from what is kept: evidence.py), else its start."""
    if len(answer) <= ANSWER_CHARS:
        return answer
    m = re.search(r"[,\s_'\u2009\u202f]?".join(map(re.escape, value)), answer)
    start = 0 if m is None else max(0, min(m.start() - ANSWER_CHARS // 2, len(answer) - ANSWER_CHARS))
    return answer[start:start + ANSWER_CHARS]


def _out_of_10(group: Sequence[dict]) -> float | None:
    return round(10.0 * sum(bool(c["passed"]) for c in group) / len(group), 2) if group else None


def _scores_by(scored: Sequence[dict], key: str) -> dict[float, float | None]:
    """The score of each value of a cell field (length or depth), in ascending order."""
    return {v: _out_of_10([c for c in scored if c[key] == v]) for v in sorted({c[key] for c in scored})}


def scores(cells: Sequence[dict]) -> dict:
    """Scores out of 10 per length, per depth and overall; skipped cells are left out."""
    scored = [c for c in cells if not c.get("skipped")]
    return {
        "by_length": {str(n): s for n, s in _scores_by(scored, "length").items()},
        "by_depth": {f"{d:g}": s for d, s in _scores_by(scored, "depth").items()},
        "overall": _out_of_10(scored),
        "passed": sum(bool(c["passed"]) for c in scored),
        "scored": len(scored),
        "skipped": len(cells) - len(scored),
    }


def _grid_title(record: dict) -> str:
    overall = record["scores"]["overall"]
    title = f"needle in a haystack: {overall if overall is not None else '-'}/10 overall"
    model = (record.get("model") or {}).get("key")
    if model:
        title += f"  ({model}, {record.get('date', '')[:10]})"
    return title


def _grid_cell(group: Sequence[dict]) -> str:
    """One length x depth cell: pass/miss/error for one trial, passed/trials for several."""
    if all(c.get("skipped") for c in group):
        return "skip"
    if len(group) > 1:
        return f"{sum(bool(c['passed']) for c in group)}/{len(group)}"
    (c,) = group
    return "[green]pass[/]" if c["passed"] else ("[red]error[/]" if c.get("error") else "[red]miss[/]")


def _length_label(n: int) -> str:
    return f"{n // K}K" if n % K == 0 else str(n)


def grid_table(record: dict):
    """Rich table: rows = context lengths, columns = depths, cells = pass/miss (or x/trials), score column."""
    from rich.table import Table

    cells = record["cells"]
    depths = sorted({c["depth"] for c in cells})
    lengths = sorted({c["length"] for c in cells})
    t = Table(title=_grid_title(record))
    t.add_column("context", justify="right")
    for d in depths:
        t.add_column(f"depth {d:g}%", justify="center")
    t.add_column("score /10", justify="right")
    for n in lengths:
        marks = [_grid_cell([c for c in cells if c["length"] == n and c["depth"] == d]) for d in depths]
        s = record["scores"]["by_length"].get(str(n))
        t.add_row(_length_label(n), *marks, "-" if s is None else f"{s:.1f}")
    return t


# ---------------------------------------------------------------------------------------------------------- I/O

async def run_cell(client: httpx.AsyncClient, ep, length: int, depth: float, trial: int, max_tokens: int,
                   max_model_len: int | None, seed: int = 0) -> dict:
    needle = make_needle(length, depth, trial, seed)
    cell = {"length": length, "depth": depth, "trial": trial, "needle_key": needle.key,
            "needle_value": needle.value, "prompt_tokens": None, "passed": False, "skipped": False,
            "answer": None, "finish_reason": None, "elapsed_s": None, "error": None}
    if max_model_len and length + max_tokens > max_model_len:
        cell.update(skipped=True, error=f"length + max_tokens {length + max_tokens} > max_model_len {max_model_len}")
        return cell

    async def count(text: str):
        return await tokenize_count(client, ep, messages=[{"role": "user", "content": text}])

    prompt, counted, _source = await fit_text(count, lambda n: build_prompt(n, needle, depth, seed), length)
    body = {"model": ep.served_name, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0.0}
    t0 = time.perf_counter()
    try:
        r = await client.post(ep.url("/chat/completions"), json=body)
    except httpx.HTTPError as exc:
        cell.update(error=f"{type(exc).__name__}: {exc}", prompt_tokens=counted)
        return cell
    cell["elapsed_s"] = time.perf_counter() - t0
    if r.status_code != 200:
        cell.update(error=f"HTTP {r.status_code}: {' '.join(r.text.split())[:300]}", prompt_tokens=counted)
        return cell
    out = r.json()
    choice = (out.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    answer = message.get("content") or ""
    cell.update(answer=kept_answer(answer, needle.value), finish_reason=choice.get("finish_reason"),
                prompt_tokens=(out.get("usage") or {}).get("prompt_tokens", counted),
                passed=score_answer(answer, needle.value))
    return cell


async def run_niah(ep, labels: dict, *, max_tokens: int, timeout_s: float,
                   lengths: Sequence[int] = DEFAULT_LENGTHS, depths: Sequence[float] = DEFAULT_DEPTHS,
                   trials: int = 1, seed: int = 0, on_cell=None) -> dict:
    """Every cell in turn (one request at a time); returns the JSON record.

    max_tokens: the answer budget (NIAH_MAX_TOKENS); timeout_s: the client timeout (BENCH_CLIENT_TIMEOUT_S)."""
    date = utc_timestamp()
    cells = []
    async with make_client(ep, timeout_s) as client:
        info = await server_info(client, ep)
        for n in lengths:
            for d in depths:
                for trial in range(trials):
                    cell = await run_cell(client, ep, int(n), float(d), trial, max_tokens,
                                          info.get("max_model_len"), seed)
                    cells.append(cell)
                    if on_cell is not None:
                        on_cell(cell)
    return {
        "schema": SCHEMA,
        "date": date,
        **labels,
        "vllm_version": info.get("vllm_version"),
        "endpoint": ep.base_url,
        "max_model_len": info.get("max_model_len"),
        "lengths": [int(n) for n in lengths],
        "depths": [float(d) for d in depths],
        "trials": trials,
        "max_tokens": max_tokens,
        "seed": seed,
        "scoring": "needle value appears in the answer (digit-group separators ignored)",
        "cells": cells,
        "scores": scores(cells),
    }


def run(ep, labels: dict, **kw) -> dict:
    return asyncio.run(run_niah(ep, labels, **kw))
