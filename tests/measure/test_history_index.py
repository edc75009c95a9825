"""`bench judge` reads a history through its index (history_index.py): the same verdict as reading every line; an
append read alone when the indexed bytes still hash the same, the index rebuilt when the history changed otherwise or
the index is not the history's, never trusted over the history. What it costs by history length is a benchmark's
business (scripts/judge_cost.py, docs/measured.md)."""

from __future__ import annotations

import contextlib
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


@contextlib.contextmanager
def _counting_parser():
    """Every line history.parse reads and validates (its line parser), by the line number it gives it."""
    seen, real = [], history._parse_line

    def parse_line(raw: str, where: str) -> dict:
        seen.append(where.rsplit(" ", 1)[-1])
        return real(raw, where)

    with pytest.MonkeyPatch.context() as m:
        m.setattr(history, "_parse_line", parse_line)
        yield seen


def _append(path, *lines: dict) -> None:
    with open(path, "a") as f:
        f.write("".join(history.serialize(x) for x in lines))


@pytest.mark.parametrize("candidate", [scaled(0.9, **STEPS[4]), scaled(0.5, **STEPS[4]), scaled(0.95, **STEPS[2]),
                                       scaled(0.9, vllm="0.35.0", build="0.35.0-e", revision="b" * 40)],
                         ids=["rerun", "slow", "older", "upgrade"])
def test_an_append_reads_only_the_appended_lines_and_judges_as_a_rebuild(tmp_path, capsys, candidate):
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    _verdict(tmp_path, capsys, candidate, path)  # the index built
    added = [history.make_line(scaled(1.0, vllm="0.35.0", build="0.35.0-e", revision="b" * 40), baseline=True,
                               source="bench"),
             history.make_line(scaled(0.97, **STEPS[4]), baseline=False, source="acceptance")]
    _append(path, *added)
    with _counting_parser() as seen:
        extended = _verdict(tmp_path, capsys, candidate, path)
    assert seen == [str(len(lines) + 1), str(len(lines) + 2)]  # the new lines, by their own numbers
    full = json.loads(json.dumps(quick.judge_record(candidate, host_config(ALL), lines + added).to_dict()))
    assert extended == full
    history_index.cache_path(path).unlink()
    assert _verdict(tmp_path, capsys, candidate, path) == full  # a fresh rebuild's verdict
    # and a line of the history itself, judged through the extended index's every entry
    history_index.cache_path(path).unlink()
    _verdict(tmp_path, capsys, candidate, _history(tmp_path, lines))
    _append(path, *added)
    own = {k: v for k, v in added[1].items() if k != "history"}
    right = json.loads(json.dumps(quick.judge_record(own, host_config(ALL), lines + added[:1]).to_dict()))
    assert _verdict(tmp_path, capsys, added[1], path) == right


def test_a_bad_appended_line_is_refused_with_its_own_number(tmp_path, capsys):
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    cand = record.write_record(scaled(0.9, **STEPS[4]), tmp_path / "candidate.json")
    assert main(["bench", "judge", str(cand), "--history", str(path), *GROUPS]) == 0
    capsys.readouterr()
    bad = history.serialize(history.make_line(scaled(0.97, **STEPS[4]), baseline=False, source="acceptance"))
    with open(path, "a") as f:
        f.write(bad.replace('"window_s":10', '"window_s":"10"'))
    assert main(["bench", "judge", str(cand), "--history", str(path), *GROUPS]) == 2
    assert f"{path} line {len(lines) + 1}" in capsys.readouterr().err


@pytest.mark.parametrize("change", ["edited, same size", "edited in place", "truncated", "truncated mid-line",
                                    "rewritten"])
def test_a_history_whose_indexed_bytes_changed_is_read_again_every_line(tmp_path, capsys, change):
    """The part the index was built from changed (and lines appended, or not): its sha256 differs, so every line is
    read again; the same size, the same mtime or the same last line do not make an edited history current."""
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    candidate = scaled(0.5, **STEPS[4])
    _verdict(tmp_path, capsys, candidate, path)
    text = path.read_text().splitlines(keepends=True)
    st = path.stat()
    if change.startswith("edited"):  # a rerun no verdict reads, made invalid in as many bytes
        text[1] = text[1].replace('"baseline":false', '"baseline":"no1"')
        assert len(text[1]) == len(path.read_text().splitlines(keepends=True)[1])
    elif change == "truncated":
        text = text[:-3]
    elif change == "truncated mid-line":
        text[-1] = text[-1][:40]
    else:
        text = text[1:] + text[:1]
    added = history.make_line(scaled(0.97, **STEPS[4]), baseline=False, source="acceptance")
    grows = change not in ("truncated", "edited in place")
    path.write_text("".join(text) + (history.serialize(added) if grows else ""))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    if change.startswith("edited") or change == "truncated mid-line":  # the rebuild reads the bad line, refuses it
        cand = record.write_record(candidate, tmp_path / "candidate.json")
        assert main(["bench", "judge", str(cand), "--history", str(path), *GROUPS]) == 2
        assert f"{path} line {2 if change.startswith('edited') else len(lines)}" in capsys.readouterr().err
        return
    with _counting_parser() as seen:
        v = _verdict(tmp_path, capsys, candidate, path)
    assert len(seen) == len(text) + grows  # every line, not the appended ones alone
    kept = history.parse(path.read_bytes())
    assert v == json.loads(json.dumps(quick.judge_record(candidate, host_config(ALL), kept).to_dict()))


def test_an_index_that_is_not_the_historys_is_rebuilt_on_an_append_too(tmp_path, capsys):
    lines = _a_long_history()
    path = _history(tmp_path, lines)
    candidate = scaled(0.5, **STEPS[4])
    _verdict(tmp_path, capsys, candidate, path)
    cache = history_index.cache_path(path)
    doc = json.loads(cache.read_text())
    cache.write_text(json.dumps({**doc, "named": {}}))
    added = history.make_line(scaled(0.97, **STEPS[4]), baseline=False, source="acceptance")
    _append(path, added)
    with _counting_parser() as seen:
        v = _verdict(tmp_path, capsys, candidate, path)
    assert len(seen) == len(lines) + 1
    assert v == json.loads(json.dumps(quick.judge_record(candidate, host_config(ALL), lines + [added]).to_dict()))
