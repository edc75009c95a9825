"""The yardstick never creeps. Replayed offline as an operator auditing a box's history would
(`python -m sparkctl bench judge RECORD --history FILE --groups all,gx10`):

1. five changes in a row, each 14 % slower than the one before, fail at the step where the cumulative limit against
   a fixed anchor (the published figures, or this box's first confirmed baseline) is crossed;
2. nothing measured is no free pass: such a run is provisional until an operator confirms it; a tensor-parallel pair
   slower than one box fails; a draft that accepts nothing fails, floor or no floor;
3. missing figures fail, and a reference missing a figure hands it to the next one;
4. "previous" is the closest configuration, not the newest other one;
5. non-finite numbers are refused where they are read, and `--json` never prints NaN;
6. malformed cells and a non-UTF-8 history exit 2, naming file and field, never a traceback;
7. a missing tokens-per-step is "not measured", and the human output keeps its [baseline <id>] tags.
"""

from __future__ import annotations

import json

import pytest

from sparkctl.__main__ import main
from sparkctl.check.load import host_config
from sparkctl.measure import acceptance, history, quick, record
from tests.measure.test_acceptance import T
from tests.measure.test_bench_judge import box  # noqa: F401 - the fixture
from tests.measure.test_reference import ALL, rec

PUBLISHED = (18.3, 73.0, 2088.0)  # the catalog's Qwen figures at 1 and 4 streams, and its 12K prefill
GROUPS = ["--groups", "all,gx10"]


def scaled(f: float, **kw) -> dict:
    """A run at f times the published figures."""
    return rec(decode=(PUBLISHED[0] * f, PUBLISHED[1] * f), prefill=PUBLISHED[2] * f, **kw)


def accepted(r: dict, lines: list[dict], config) -> dict:
    """The deploy's path after a commit, without a box: judged, then appended as record_accepted would."""
    v = quick.judge_record(r, config, lines)
    assert v.passed, v.reason()
    return history.make_line(v.record, baseline=history.baseline_for(lines, r) is None and not v.provisional,
                             source="acceptance", reference=v.reference.tag(), provisional=v.provisional)


def judge_offline(tmp_path, r: dict, lines: list[dict], *extra: str, capsys) -> tuple[int, dict]:
    hist, path = tmp_path / "history.jsonl", tmp_path / "candidate.json"
    hist.write_text("".join(history.serialize(x) for x in lines))
    record.write_record(r, path)
    code = main(["bench", "judge", str(path), "--history", str(hist), *GROUPS, "--json", *extra])
    return code, json.loads(capsys.readouterr().out)


# five changes: a first flip, vLLM 0.33, a venv rebuild, a new checkpoint revision, vLLM 0.34
STEPS = [dict(vllm="0.32.0", build="0.32.0-aaaaaaaaaaaa", revision="a" * 40),
         dict(vllm="0.33.0", build="0.33.0-bbbbbbbbbbbb", revision="a" * 40),
         dict(vllm="0.33.0", build="0.33.0-cccccccccccc", revision="a" * 40),
         dict(vllm="0.33.0", build="0.33.0-cccccccccccc", revision="b" * 40),
         dict(vllm="0.34.0", build="0.34.0-dddddddddddd", revision="b" * 40)]


# ---------------------------------------------------------------------------------------------------- 1: the creep

def test_the_creep_fails_at_the_second_step_against_the_published_figures(tmp_path, capsys):
    config = host_config(ALL)
    first = scaled(0.71, **STEPS[0])  # 29 % under the published figures: inside their 30 % tolerance
    code, v = judge_offline(tmp_path, first, [], capsys=capsys)
    assert code == 0 and v["reference"]["kind"] == "published"
    lines = [accepted(first, [], config)]
    code, v = judge_offline(tmp_path, scaled(0.71 * 0.86, **STEPS[1]), lines, capsys=capsys)  # 14 % slower again
    assert code == 1 and v["reference"]["kind"] == "previous"
    assert {f["against"] for f in v["failures"]} == {"published anchor"}  # within the step, beyond the sum
    assert v["failed_references"] == ["the catalog's published figures for qwen3.8-27b"]
    assert all(f["delta_pct"] == pytest.approx(-38.9, abs=0.1) for f in v["failures"])
    assert v["references"][0].startswith("the previous vLLM 0.32.0 baseline")  # every reference used is named
    assert "references used: the previous vLLM 0.32.0 baseline" in v["reason"]


def test_the_creep_fails_at_the_fourth_step_against_the_boxs_anchor_where_nothing_is_published(tmp_path, capsys):
    """The same five steps on a workload the catalog published nothing for (ignore_eos): the first flip is
    provisional, the operator confirms it, and it is the anchor every later step is also judged against."""
    config = host_config(ALL)
    first = scaled(1.0, ignore_eos=True, **STEPS[0])
    v = quick.judge_record(first, config, [])
    assert v.passed and v.provisional and v.reference.kind == "none"
    line = accepted(first, [], config)
    lines = [line, history.make_line(first, baseline=True, source="confirm", confirms=line["history"]["id"])]
    anchor = lines[1]["history"]["id"]
    codes = []
    for i, step in enumerate(STEPS[1:], 1):
        r = scaled(0.86 ** i, ignore_eos=True, **step)
        code, v = judge_offline(tmp_path, r, lines, capsys=capsys)
        codes.append(code)
        if code:
            break
        lines.append(accepted(r, lines, config))
    assert codes == [0, 0, 1]  # -14 %, -26 % pass; the new revision at -36.4 % of the anchor fails
    assert v["reference"]["kind"] == "previous"  # and passed its own step
    assert {f["against"] for f in v["failures"]} == {"anchor"}
    assert all(f["baseline_id"] == anchor for f in v["failures"])
    assert v["failed_references"][0].startswith(f"this box's anchor {anchor}")


def test_the_anchor_is_the_first_confirmed_baseline_not_the_best_nor_a_provisional_one():
    first = history.make_line(scaled(0.8), baseline=True, source="acceptance")
    best = history.make_line(scaled(1.2, **STEPS[1]), baseline=True, source="acceptance")
    guess = history.make_line(scaled(0.5, **STEPS[2]), baseline=False, source="acceptance", provisional=True)
    from sparkctl.measure import reference

    assert reference.anchor_for([guess, first, best], scaled(1.0, **STEPS[3])) is first
    assert reference.anchor_for([guess], scaled(1.0, **STEPS[3])) is None


# ---------------------------------------------------------------------------------------------------- 2: no free pass

def test_a_run_judged_on_the_roofline_alone_is_provisional_until_an_operator_confirms_it(box, monkeypatch, capsys):
    from sparkctl.measure import cli

    host, config = box
    r = scaled(1.0, repo="someone/else")  # no published figures for this checkpoint: nothing measured
    v = quick.judge_record(r, config, history.read(host, config.cfg))
    assert v.passed and v.provisional and "provisional" in v.reason() and "bench confirm" in v.reason()
    line = quick.record_accepted(host, config.cfg, v)
    assert line["history"]["provisional"] is True and line["history"]["baseline"] is False
    again = quick.judge_record(scaled(0.5, repo="someone/else"), config, history.read(host, config.cfg))
    assert again.reference.kind == "none" and again.provisional  # the provisional run judged nothing
    monkeypatch.setattr(cli.hosts, "find", lambda name=None: host)
    monkeypatch.setattr(cli, "load", lambda groups=None, host=None: config)
    assert main(["bench", "history", "--json"]) == 0
    assert [x["history"].get("provisional") for x in json.loads(capsys.readouterr().out)] == [True]
    assert history.judged_against(line) == "none (provisional)"
    assert history._row(line)[3] == "P"  # the B column of `bench history`
    assert main(["bench", "history"]) == 0
    assert "P = provisional" in " ".join(capsys.readouterr().out.split())
    assert main(["bench", "confirm", "@" + line["history"]["id"][:8]]) == 0
    assert f"{line['history']['id']} confirmed by line" in capsys.readouterr().out
    assert main(["bench", "confirm", "@" + line["history"]["id"][:8]]) == 2  # once
    assert "already confirmed" in capsys.readouterr().err
    slow = quick.judge_record(scaled(0.5, repo="someone/else"), config, history.read(host, config.cfg))
    assert slow.reference.kind == "baseline" and not slow.passed  # now the yardstick
    lines = history.read(host, config.cfg)
    confirmations = {lines[1]["history"]["confirms"]}
    assert [history._row(x, confirmations)[3] for x in lines] == ["P+", "B"]
    assert history._row(lines[1])[2] == f"confirms {line['history']['id'][:8]}"


def test_a_tensor_parallel_pair_slower_than_one_box_fails_unless_the_operator_accepts_it(tmp_path, capsys):
    pair = rec(decode=(7.0, 29.0), prefill=600.0, tp=2)  # a third of one box
    code, v = judge_offline(tmp_path, pair, [], capsys=capsys)
    assert code == 1 and v["reference"]["kind"] == "none"
    assert {f["figure"] for f in v["failures"] if f["against"] == "one box"} == {
        "decode tok/s, 1 stream", "decode tok/s, 4 streams", "prefill tok/s, 12288 tokens"}
    assert v["pair"]["name"] == "one box of this model, the catalog's published figures for qwen3.8-27b"
    # one box measured on this box comes first
    alone = history.make_line(scaled(0.9), baseline=True, source="acceptance")
    code, v = judge_offline(tmp_path, pair, [alone], capsys=capsys)
    assert code == 1 and v["pair"]["id"] == alone["history"]["id"]
    code, v = judge_offline(tmp_path, pair, [], "--data", "ACCEPTANCE_PAIR_MIN_SPEEDUP=0", capsys=capsys)
    assert code == 0 and v["provisional"]  # accepted as it is, printed, and still no yardstick until confirmed
    assert any(c["against"] == "one box" and not c["judged"] for c in v["checks"])
    fast = rec(decode=(30.0, 120.0), prefill=3500.0, tp=2)
    assert judge_offline(tmp_path, fast, [alone], capsys=capsys)[0] == 0


def test_a_draft_that_accepts_nothing_fails_floor_or_no_floor():
    r = rec()
    r["runs"][0]["spec_decode"] = {"acceptance_rate": 0.0, "tokens_per_step": 1.0}
    v = acceptance.judge(r, T, floor=None, speculative=True)
    (c,) = v.failures
    assert (c.against, c.measured, c.threshold) == ("minimum", 1.0, T.spec_min_tokens_per_step)
    assert "slower than no draft" in c.note
    r["runs"][0]["spec_decode"] = {"acceptance_rate": 0.0}  # no tokens per step at all: not measured, failed
    (c,) = acceptance.judge(r, T, floor=None, speculative=True).failures
    assert c.measured is None and c.line().endswith(": not measured")
    del r["runs"][0]["spec_decode"]  # a speculative model whose server reports no drafting
    assert "not speculating" in acceptance.judge(r, T, floor=None, speculative=True).failures[0].note
    assert acceptance.judge(r, T, floor=None, speculative=False).passed  # no draft configured: nothing to judge


# ---------------------------------------------------------------------------------------------------- 3: missing

def test_a_configured_stream_count_or_prefill_the_candidate_lacks_fails_naming_it(tmp_path, capsys):
    base = history.make_line(rec(), baseline=True, source="acceptance")
    r = rec()
    r["runs"] = r["runs"][:1]  # the gate was configured for 1 and 4 streams
    r["prefill"] = []
    code, v = judge_offline(tmp_path, r, [base], capsys=capsys)
    assert code == 1
    assert {(f["figure"], f["note"]) for f in v["failures"]} == {
        ("decode tok/s, 4 streams", "configured, not measured"),
        ("prefill tok/s, 12288 tokens", "configured, not measured")}
    r = rec()
    r["prefill"][0]["tokens_per_s"] = None  # what the probe writes when it saw no first token
    code, v = judge_offline(tmp_path, r, [base], capsys=capsys)
    assert code == 1 and [f["note"] for f in v["failures"]] == ["not measured (no first token, no rate)"]


def test_a_baseline_missing_a_figure_hands_it_to_the_next_reference(tmp_path, capsys):
    blind = rec()
    blind["prefill"][0]["tokens_per_s"] = None
    blind["runs"] = []
    base = history.make_line(blind, baseline=True, source="acceptance")
    later = rec(prefill=2088 * 0.2)  # prefill -80 %: as a rerun of that baseline
    code, v = judge_offline(tmp_path, later, [base], capsys=capsys)
    assert code == 1 and v["reference"]["kind"] == "baseline"
    (f,) = [f for f in v["failures"] if f["against"] == "published"]
    assert f["figure"] == "prefill tok/s, 12288 tokens" and f["expected"] == 2088.0
    assert any("judged against the next reference that has it, the catalog's published figures" in n
               for n in v["notes"])
    upgrade = rec(prefill=2088 * 0.2, vllm="0.33.0", build="0.33.0-c")  # and as an upgrade
    assert judge_offline(tmp_path, upgrade, [base], capsys=capsys)[0] == 1


# ---------------------------------------------------------------------------------------------------- 4: closest

def test_the_previous_configuration_is_the_closest_then_the_newest(tmp_path, capsys):
    a = history.make_line(rec(revision="a" * 40), baseline=True, source="acceptance")
    b = history.make_line(rec(decode=(14.0, 56.0), prefill=1600.0, revision="b" * 40), baseline=True,
                          source="acceptance")
    upgrade_of_a = dict(revision="a" * 40, vllm="0.33.0", build="0.33.0-c")
    code, v = judge_offline(tmp_path, rec(decode=(18.3 * 0.75, 73 * 0.75), **upgrade_of_a), [a, b], capsys=capsys)
    assert code == 1 and v["reference"]["id"] == a["history"]["id"]  # -25 % from its own revision's baseline
    code, v = judge_offline(tmp_path, rec(**upgrade_of_a), [a, b], capsys=capsys)
    assert code == 0 and v["reference"]["id"] == a["history"]["id"]
    # a tie in differences: the newest
    c = history.make_line(rec(revision="a" * 40, vllm="0.32.1", build="0.32.1-e"), baseline=True, source="acceptance")
    assert judge_offline(tmp_path, rec(**upgrade_of_a), [c, a], capsys=capsys)[1]["reference"]["id"] == \
        a["history"]["id"]


# ---------------------------------------------------------------------------------------------------- 5, 6: reading

def _exit2(capsys, argv: list[str], *words: str) -> None:
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err and all(w in err for w in words), err


def test_non_finite_and_negative_figures_are_refused_naming_file_and_field(tmp_path, capsys):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    nan = tmp_path / "nan.json"
    nan.write_text(json.dumps(rec(prefill=float("nan"))))  # json writes a bare NaN: what a broken probe leaves
    _exit2(capsys, ["bench", "judge", str(nan), "--history", str(empty), *GROUPS], str(nan),
           "prefill.0.tokens_per_s", "not a finite number")
    neg = tmp_path / "neg.json"
    neg.write_text(json.dumps(rec(decode=(-18.3, 73.0))))
    _exit2(capsys, ["bench", "judge", str(neg), "--history", str(empty), *GROUPS], "runs.0.counter_tokens_per_s",
           "negative")
    poisoned = tmp_path / "poisoned.jsonl"
    line = history.make_line(rec(), baseline=True, source="acceptance")
    line["prefill"][0]["tokens_per_s"] = float("nan")
    poisoned.write_text(json.dumps(line) + "\n")
    fine = record.write_record(rec(), tmp_path / "fine.json")
    _exit2(capsys, ["bench", "judge", str(fine), "--history", str(poisoned), *GROUPS], f"{poisoned} line 1",
           "prefill.0.tokens_per_s")


def test_the_json_verdict_is_strict_json(tmp_path, capsys):
    code, _ = judge_offline(tmp_path, rec(), [], capsys=capsys)
    record.write_record(rec(), tmp_path / "c.json")
    (tmp_path / "h.jsonl").write_text("")
    assert main(["bench", "judge", str(tmp_path / "c.json"), "--history", str(tmp_path / "h.jsonl"), *GROUPS,
                 "--json"]) == code == 0
    text = capsys.readouterr().out

    def refuse(name):
        raise AssertionError(f"{name} in the JSON verdict")

    json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("cell,value,field", [("niah", {"length": 32768, "depth": "deep", "passed": True},
                                               "gate.niah.depth"),
                                              ("niah", {"length": 32768, "depth": 50.0}, "gate.niah.passed"),
                                              ("kv", {"planned_tokens": "lots", "measured_tokens": 1}, "gate.kv")])
def test_a_malformed_niah_or_kv_cell_exits_2_naming_it(tmp_path, capsys, cell, value, field):
    r = rec()
    r["gate"][cell] = value
    (tmp_path / "bad.json").write_text(json.dumps(r))
    (tmp_path / "h.jsonl").write_text("")
    _exit2(capsys, ["bench", "judge", str(tmp_path / "bad.json"), "--history", str(tmp_path / "h.jsonl"), *GROUPS],
           field)


def test_a_history_with_one_byte_that_is_not_utf8_exits_2_naming_its_line(tmp_path, capsys):
    good = history.serialize(history.make_line(rec(), baseline=True, source="acceptance")).encode()
    hist = tmp_path / "history.jsonl"
    hist.write_bytes(good + good.replace(b"codegen", b"codeg\xffn"))
    fine = record.write_record(rec(decode=(18.0, 72.0)), tmp_path / "fine.json")
    _exit2(capsys, ["bench", "judge", str(fine), "--history", str(hist), *GROUPS], f"{hist} line 2", "not UTF-8",
           "0xff")
    hist.write_text(history.serialize(history.make_line(rec(), baseline=True, source="acceptance")) + "{oops\n")
    _exit2(capsys, ["bench", "judge", str(fine), "--history", str(hist), *GROUPS], f"{hist} line 2", "not JSON")


# ---------------------------------------------------------------------------------------------------- 7: display

def test_a_missing_tokens_per_step_is_not_measured_not_one(tmp_path, capsys):
    r = rec()
    del r["runs"][0]["spec_decode"]["tokens_per_step"]
    code, v = judge_offline(tmp_path, r, [], capsys=capsys)
    assert code == 1
    (f,) = [f for f in v["failures"] if f["figure"].startswith("spec-decode tokens per step")]
    assert f["measured"] is None and f["note"] == "not measured"
    assert "1 vs 2.5" not in v["reason"] and "spec-decode tokens per step, 1 stream(s): not measured" in v["reason"]


def test_the_human_output_keeps_its_reference_tags(tmp_path, capsys):
    base = history.make_line(rec(), baseline=True, source="acceptance")
    hist = tmp_path / "history.jsonl"
    hist.write_text(history.serialize(base))
    slow = record.write_record(rec(decode=(4.0, 16.0)), tmp_path / "slow.json")
    assert main(["bench", "judge", str(slow), "--history", str(hist), *GROUPS]) == 1
    out = " ".join(capsys.readouterr().out.split())  # rich wraps lines
    assert f"[baseline {base['history']['id']}]" in out and "[published anchor]" in out
