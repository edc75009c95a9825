"""`bench judge` reads a history through its index (history_index.py): the same verdict as reading every line, the
index rebuilt when the history changed or the index is not the history's, never trusted over the history. What it
costs by history length is a benchmark's business (scripts/judge_cost.py, docs/measured.md)."""

from __future__ import annotations

import json
import os

import pytest

from sparkctl.__main__ import main
from sparkctl.check.load import host_config
from sparkctl.measure import history, history_index, quick, record
from tests.measure.test_reference import ALL, rec
from tests.measure.test_yardstick import GROUPS, STEPS, scaled


def _history(tmp_path, lines: list[dict]):
    path = tmp_path / "history.jsonl"
    path.write_text("".join(history.serialize(x) for x in lines))
    return path


def _a_long_history() -> list[dict]:
    """Five configurations, each with its baseline, reruns and a provisional run, a tensor-parallel pair, and a
    workload of its own: every kind of line the reference order chooses among."""
    lines = []
    for k, step in enumerate(STEPS):
        for j in range(4):
            r = scaled(1.0 - 0.02 * k - 0.001 * j, **step)
            lines.append(history.make_line(r, baseline=j == 0, source="acceptance", provisional=j == 3))
    lines.append(history.make_line(scaled(1.6, tp=2, **STEPS[4]), baseline=True, source="acceptance"))
    lines.append(history.make_line(scaled(1.0, ignore_eos=True, **STEPS[4]), baseline=True, source="bench"))
    return lines


def _verdict(tmp_path, capsys, r: dict, path) -> dict:
    cand = record.write_record(r, tmp_path / "candidate.json")
    assert main(["bench", "judge", str(cand), "--history", str(path), *GROUPS, "--json"]) in (0, 1)
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("candidate", [scaled(0.9, **STEPS[4]), scaled(0.5, **STEPS[4]), scaled(0.95, **STEPS[2]),
                                       scaled(0.9, vllm="0.35.0", build="0.35.0-e", revision="b" * 40),
                                       scaled(1.5, tp=2, **STEPS[4]), scaled(0.9, ignore_eos=True, **STEPS[0])],
                         ids=["rerun", "slow", "older", "upgrade", "pair", "workload"])
def test_the_index_gives_the_verdict_every_line_gives(tmp_path, capsys, candidate):
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    full = json.loads(json.dumps(quick.judge_record(candidate, host_config(ALL), lines).to_dict()))
    for _ in ("cold", "warm"):
        assert _verdict(tmp_path, capsys, candidate, path) == full


def test_a_line_of_the_history_is_judged_against_the_lines_before_it_through_the_index(tmp_path, capsys):
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    target = lines[9]  # the second configuration's second run
    full = quick.judge_record({k: v for k, v in target.items() if k != "history"}, host_config(ALL), lines[:9])
    for _ in ("cold", "warm"):
        assert _verdict(tmp_path, capsys, target, path) == json.loads(json.dumps(full.to_dict()))


def test_an_appended_baseline_is_seen_at_once(tmp_path, capsys):
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    candidate = scaled(0.9, vllm="0.35.0", build="0.35.0-e", revision="b" * 40)
    assert _verdict(tmp_path, capsys, candidate, path)["reference"]["kind"] == "previous"
    own = history.make_line(scaled(1.0, vllm="0.35.0", build="0.35.0-e", revision="b" * 40), baseline=True,
                            source="bench")
    with open(path, "a") as f:
        f.write(history.serialize(own))
    v = _verdict(tmp_path, capsys, candidate, path)
    assert v["reference"]["kind"] == "baseline" and v["baseline_id"] == own["history"]["id"]


@pytest.mark.parametrize("damage", ["garbage", "offsets", "flags", "lines file"])
def test_an_index_that_is_not_the_historys_is_rebuilt_never_trusted(tmp_path, capsys, damage):
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    candidate = scaled(0.5, **STEPS[4])
    right = _verdict(tmp_path, capsys, candidate, path)
    cache = history_index.cache_path(path)
    doc = json.loads(cache.read_text())
    if damage == "garbage":
        cache.write_text("{not json")
    elif damage == "offsets":
        doc["named"] = {i: [e[0], e[1] + 7, *e[2:]] for i, e in doc["named"].items()}
        cache.write_text(json.dumps(doc))
    elif damage == "flags":  # the index says the first configuration's baseline is a rerun
        doc["named"] = {i: [*e[:4], {**e[4], "baseline": False}] for i, e in doc["named"].items()}
        cache.write_text(json.dumps(doc))
    else:
        history_index._lines_path(path).write_text("[]")
        candidate = lines[6]  # judging a line of the history reads every entry
        right = _verdict(tmp_path, capsys, candidate, path)
        history_index._lines_path(path).write_text("[]")
    assert _verdict(tmp_path, capsys, candidate, path) == right


def test_a_line_damaged_after_the_index_was_built_is_still_refused(tmp_path, capsys):
    """The index is current only for the file it was built from: an edited history is read again, every line."""
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    cand = record.write_record(scaled(0.9, **STEPS[4]), tmp_path / "candidate.json")
    assert main(["bench", "judge", str(cand), "--history", str(path), *GROUPS]) == 0
    capsys.readouterr()
    text = path.read_text().splitlines(keepends=True)
    text[2] = text[2].replace('"window_s":10', '"window_s":"10"')
    path.write_text("".join(text))
    os.utime(path, ns=(0, 0))
    assert main(["bench", "judge", str(cand), "--history", str(path), *GROUPS]) == 2
    assert f"{path} line 3" in capsys.readouterr().err
