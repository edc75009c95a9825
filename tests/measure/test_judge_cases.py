"""The judge's last wrong verdicts and refusals (issue 33), each replayed as an operator would: a tiny record or history
in tmp_path, run through `python -m sparkctl bench judge|confirm|history` (sparkctl.__main__.main).

1. a NIAH cell without its needle value is refused (exit 2, file and field), never a KeyError;
2. only finite figures within record.MAX_FIGURE are read or kept: 1e308 and an integer beyond a float's range are
   refused, and never appended to the history (the deploy's baseline-keeping path included);
3. a history whose ids repeat is judged against the right anchor; a run already recorded is not appended again;
4. after the stream set changed, an operator's confirmation is the new baseline and later runs are judged by it;
5. a record that measured nothing fails, saying so;
6. two figures at one stream count (or prompt length) are refused, never one silently dropped;
7. a history an older version wrote (a NaN line) is refused with how to repair it, and `bench history --repair`
   moves the unreadable lines aside, keeping the rest and the original.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import stat

import pytest

from sparkctl.__main__ import main
from sparkctl.check.load import host_config
from sparkctl.measure import acceptance, history, quick, record
from tests.measure.test_acceptance import ROOFLINE, T
from tests.measure.test_history import LocalHost
from tests.measure.test_reference import ALL, rec
from tests.measure.test_yardstick import GROUPS, STEPS, _exit2, judge_offline, scaled


def _judge_file(tmp_path, r: dict, hist_text: str = "", *extra: str) -> list[str]:
    """`bench judge` argv for record r (written as JSON as given) and a history of hist_text."""
    path, hist = tmp_path / "candidate.json", tmp_path / "history.jsonl"
    path.write_text(json.dumps(r))
    hist.write_text(hist_text)
    return ["bench", "judge", str(path), "--history", str(hist), *GROUPS, *extra]


@pytest.fixture
def box(tmp_path):
    """(the box, its validated settings): the history lives under a throw-away STATE_DIR, its commands run locally."""
    return LocalHost(name="spark-1", address="127.0.0.1"), host_config({**ALL, "STATE_DIR": str(tmp_path / "state")})


@pytest.fixture
def on_box(box, monkeypatch):
    """The operator's commands (`bench history`, `bench confirm`) pointed at the throw-away box."""
    from sparkctl.measure import cli

    host, config = box
    monkeypatch.setattr(cli.hosts, "find", lambda name=None: host)
    monkeypatch.setattr(cli, "load", lambda groups=None, host=None: config)
    return host, config


# ---------------------------------------------------------------------------------------------------- 1: NIAH

@pytest.mark.parametrize("passed", [False, True])
def test_a_niah_cell_without_its_needle_value_is_refused_naming_file_and_field(tmp_path, capsys, passed):
    r = rec()
    r["gate"]["niah"]["passed"] = passed
    del r["gate"]["niah"]["needle_value"]
    argv = _judge_file(tmp_path, r)
    _exit2(capsys, argv, str(tmp_path / "candidate.json"), "gate.niah.needle_value")


# ---------------------------------------------------------------------------------------------------- 2: the range

@pytest.mark.parametrize("figure,words", [(1e308, ["runs.0.counter_tokens_per_s", "sane range"]),
                                          (10 ** 400, ["runs.0.counter_tokens_per_s", "beyond a float's range"])],
                         ids=["1e308", "10**400"])
@pytest.mark.parametrize("as_json", [[], ["--json"]])
def test_a_figure_beyond_the_sane_range_is_refused_in_both_outputs(tmp_path, capsys, figure, words, as_json):
    argv = _judge_file(tmp_path, rec(decode=(figure, 73.0)), "", *as_json)
    _exit2(capsys, argv, str(tmp_path / "candidate.json"), *words)


def test_a_huge_figure_in_a_field_the_model_does_not_name_is_refused_too(tmp_path, capsys):
    r = rec()
    r["runs"][0]["future_figure"] = 10 ** 400  # kept by the model (extra fields), and then printed by --json
    _exit2(capsys, _judge_file(tmp_path, r, "", "--json"), "runs.0.future_figure", "beyond a float's range")


def test_a_history_line_beyond_the_sane_range_is_refused_naming_its_line(tmp_path, capsys):
    line = history.make_line(rec(), baseline=True, source="acceptance")
    line["prefill"][0]["tokens_per_s"] = 1e308
    argv = _judge_file(tmp_path, rec(), json.dumps(line) + "\n")
    _exit2(capsys, argv, f"{tmp_path / 'history.jsonl'} line 1", "prefill.0.tokens_per_s", "sane range")


def test_the_deploy_never_keeps_a_run_beyond_the_sane_range_as_its_baseline(box):
    """quick.record_accepted is what tasks/acceptance.py calls after a commit: the run is refused, nothing written."""
    host, config = box
    for figure in (1e308, 10 ** 400):
        huge = rec(decode=(figure, 73.0))
        verdict = dataclasses.replace(acceptance.judge(rec(), T, speculative=False), record=huge)
        assert verdict.passed  # a passed verdict carrying it (whatever let it through): the history must refuse it
        with pytest.raises(record.BenchError, match="runs.0.counter_tokens_per_s"):
            quick.record_accepted(host, config.cfg, verdict)
        with pytest.raises(record.BenchError, match="runs.0.counter_tokens_per_s"):
            history.append(host, config.cfg, huge, source="bench", baseline=True)
    assert history.read(host, config.cfg) == []


def test_a_vanishing_reference_prints_no_infinite_delta():
    assert acceptance._delta_pct(18.3, 5e-324) is None  # 100 x 18.3 / 5e-324 overflows: said as no delta
    assert acceptance._delta_pct(9.0, 18.0) == -50.0


# ---------------------------------------------------------------------------------------------------- 3: repeated ids

def test_a_history_whose_ids_repeat_judges_against_the_boxs_first_baseline(tmp_path, capsys):
    """No published figures for this workload (ignore_eos): the box's anchor is the only fixed yardstick."""
    first = history.make_line(scaled(1.0, ignore_eos=True, **STEPS[0]), baseline=True, source="acceptance")
    slow = history.make_line(scaled(0.55, ignore_eos=True, **STEPS[1]), baseline=True, source="acceptance")
    slow["history"]["id"] = first["history"]["id"]  # written by hand, or by a version that let ids repeat
    candidate = scaled(0.49, ignore_eos=True, **STEPS[1])  # 11 % below its own baseline, 51 % below the first
    code, v = judge_offline(tmp_path, candidate, [first, slow], capsys=capsys)
    assert code == 1 and v["reference"]["kind"] == "baseline"
    assert {f["against"] for f in v["failures"]} == {"anchor"}
    assert {f["expected"] for f in v["failures"] if f["figure"] == "decode tok/s, 1 stream"} == {18.3}
    assert not any("is the reference itself" in n for n in v["notes"])


def test_a_rerun_of_the_first_configuration_is_still_not_judged_twice(tmp_path, capsys):
    first = history.make_line(scaled(1.0, ignore_eos=True), baseline=True, source="acceptance")
    code, v = judge_offline(tmp_path, scaled(0.9, ignore_eos=True), [first], capsys=capsys)
    assert code == 0 and v["anchors"] == [] and any("is the reference itself" in n for n in v["notes"])


def test_a_run_already_recorded_is_not_appended_again(box):
    host, config = box
    verdict = quick.judge_record(rec(), config, [])
    line = quick.record_accepted(host, config.cfg, verdict)
    with pytest.raises(record.BenchError, match=f"run {line['history']['id']} is already recorded \\(line 1\\)"):
        quick.record_accepted(host, config.cfg, verdict)
    assert len(history.read(host, config.cfg)) == 1


# ---------------------------------------------------------------------------------------------------- 4: stream set

def _at_streams(r: dict, second: int, figure: float) -> dict:
    """r measured at 1, 4 and `second` streams too (the gate reconfigured: ACCEPTANCE_STREAMS), `figure` tok/s there.
    A stream set that drops a window the baseline measured fails (issue 42: test_judge_records.py); one that adds
    a window is judged as this case always was."""
    r["runs"].append(dict(r["runs"][1], streams=second, counter_tokens_per_s=figure,
                          roofline_tokens_per_s=ROOFLINE * second))
    r["gate"]["streams"] = [1, 4, second]
    return r


def test_after_the_stream_set_changed_a_confirmed_run_is_the_baseline_later_runs_are_judged_by(on_box, capsys):
    host, config = on_box
    history.append(host, config.cfg, scaled(1.0, ignore_eos=True), source="bench", baseline=True)
    wider = _at_streams(scaled(1.0, ignore_eos=True), 8, 120.0)  # 8 streams: nothing measured there yet
    v = quick.judge_record(wider, config, history.read(host, config.cfg))
    assert v.passed and v.provisional and v.unreferenced == ["decode tok/s, 8 streams"]
    line = quick.record_accepted(host, config.cfg, v)
    assert main(["bench", "confirm", "@" + line["history"]["id"]]) == 0
    assert "(the baseline of its configuration and workload)" in capsys.readouterr().out
    confirmation = history.read(host, config.cfg)[-1]
    assert confirmation["history"]["baseline"] is True
    slower = _at_streams(scaled(1.0, ignore_eos=True), 8, 120.0 * 0.65)  # 35 % below the confirmed run
    code, out = _judged_on_the_box(host, config, slower, capsys)
    assert code == 1 and not out["provisional"] and out["reference"]["id"] == confirmation["history"]["id"]
    assert [f["figure"] for f in out["failures"]] == ["decode tok/s, 8 streams"]
    code, out = _judged_on_the_box(host, config, _at_streams(scaled(0.95, ignore_eos=True), 8, 118.0), capsys)
    assert code == 0 and not out["provisional"]


def _judged_on_the_box(host, config, r: dict, capsys) -> tuple[int, dict]:
    """`bench judge` of r against a copy of the box's history, as an operator audits it."""
    folder = os.path.dirname(history.history_path(config.cfg))
    path = record.write_record(r, os.path.join(folder, "candidate.json"))
    code = main(["bench", "judge", str(path), "--history", history.history_path(config.cfg), *GROUPS, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_confirming_a_run_its_baseline_already_covers_keeps_that_baseline(box):
    host, config = box
    base = history.append(host, config.cfg, scaled(1.0, ignore_eos=True), source="bench", baseline=True)
    guess = history.append(host, config.cfg, scaled(0.97, ignore_eos=True), source="acceptance", provisional=True)
    line = history.confirm(host, config.cfg, guess["history"]["id"])
    assert line["history"]["baseline"] is False  # the full bench stays the yardstick
    assert history.baseline_for(history.read(host, config.cfg), guess)["history"]["id"] == base["history"]["id"]


# ---------------------------------------------------------------------------------------------------- 5: nothing

def test_a_record_that_measured_nothing_fails_saying_so(tmp_path, capsys):
    r = rec()
    r["runs"], r["prefill"] = [], []
    r["gate"]["streams"], r["gate"]["prefill_tokens"] = [], []
    no_draft = ["--data", 'CATALOG_OVERRIDES={"qwen3.8-27b": {"speculative": null}}']  # a model without speculation
    assert main(_judge_file(tmp_path, r, "", "--json", *no_draft)) == 1
    v = json.loads(capsys.readouterr().out)
    assert v["passed"] is False and not v["provisional"]
    assert "measured nothing" in v["reason"]
    for off in (["--data", "ACCEPTANCE_DECODE_ENABLED=False", "--data", "ACCEPTANCE_PREFILL_ENABLED=False"],):
        assert main(_judge_file(tmp_path, r, "", *no_draft, *off)) == 1  # switched off or not: nothing measured
        assert "measured nothing" in " ".join(capsys.readouterr().out.split())


# ---------------------------------------------------------------------------------------------------- 6: twice

def test_two_windows_at_one_stream_count_are_refused_never_one_dropped(tmp_path, capsys):
    r = rec()
    r["runs"].append(dict(r["runs"][1], counter_tokens_per_s=1.0))
    _exit2(capsys, _judge_file(tmp_path, r), str(tmp_path / "candidate.json"), "runs",
           "two decode windows at 4 streams (items 1 and 2)")
    r = rec()
    r["prefill"].append(dict(r["prefill"][0], tokens_per_s=1.0))
    _exit2(capsys, _judge_file(tmp_path, r), "prefill", "two prefills of 12288 tokens (items 0 and 1)")


def test_a_stream_count_configured_twice_is_refused_before_anything_is_measured(box):
    from sparkctl.errors import SettingError

    _host, config = box
    cfg = config.cfg.model_copy(update={"ACCEPTANCE_STREAMS": [1, 4, 1]})
    with pytest.raises(SettingError, match=r"ACCEPTANCE_STREAMS = \[1, 4, 1\].*1 appear"):
        quick.QuickSettings.from_settings(cfg)


# ---------------------------------------------------------------------------------------------------- 7: repair

def _older_history(config) -> tuple[list[dict], str]:
    """A box's history as an older version left it: a good baseline, a NaN baseline, a cut line, a good rerun."""
    good, rerun = (history.make_line(scaled(f), baseline=f == 1.0, source="acceptance") for f in (1.0, 0.98))
    nan = history.make_line(scaled(1.0, ignore_eos=True), baseline=True, source="acceptance")
    nan["prefill"][0]["tokens_per_s"] = float("nan")
    path = history.history_path(config.cfg)
    os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
    with open(path, "w") as f:
        f.write(history.serialize(good) + json.dumps(nan) + "\n" + '{"schema": "sparkc\n' + history.serialize(rerun))
    os.chmod(path, 0o600)
    return [good, rerun], path


def test_an_older_versions_nan_line_is_refused_naming_it_and_how_to_repair(on_box, tmp_path, capsys):
    _host, config = on_box
    _kept, path = _older_history(config)
    _exit2(capsys, _judge_file(tmp_path, rec(), open(path).read()), f"{tmp_path / 'history.jsonl'} line 2",
           "prefill.0.tokens_per_s", "bench history --repair")
    _exit2(capsys, ["bench", "history"], f"{path} line 2", "bench history --repair")


def test_bench_history_repair_moves_unreadable_lines_aside_and_keeps_the_rest_and_the_original(on_box, capsys):
    host, config = on_box
    kept, path = _older_history(config)
    original = open(path, "rb").read()
    assert main(["bench", "history", "--repair"]) == 0
    out = capsys.readouterr().out
    assert "moved 2 unreadable line(s)" in out and "kept 2" in out
    assert "line 2 (id " in out and "a baseline): " in out and "prefill.0.tokens_per_s" in out
    assert "line 3: not a sparkctl history line (not JSON" in out and "becomes its baseline again" in out
    assert [x["history"]["id"] for x in history.read(host, config.cfg)] == [x["history"]["id"] for x in kept]
    folder = os.path.dirname(path)
    (aside,) = [f for f in os.listdir(folder) if ".unreadable-" in f]
    (backup,) = [f for f in os.listdir(folder) if ".before-repair-" in f]
    assert open(os.path.join(folder, backup), "rb").read() == original
    moved = open(os.path.join(folder, aside), "rb").read().splitlines()
    assert moved == original.splitlines()[1:3]
    for name in (path, os.path.join(folder, aside), os.path.join(folder, backup)):
        assert stat.S_IMODE(os.stat(name).st_mode) == 0o600
    assert not [f for f in os.listdir(folder) if f.endswith(".repairing")]
    assert main(["bench", "history", "--repair"]) == 0  # a second repair finds nothing
    assert "nothing to repair" in capsys.readouterr().out
    assert main(["bench", "history"]) == 0


def test_a_repair_never_replaces_a_history_appended_to_meanwhile(on_box, capsys):
    host, config = on_box
    _kept, path = _older_history(config)
    data = open(path, "rb").read()
    kept, _moved = history.split_readable(data, path)
    with open(path, "ab") as f:  # a deploy appends between the repair's read and its replace
        f.write(history.serialize(history.make_line(scaled(0.9), baseline=False, source="acceptance")).encode())
    stamp = "20260101T000000Z"
    aside, backup = f"{path}.unreadable-{stamp}", f"{path}.before-repair-{stamp}"
    with pytest.raises(history.HistoryError, match="changed while it was repaired"):
        history._ssh(host, history.replace_command(path, backup, aside, hashlib.sha256(data).hexdigest()), stdin=kept)
    assert open(path, "rb").read().startswith(data) and not os.path.exists(backup)


def test_a_byte_that_is_not_utf8_is_moved_aside_with_its_line(tmp_path):
    good = history.serialize(history.make_line(rec(), baseline=True, source="acceptance")).encode()
    kept, moved = history.split_readable(good + b'{"x": "\xff"}\n' + b"\n", "h")
    assert kept == good and [(m.number, m.why) for m in moved] == [(2, "not UTF-8 (byte 0xff at column 8)")]
