"""A record is evidence (issue 42): the bad records a careless operator, a box with a wrong clock or a hand edit would
leave, each run through `python -m sparkctl bench judge` in both output modes, exit 2 (refused, naming the field) or
1 (failed, naming the figure), never 0, and the history file byte-identical after the call:

1. types are not coerced: a figure written as a string, a flag written as a word, a typo'd key;
2. impossible values: rates outside [0, 1], tokens per step beyond the catalog's draft, 0 tok/s, a decode rate
   beyond the box's bandwidth bound;
3. self-contradicting records: a NIAH cell whose `passed` its answer contradicts, a workload whose version and
   sha256 disagree with the registry, a stream set that drops a window the baseline measured;
4. the wrong box: a simulated record against a real box's history and the other way round;
5. the wrong time: a record dated ahead of the judge's clock + ACCEPTANCE_CLOCK_SKEW_S, a date that is no date;
   and the deploy's append refuses a box whose clock disagrees with the control machine's.
"""

from __future__ import annotations

import datetime as dt
import json

import pytest

from sparkctl.__main__ import main
from sparkctl.measure import evidence, history, quick, record
from tests.measure.test_acceptance import ROOFLINE, workload_part
from tests.measure.test_bench_judge import box  # noqa: F401 - the fixture
from tests.measure.test_reference import rec
from tests.measure.test_yardstick import GROUPS, scaled

MODES = ([], ["--json"])


def _set(r: dict, path: str, value) -> dict:
    """r with the field at a dotted path ("runs.0.counter_tokens_per_s") set to value (a missing last key added)."""
    *parents, last = path.split(".")
    at = r
    for p in parents:
        at = at[int(p)] if isinstance(at, list) else at[p]
    at[int(last) if isinstance(at, list) else last] = value
    return r


def judged(tmp_path, capsys, r: dict, lines: list[dict] = (), *extra: str) -> list[tuple[int, str]]:
    """(exit code, what it printed) of `bench judge` on r (written as given: a string stays a string) against a
    history of lines, in both output modes; the history must be byte-identical after each call."""
    path, hist = tmp_path / "candidate.json", tmp_path / "history.jsonl"
    path.write_text(json.dumps(r))
    hist.write_text("".join(history.serialize(x) for x in lines))
    before = hist.read_bytes()
    out = []
    for mode in MODES:
        code = main(["bench", "judge", str(path), "--history", str(hist), *GROUPS, *mode, *extra])
        printed = capsys.readouterr()
        assert hist.read_bytes() == before
        assert "Traceback" not in printed.out + printed.err
        out.append((code, printed.out + printed.err))
    return out


def refused(tmp_path, capsys, r: dict, lines: list[dict] = (), *words: str) -> None:
    for code, said in judged(tmp_path, capsys, r, lines):
        assert code == 2 and all(w in said for w in words), (code, said)


def failed(tmp_path, capsys, r: dict, lines: list[dict], *words: str) -> None:
    for code, said in judged(tmp_path, capsys, r, lines):
        assert code == 1 and all(w in " ".join(said.split()) for w in words), (code, said)


def test_the_good_record_passes_in_both_modes(tmp_path, capsys):
    """The control: every bad record below is this one with one thing wrong."""
    assert [code for code, _ in judged(tmp_path, capsys, rec())] == [0, 0]


# ---------------------------------------------------------------------------------------------------- 1: types

@pytest.mark.parametrize("field,value", [
    ("runs.0.counter_tokens_per_s", "18.3"), ("runs.1.streams", "4"), ("window_s", "10"),
    ("prefill.0.tokens_per_s", "2088"), ("runs.0.spec_decode.acceptance_rate", "0.5"),
    ("runs.0.spec_decode.tokens_per_step", True), ("gate.niah.passed", "true"), ("gate.niah.depth", "50"),
    ("gate.kv.measured_tokens", 990000.5), ("workload.version", "1"), ("box.simulated", "false"),
    ("gate.streams", "1,4"), ("runs.0.acceptance_rte", 0.5)])
def test_a_figure_of_another_type_is_refused_never_coerced(tmp_path, capsys, field, value):
    refused(tmp_path, capsys, _set(rec(), field, value), [], field)


@pytest.mark.parametrize("field,value,words", [
    ("model.key", "qwen3.8-27B", "qwen3.8-27b"), ("model.key", "gpt-4", "laguna-s-2.1"),
    ("gate.kind", "bench", "'acceptance'"), ("schema", "sparkctl.bench/2", "'sparkctl.bench/1'")])
def test_an_enumeration_is_one_of_its_own_keys(tmp_path, capsys, field, value, words):
    refused(tmp_path, capsys, _set(rec(), field, value), [], field, words)


@pytest.mark.parametrize("field,value", [("history.reference.kind", "newest"), ("history.source", "hand"),
                                         ("history.baseline", "yes"), ("history.appended", "now")])
def test_a_history_line_holds_the_same_strict_types(tmp_path, capsys, field, value):
    line = history.make_line(rec(), baseline=True, source="acceptance",
                             reference={"kind": "published", "name": "the catalog's", "id": None})
    hist = tmp_path / "history.jsonl"
    hist.write_text(json.dumps(_set(line, field, value)) + "\n")
    before = hist.read_bytes()
    path = record.write_record(rec(decode=(18.0, 72.0)), tmp_path / "candidate.json")
    for mode in MODES:
        assert main(["bench", "judge", str(path), "--history", str(hist), *GROUPS, *mode]) == 2
        err = capsys.readouterr().err
        assert f"{hist} line 1" in err and field in err, err
        assert hist.read_bytes() == before


@pytest.mark.parametrize("field,value,words", [
    ("runs.0.counter_tokens_per_s", "18.3", 'runs.0.counter_tokens_per_s = "18.3": a number, not a string'),
    ("window_s", True, "window_s = true: a number, not true or false"),
    ("prefill.0.tokens_per_s", None, ""),  # null is allowed here: "not measured", a failure (exit 1)
    ("runs.1.streams", 4.0, "runs.1.streams = 4.0: Input should be a valid integer")])
def test_a_refusal_of_a_type_says_the_value_and_what_it_must_be(tmp_path, capsys, field, value, words):
    r = _set(rec(), field, value)
    if value is None:  # the optional prefill rate may be null: a fresh prefill without one fails as not measured
        assert [code for code, _ in judged(tmp_path, capsys, r)] == [1, 1]
        return
    refused(tmp_path, capsys, r, [], words)


# ---------------------------------------------------------------------------------------------------- 2: impossible

@pytest.mark.parametrize("field,value,bound", [
    ("runs.0.spec_decode.acceptance_rate", 1.2, "less than or equal to 1"),
    ("runs.0.spec_decode.acceptance_rate", -0.1, "greater than or equal to 0"),
    ("runs.0.spec_decode.per_position_acceptance.1", 1.5, "less than or equal to 1"),
    ("runs.0.spec_decode.tokens_per_step", 0.5, "greater than or equal to 1"),
    ("runs.0.spec_decode.tokens_per_step", 4.5, "at most 4 (the catalog's num_speculative_tokens 3"),
    ("runs.0.spec_decode.mean_draft_length", 5.0, "at most the catalog's num_speculative_tokens 3"),
    ("runs.0.spec_decode.per_position_acceptance.5", 0.2, "no such draft position: a rate at a draft position from 0"),
    ("runs.0.counter_tokens_per_s", 0, "above 0 tok/s"),
    ("runs.0.counter_tokens_per_s", 250.0, "at most 102.375 tok/s at 1 stream(s), the box's bandwidth bound"),
    ("runs.1.counter_tokens_per_s", 5000.0, "at most 409.5 tok/s at 4 stream(s)"),
    ("prefill.0.tokens_per_s", 0.0, "above 0 tok/s")])
def test_an_impossible_value_is_refused_naming_the_field_value_and_bound(tmp_path, capsys, field, value, bound):
    refused(tmp_path, capsys, _set(rec(), field, value), [], field, bound)


def test_a_prefill_of_0_with_nothing_to_compare_with_is_refused_not_provisional(tmp_path, capsys):
    r = _set(scaled(1.0, ignore_eos=True), "prefill.0.tokens_per_s", 0.0)  # no published figures for ignore_eos
    refused(tmp_path, capsys, r, [], "prefill.0.tokens_per_s = 0", "above 0 tok/s")


def test_the_ceiling_is_the_bandwidth_bound_of_this_box_and_model():
    from sparkctl.check.load import host_config
    from tests.measure.test_reference import ALL

    b = evidence.Bounds.of(host_config(ALL), "qwen3.8-27b")
    # 273 GB/s over 16 GB a step, 3 drafted + 1 tokens a step at most, x 1.5: above the planner's 2.5-token roofline
    assert b.draft_tokens == 3 and b.decode_ceiling_single == pytest.approx(273 / 16 * 4 * 1.5)
    assert b.decode_ceiling_single > ROOFLINE
    laguna = evidence.Bounds.of(host_config(ALL), "laguna-s-2.1")
    assert laguna.draft_tokens == 7


# ---------------------------------------------------------------------------------------------------- 3: contradicting

@pytest.mark.parametrize("passed,answer", [(True, "I do not know"), (True, "4829174"), (True, ""),
                                           (False, "It is 4,829,173.")])
def test_a_niah_cell_is_re_scored_from_its_answer_and_needle(tmp_path, capsys, passed, answer):
    r = rec()
    r["gate"]["niah"].update(passed=passed, answer=answer)
    refused(tmp_path, capsys, r, [], "gate.niah.passed", "re-scored from its answer", "4829173")


def test_a_niah_cell_that_erred_cannot_be_passed(tmp_path, capsys):
    r = rec()
    r["gate"]["niah"].update(passed=True, error="HTTP 500: boom")
    refused(tmp_path, capsys, r, [], "gate.niah.passed", "skipped or erred")


def test_a_long_answer_keeps_its_needle_so_the_judge_can_re_score_it():
    from sparkctl.measure import niah

    answer = "Let me look. " * 200 + "The number is 4,829,173." + " Done." * 100
    kept = niah.kept_answer(answer, "4829173")
    assert len(kept) == niah.ANSWER_CHARS and niah.score_answer(kept, "4829173")


@pytest.mark.parametrize("workload,field,words", [
    (("codegen", 2, "sha of v1"), "workload.version", "the sha256 of codegen-v1's prompts"),
    (("codegen", 1, "edited"), "workload.sha256", "the registry's codegen-v1 prompts hash to"),
    (("other", 7, "sha of v1"), "workload.version", "the sha256 of codegen-v1's prompts")])
def test_a_workload_whose_version_and_sha256_contradict_the_registry_is_refused(tmp_path, capsys, workload, field,
                                                                                 words):
    r = rec()
    r["workload"] = workload_part(*workload)
    if workload[2] == "sha of v1":  # the same prompts under another label
        r["workload"]["sha256"] = workload_part("codegen", 1, "abc")["sha256"]
    refused(tmp_path, capsys, r, [], field, words)


def test_a_workload_without_its_sha256_is_refused(tmp_path, capsys):
    r = rec()
    del r["workload"]["sha256"]
    refused(tmp_path, capsys, r, [], "workload.sha256", "which prompts")


def test_a_workload_the_registry_does_not_know_is_its_own_and_judged(tmp_path, capsys):
    """A `bench --workload FILE` workload: nothing to re-derive it against, never lined up with another."""
    r = rec()
    r["workload"] = workload_part("mine", 1, "my prompts")
    base = history.make_line(rec(), baseline=True, source="acceptance")  # codegen-v1: not this workload's
    for code, said in judged(tmp_path, capsys, r, [base]):
        assert code == 0 and "baseline " + base["history"]["id"] not in said


def _dropping(r: dict, streams: list[int]) -> dict:
    """r as a gate configured (ACCEPTANCE_STREAMS) to measure only `streams`."""
    r["runs"] = [dict(r["runs"][0], streams=n, counter_tokens_per_s=18.3 * n, roofline_tokens_per_s=ROOFLINE * n)
                 for n in streams]
    r["gate"]["streams"] = list(streams)
    return r


@pytest.mark.parametrize("streams", [[1], [1, 8], [2, 8]])
def test_a_stream_set_that_drops_a_window_the_baseline_measured_fails_naming_it(tmp_path, capsys, streams):
    base = history.make_line(scaled(1.0, ignore_eos=True), baseline=True, source="acceptance")  # 1 and 4 streams
    dropped = sorted({1, 4} - set(streams))
    words = [f"decode tok/s, {n} stream{'s' if n > 1 else ''}: measured by baseline {base['history']['id']}, "
             "missing from this run" for n in dropped]
    failed(tmp_path, capsys, _dropping(scaled(1.0, ignore_eos=True), streams), [base], *words)


def test_a_stream_set_that_drops_a_window_of_the_previous_configuration_fails_too(tmp_path, capsys):
    base = history.make_line(scaled(1.0, ignore_eos=True), baseline=True, source="acceptance")
    upgrade = _dropping(scaled(1.0, ignore_eos=True, vllm="0.33.0", build="0.33.0-cccccccccccc"), [1, 8])
    failed(tmp_path, capsys, upgrade, [base], "decode tok/s, 4 streams", "the previous vLLM 0.32.0 baseline",
           "missing from this run")


def test_a_full_bench_baseline_requires_no_window_of_the_gate(tmp_path, capsys):
    """BENCH_STREAMS is not the gate's set: a full bench (`bench --record-baseline`) is how the set changes."""
    bench = scaled(1.0, ignore_eos=True)
    del bench["gate"]
    base = history.make_line(bench, baseline=True, source="bench")
    for code, said in judged(tmp_path, capsys, _dropping(scaled(1.0, ignore_eos=True), [1]), [base]):
        assert code == 0, said


# ---------------------------------------------------------------------------------------------------- 4: the box

def _kind(r: dict, simulated) -> dict:
    r["box"]["simulated"] = simulated
    return r


@pytest.mark.parametrize("mine,theirs", [(True, False), (False, True)])
def test_simulated_and_real_boxes_never_share_a_history(tmp_path, capsys, mine, theirs):
    lines = [history.make_line(_kind(rec(), theirs), baseline=True, source="acceptance")]
    said = "a real box's runs" if theirs is False else "a simulated box's runs"
    refused(tmp_path, capsys, _kind(rec(), mine), lines, f"box.simulated = {mine}", said,
            f"line 1, id {lines[0]['history']['id']}", "never share a baseline")


@pytest.mark.parametrize("value", [None, "absent"])
def test_a_record_that_does_not_say_its_box_kind_is_refused(tmp_path, capsys, value):
    r = rec()
    if value == "absent":
        del r["box"]["simulated"]
    else:
        r["box"]["simulated"] = value
    refused(tmp_path, capsys, r, [], "box.simulated", "true or false")


def test_the_closest_previous_configuration_is_of_the_same_box_kind_model_and_workload_sha():
    """Pure: the reference order never lines up another box kind or prompt set, whatever the history holds."""
    from sparkctl.measure import reference

    assert history.mismatch(_kind(rec(), True), rec()) == ["configuration differs in simulated: True vs False"]
    upgrade = rec(vllm="0.33.0", build="0.33.0-cccccccccccc")
    for other in (_kind(rec(), True), dict(rec(), workload=workload_part("codegen", 1, "edited")),
                  dict(rec(), model={"key": "laguna-s-2.1", "repo": "x/y"})):
        line = history.make_line(other, baseline=True, source="acceptance")
        assert reference.previous_for([line], upgrade) is None and reference.anchor_for([line], upgrade) is None
    same = history.make_line(rec(), baseline=True, source="acceptance")
    assert reference.previous_for([same], upgrade)[0] is same


# ---------------------------------------------------------------------------------------------------- 5: the time

def _iso(when: dt.datetime) -> str:
    return when.replace(microsecond=0).isoformat().replace("+00:00", "Z")


@pytest.mark.parametrize("ahead_s", [400, 3600, 5 * 365 * 86400])
def test_a_record_dated_ahead_of_the_clock_is_refused(tmp_path, capsys, ahead_s):
    date = _iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=ahead_s))
    r = dict(rec(), date=date)
    refused(tmp_path, capsys, r, [], f"date = '{date}'", "ACCEPTANCE_CLOCK_SKEW_S 300 s")


def test_a_record_within_the_clock_skew_is_judged(tmp_path, capsys):
    r = dict(rec(), date=_iso(dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=120)))
    assert [code for code, _ in judged(tmp_path, capsys, r)] == [0, 0]
    assert [code for code, _ in judged(tmp_path, capsys, r, [], "--data", "ACCEPTANCE_CLOCK_SKEW_S=60")] == [2, 2]


@pytest.mark.parametrize("date,why", [("yesterday", "not an ISO 8601 date"), ("2026-13-01T00:00:00Z", "not an ISO"),
                                      ("2026-12-01T10:00:00", "no timezone"), ("2026-12-01", "no timezone"),
                                      (20261201, "valid string")])
def test_a_date_that_is_no_date_is_refused(tmp_path, capsys, date, why):
    refused(tmp_path, capsys, dict(rec(), date=date), [], "date", why)


def test_a_history_line_dated_nonsense_is_refused_naming_its_line(tmp_path, capsys):
    line = history.make_line(rec(), baseline=True, source="acceptance")
    line["history"]["appended"] = "2026-12-01 10:00"
    hist = tmp_path / "history.jsonl"
    hist.write_text(json.dumps(line) + "\n")
    path = record.write_record(rec(decode=(18.0, 72.0)), tmp_path / "candidate.json")
    for mode in MODES:
        assert main(["bench", "judge", str(path), "--history", str(hist), *GROUPS, *mode]) == 2
        err = capsys.readouterr().err
        assert f"{hist} line 1" in err and "history.appended" in err and "no timezone" in err


def test_the_deploy_refuses_to_append_when_the_boxs_clock_disagrees(box, monkeypatch):  # noqa: F811
    """quick.record_accepted (tasks/acceptance.py after a commit) and `bench confirm` both append through
    history.append: it reads the box's clock and refuses when the control machine's is more than the skew apart."""
    host, config = box
    verdict = quick.judge_record(rec(), config, [])
    now = history.control_now()
    for off in (-3600, 400, 10 * 365 * 86400):
        monkeypatch.setattr(history, "control_now", lambda off=off: now - off)  # the box runs `off` s ahead
        with pytest.raises(evidence.Refused, match="the box's clock = .*within ACCEPTANCE_CLOCK_SKEW_S 300 s"):
            quick.record_accepted(host, config.cfg, verdict)
        assert history.read(host, config.cfg) == []
    monkeypatch.setattr(history, "control_now", lambda: now + 5)  # 5 s apart: within the skew, both recorded
    line = quick.record_accepted(host, config.cfg, verdict)
    clocks = line["history"]["clocks"]
    assert set(clocks) == {"box", "control"} and clocks == history.read(host, config.cfg)[0]["history"]["clocks"]


def test_bench_confirm_refuses_a_line_that_is_no_evidence(box):  # noqa: F811
    """A provisional line a hand put in the history, dated years ahead: confirming it would make it a yardstick."""
    host, config = box
    future = dict(scaled(1.0, ignore_eos=True), date="2031-01-01T00:00:00Z")
    line = history.make_line(future, baseline=False, source="acceptance", provisional=True)
    path = history.history_path(config.cfg)
    import os

    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(history.serialize(line))
    before = open(path, "rb").read()
    with pytest.raises(evidence.Refused, match="date = '2031-01-01T00:00:00Z'"):
        history.confirm(host, config.cfg, line["history"]["id"])
    assert open(path, "rb").read() == before
