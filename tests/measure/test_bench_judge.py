"""What a verdict leaves behind and how it is replayed: the history line records the reference its run was judged
against and `bench history` shows it; `python -m sparkctl bench judge RECORD.json --history HISTORY.jsonl [--json]`
judges a saved record offline through the deploy's own function (exit 0 pass, 1 fail), a history line against the
lines appended before it."""

from __future__ import annotations

import json

import pytest

from sparkctl.__main__ import main
from sparkctl.check.load import host_config
from sparkctl.measure import history, quick, record
from tests.measure.test_history import LocalHost
from tests.measure.test_reference import ALL, rec


@pytest.fixture
def box(tmp_path):
    """(the box, its validated settings: a HostConfig): the history lives under a throw-away STATE_DIR."""
    return LocalHost(name="spark-1", address="127.0.0.1"), host_config({**ALL, "STATE_DIR": str(tmp_path / "state")})


def accept(host, config, r: dict) -> dict:
    """The deploy's path after a commit: judged against the box's history, then recorded with its reference."""
    verdict = quick.judge_record(r, config, history.read(host, config.cfg))
    assert verdict.passed, verdict.reason()
    return quick.record_accepted(host, config.cfg, verdict)


def test_each_accepted_run_records_what_it_was_judged_against_and_bench_history_shows_it(box, monkeypatch, capsys):
    from sparkctl.measure import cli

    host, data = box
    first = accept(host, data, rec())
    rerun = accept(host, data, rec(decode=(18.0, 72.0)))
    upgrade = accept(host, data, rec(decode=(17.8, 71.0), vllm="0.33.0", build="0.33.0-cccccccccccc"))
    tags = [x["history"]["reference"] for x in history.read(host, data.cfg)]
    assert tags == [
        {"kind": "published", "name": "the catalog's published figures for qwen3.8-27b", "id": None},
        {"kind": "baseline", "name": f"baseline {first['history']['id']}", "id": first["history"]["id"]},
        {"kind": "previous", "name": f"the previous vLLM 0.32.0 baseline {first['history']['id']}",
         "id": first["history"]["id"]}]
    assert [first["history"]["baseline"], rerun["history"]["baseline"], upgrade["history"]["baseline"]] == \
        [True, False, True]  # the upgrade's first accepted run is its own configuration's baseline
    monkeypatch.setattr(cli.hosts, "find", lambda name=None: host)
    monkeypatch.setattr(cli, "load", lambda groups=None, host=None: data)  # the box's settings, validated
    assert main(["bench", "history"]) == 0
    out = capsys.readouterr().out
    assert "judged" in out and "published" in out and "previous" in out and "(cccccc)" in out  # build column
    assert [history.judged_against(x) for x in history.read(host, data.cfg)] == \
        ["published", f"baseline {first['history']['id'][:8]}", f"previous {first['history']['id'][:8]}"]
    assert main(["bench", "history", "--json"]) == 0
    assert [x["history"]["reference"]["kind"] for x in json.loads(capsys.readouterr().out)] == \
        ["published", "baseline", "previous"]


def test_bench_judge_replays_a_saved_record_exit_0_pass_1_fail(box, tmp_path, capsys):
    host, data = box
    base = accept(host, data, rec())
    hist = tmp_path / "history.jsonl"
    hist.write_text(open(history.history_path(data.cfg)).read())
    slow = record.write_record(rec(decode=(4.0, 16.0), vllm="0.33.0", build="0.33.0-c"), tmp_path / "slow.json")
    assert main(["bench", "judge", str(slow), "--history", str(hist), "--groups", "all,gx10", "--json"]) == 1
    v = json.loads(capsys.readouterr().out)
    assert v["passed"] is False and v["decision"] == "rollback"
    assert v["reference"]["name"] == f"the previous vLLM 0.33.0 baseline {base['history']['id']}".replace("0.33.0",
                                                                                                        "0.32.0")
    assert {f["figure"] for f in v["failures"]} >= {"decode tok/s, 1 stream", "decode tok/s, 4 streams"}
    fine = record.write_record(rec(decode=(18.0, 72.0)), tmp_path / "fine.json")
    assert main(["bench", "judge", str(fine), "--history", str(hist), "--groups", "all,gx10"]) == 0
    out = capsys.readouterr().out
    assert f"judged against baseline {base['history']['id']}" in out and "acceptance passed" in out
    # the deploy's settings apply: an override loosens the previous configuration's limit (and the fixed anchors':
    # 78 % below the published figures is beyond their cumulative limit)
    loose = ["--data", "ACCEPTANCE_PREVIOUS_DECODE_MAX_REGRESSION=0.9", "--data",
             "ACCEPTANCE_PREVIOUS_PREFILL_MAX_REGRESSION=0.9", "--data", "ACCEPTANCE_ANCHOR_DECODE_MAX_REGRESSION=0.9",
             "--data", "ACCEPTANCE_ANCHOR_PREFILL_MAX_REGRESSION=0.9"]
    assert main(["bench", "judge", str(slow), "--history", str(hist), "--groups", "all,gx10", *loose]) == 0


def test_bench_judge_replays_a_history_line_against_the_lines_before_it(box, tmp_path, capsys):
    host, data = box
    first = accept(host, data, rec())
    accept(host, data, rec(decode=(18.0, 72.0)))
    hist = tmp_path / "history.jsonl"
    hist.write_text(open(history.history_path(data.cfg)).read())
    lines = history.parse(hist.read_text())
    (tmp_path / "first.json").write_text(json.dumps(lines[0]))
    (tmp_path / "second.json").write_text(json.dumps(lines[1]))
    assert main(["bench", "judge", str(tmp_path / "first.json"), "--history", str(hist), "--groups", "all,gx10",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reference"]["kind"] == "published"  # as when the deploy judged it
    assert main(["bench", "judge", str(tmp_path / "second.json"), "--history", str(hist), "--groups", "all,gx10",
                 "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reference"]["id"] == first["history"]["id"]


def test_bench_judge_reads_a_bench_gate_verdict_and_refuses_what_is_not_a_record(box, tmp_path, capsys):
    host, data = box
    verdict = quick.judge_record(rec(), data, [])
    saved = tmp_path / "verdict.json"
    saved.write_text(json.dumps(verdict.to_dict()))
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["bench", "judge", str(saved), "--history", str(empty), "--groups", "all,gx10", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["reason"] == verdict.reason()
    (tmp_path / "list.json").write_text("[]")
    assert main(["bench", "judge", str(tmp_path / "list.json"), "--history", str(empty)]) == 2
    assert "not a sparkctl bench record" in capsys.readouterr().err
    assert main(["bench", "judge", str(saved), "--history", str(tmp_path / "missing.jsonl")]) == 2
    assert main(["bench", "judge", str(saved), "--history", str(empty), "--data", "NOEQUALS"]) == 2
    assert "--data" in capsys.readouterr().err
