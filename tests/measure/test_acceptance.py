"""The acceptance verdict: every failing figure named with measured, reference, limit, delta and baseline id; warn
mode; a baseline of another workload refused; with no reference the verdict says it judged the roofline and the KV
plan only; the catalog's floors (measured figures judged, derived ones printed); and the quick run itself (the
bench probe's own code, with its gate part) against the in-process fake vLLM. The reference order itself:
tests/measure/test_reference.py."""

from __future__ import annotations

import asyncio
import copy
import dataclasses

import pytest

from sparkctl.check.load import host_config
from sparkctl.config import catalog, groupdata
from sparkctl.errors import SettingError
from sparkctl.measure import acceptance, history, quick, record
from tests.conftest import typed
from tests.measure import test_bench_probe as bp
from tests.measure.test_bench_probe import EP, LABELS, FakeMetrics, FakeVLLM

ALL = groupdata.load(["all", "gx10"])
T = acceptance.Thresholds.from_settings(typed(ALL))
QWEN_FLOOR = acceptance.floor_of(catalog.resolve()["qwen3.8-27b"])


ROOFLINE = 42.65625  # the planner's single-stream roofline of qwen3.8-27b on a GX10, tok/s


def workload_part(name: str, version: int, tag: str) -> dict:
    """A record's workload part. tag "abc": the registry's own prompts when it has name-v<version> (codegen-v1), else
    a workload the registry does not know (a `--workload FILE`); any other tag: other prompts (a sha of the tag)."""
    import hashlib

    from sparkctl.measure import workloads

    label = f"{name}-v{version}"
    sha = workloads.load(label).sha256 if tag == "abc" and label in workloads.available() else \
        hashlib.sha256(f"{label}:{tag}".encode()).hexdigest()
    return {"name": name, "version": version, "sha256": sha}


def quick_record(decode=(18.3, 60.0), prefill=2000.0, per_pos=(0.55, 0.5, 0.45), rate=0.5, kv=(1_000_000, 990_000),
                 niah_passed=True, problems=(), fresh=True, workload=("codegen", 1, "abc"),
                 tokens_per_step=None) -> dict:
    runs = []
    for i, (n, r) in enumerate(zip((1, 4), decode)):
        run = {"streams": n, "counter_tokens_per_s": r, "agree": True, "roofline_tokens_per_s": ROOFLINE * n}
        if i == 0:  # tokens per step = 1 + accepted / drafts = 1 + the sum of the per-position rates
            run["spec_decode"] = {"acceptance_rate": rate, "tokens_per_step": tokens_per_step or 1 + sum(per_pos),
                                  "per_position_acceptance": {str(k): v for k, v in enumerate(per_pos)}}
        runs.append(run)
    return {"schema": record.SCHEMA, "date": "2026-12-01T10:00:00Z", "model": {"key": "qwen3.8-27b"},
            "revision": "f" * 40, "vllm_version": "0.32.0", "box": {"name": "spark-1", "simulated": False},
            "window_s": 10,
            "max_tokens": 1024, "ignore_eos": False, "temperature": 0.0,
            "workload": workload_part(*workload), "runs": runs,
            "prefill": [{"target_tokens": 12288, "tokens_per_s": prefill, "fresh": fresh,
                         "prefix_cache_hits_delta": 0 if fresh else 256}],
            "problems": list(problems),
            "gate": {"kind": "acceptance", "window_s": 10, "streams": [1, 4], "prefill_tokens": [12288],
                     "kv": {"planned_tokens": kv[0], "measured_tokens": kv[1]},
                     "niah": {"length": 32768, "depth": 50.0, "passed": niah_passed, "skipped": False, "error": None,
                              "answer": "4829173" if niah_passed else "I do not know", "needle_value": "4829173"}}}


def as_baseline(rec: dict) -> dict:
    return history.make_line(rec, baseline=True, source="acceptance")


BASE = as_baseline(quick_record())


def test_a_configuration_as_good_as_its_baseline_and_floor_passes():
    v = acceptance.judge(quick_record(decode=(17.9, 58.0), prefill=1900.0), T, floor=QWEN_FLOOR, baseline=BASE)
    assert v.passed and v.failures == [] and v.decision == "commit"
    assert v.baseline_id == BASE["history"]["id"]
    figures = {c.figure for c in v.checks}
    assert {"decode tok/s, 1 stream", "decode tok/s, 4 streams", "prefill tok/s, 12288 tokens", "KV cache tokens",
            "spec-decode acceptance, 1 stream(s)", "spec-decode acceptance at draft position 2, 1 stream(s)",
            "NIAH 32768 tokens at depth 50 %"} <= figures


def test_every_failing_figure_is_reported_with_measured_baseline_limit_and_delta():
    slow = quick_record(decode=(12.0, 30.0), prefill=1200.0)
    v = acceptance.judge(slow, T, floor=QWEN_FLOOR, baseline=BASE)
    assert not v.passed and v.decision == "rollback"
    by = {c.figure: c for c in v.failures}
    assert set(by) == {"decode tok/s, 1 stream", "decode tok/s, 4 streams", "prefill tok/s, 12288 tokens"}
    d1 = by["decode tok/s, 1 stream"]
    assert (d1.measured, d1.expected, d1.against) == (12.0, 18.3, "baseline")
    assert d1.threshold == pytest.approx(18.3 * (1 - T.decode_max_regression))
    assert d1.delta_pct == pytest.approx(100 * (12.0 - 18.3) / 18.3)
    assert all(c.baseline_id == BASE["history"]["id"] for c in v.failures)
    reason = v.reason()
    assert reason.startswith(f"acceptance failed (against baseline {BASE['history']['id']}): ")
    assert "decode tok/s, 4 streams: 30 vs 60 (-50.0 %, limit 51)" in reason and BASE["history"]["id"] in reason
    assert v.to_dict()["failures"][0]["baseline_id"] == BASE["history"]["id"]


def test_a_regression_just_inside_the_threshold_passes_and_just_beyond_fails():
    edge = 18.3 * (1 - T.decode_max_regression)
    assert acceptance.judge(quick_record(decode=(edge + 0.01, 60.0)), T, baseline=BASE).passed
    assert not acceptance.judge(quick_record(decode=(edge - 0.01, 60.0)), T, baseline=BASE).passed


def test_a_draft_that_cannot_match_fails_on_the_measured_tokens_per_step_derived_figures_are_only_printed():
    v = acceptance.judge(quick_record(per_pos=(0.01, 0.0, 0.0), rate=0.003), T, floor=QWEN_FLOOR, baseline=None)
    assert not v.passed
    (c,) = v.failures  # Qwen's rate and per-position figures are derived from the write-up's words: never judged
    assert (c.figure, c.measured, c.expected, c.against) == ("spec-decode tokens per step, 1 stream(s)", 1.01, 2.5,
                                                             "catalog floor")
    assert c.threshold == pytest.approx(2.5 * T.spec_floor_fraction) and c.baseline_id is None
    printed = [x for x in v.checks if x.against == "catalog (derived)"]
    assert [x.figure for x in printed] == ["spec-decode acceptance, 1 stream(s)"] + \
        [f"spec-decode acceptance at draft position {i}, 1 stream(s)" for i in range(3)]
    assert all(x.passed and not x.judged and "not judged" in x.note for x in printed)
    assert any("judged tokens_per_step (measured); printed, not judged (derived): acceptance_rate, per_position" in n
               for n in v.notes)


def test_an_mtp_head_whose_rates_fall_with_depth_passes_on_its_tokens_per_step():
    # chained acceptance falls with depth: 0.8, 0.45, 0.25 (position 3 below 0.6 x "about half"), 2.5 tokens per step
    v = acceptance.judge(quick_record(per_pos=(0.8, 0.45, 0.25)), T, floor=QWEN_FLOOR, baseline=BASE)
    assert v.passed, v.reason()
    (tps,) = [c for c in v.checks if c.figure == "spec-decode tokens per step, 1 stream(s)"]
    assert tps.judged and tps.measured == pytest.approx(2.5)


def test_measured_per_position_figures_are_judged_and_a_provisional_floor_says_so():
    floor = acceptance.Floor(0.5, (0.6, 0.4), "a measurement", 0.0, {"acceptance_rate": "provisional"})
    v = acceptance.judge(quick_record(per_pos=(0.7, 0.1), rate=0.1), T, floor=floor, baseline=BASE)
    by = {c.figure: c for c in v.failures}
    assert set(by) == {"spec-decode acceptance, 1 stream(s)", "spec-decode acceptance at draft position 1, 1 stream(s)"}
    assert by["spec-decode acceptance, 1 stream(s)"].note == "provisional floor"
    assert "provisional floor" in v.reason()


def test_a_server_that_does_not_speculate_fails_when_the_catalog_has_a_floor():
    rec = quick_record()
    del rec["runs"][0]["spec_decode"]
    (f,) = acceptance.judge(rec, T, floor=QWEN_FLOOR, baseline=BASE).failures
    assert "not speculating" in f.note


def test_floors_belong_to_the_checkpoint_they_were_measured_on_and_say_what_was_measured():
    cat = catalog.resolve()
    qwen = cat["qwen3.8-27b"]
    assert acceptance.floor_of(qwen) == acceptance.Floor(
        0.5, (0.5, 0.5, 0.5), qwen.memory.measured_acceptance_source, 2.5,
        {"tokens_per_step": "measured", "acceptance_rate": "derived", "per_position": "derived"})
    laguna = acceptance.floor_of(cat["laguna-s-2.1"])
    assert (laguna.rate, laguna.per_position, laguna.tokens_per_step) == (0.58, (), 5.1)
    assert laguna.kind("acceptance_rate") == laguna.kind("tokens_per_step") == "measured"
    assert acceptance.floor_of(cat["bge-m3"]) is None  # no speculative decoding
    sim = catalog.resolve(groupdata.load(["all", "gx10", "sim"])["CATALOG_OVERRIDES"])
    assert acceptance.floor_of(sim["qwen3.8-27b"]) is None  # the tiny stand-in does not inherit production's
    tiny = acceptance.floor_of(sim["laguna-s-2.1"])  # the stand-in draft's own floor, measured on the sim
    assert (tiny.rate, tiny.tokens_per_step, tiny.kind("acceptance_rate")) == (1.0, 3.0, "measured")
    assert tiny.kind("tokens_per_step") == "derived"  # 1 + the per-position rates: printed, not judged


def test_a_provenance_the_judge_does_not_know_is_a_setting_error():
    bad = catalog.resolve({"qwen3.8-27b": {"memory": {"acceptance_provenance": {"per_position": "guessed"}}}})
    with pytest.raises(SettingError, match="acceptance_provenance.*guessed"):
        acceptance.floor_of(bad["qwen3.8-27b"])


def test_no_floor_in_the_catalog_skips_the_spec_check_and_says_so():
    v = acceptance.judge(quick_record(per_pos=(0.0,), rate=0.0), T, floor=None, baseline=BASE)
    assert v.passed
    assert any("no acceptance floor" in n for n in v.notes)


def test_with_no_reference_the_verdict_says_roofline_and_kv_plan_only_and_judges_the_roofline():
    v = acceptance.judge(quick_record(decode=(3.0, 12.0), prefill=10.0), T, floor=QWEN_FLOOR)
    assert v.passed and v.baseline_id is None and v.reference.kind == "none"
    assert v.reason() == ("acceptance passed against the roofline and the KV plan only (decode at 1 stream 7.0 %, "
                          "4 streams 7.0 % of roofline; provisional: decode tok/s, 1 stream, decode tok/s, 4 streams, "
                          "prefill tok/s, 12288 tokens judged on the roofline alone, no yardstick until an operator "
                          "confirms it (bench confirm @ID))")
    assert v.provisional
    assert any("judged against the roofline and the KV plan only" in n for n in v.notes)
    assert not any(c.against in ("baseline", "published") for c in v.checks)
    roof = [c for c in v.checks if c.against == "roofline"]
    assert [c.threshold for c in roof] == pytest.approx([ROOFLINE * T.roofline_floor_fraction,
                                                         4 * ROOFLINE * T.roofline_floor_fraction])
    crawl = acceptance.judge(quick_record(decode=(1.0, 2.0)), T, floor=QWEN_FLOOR)  # 2.3 % of roofline
    assert [c.figure for c in crawl.failures] == ["decode vs roofline, 1 stream", "decode vs roofline, 4 streams"]
    off = dataclasses.replace(T, roofline_floor_fraction=0.0)
    v = acceptance.judge(quick_record(decode=(1.0, 2.0)), off, floor=QWEN_FLOOR)
    assert v.passed and any("roofline floor is off" in n and "printed, not judged" in n for n in v.notes)


def test_decode_as_percent_of_roofline_is_in_every_verdict_judged_only_without_a_reference():
    v = acceptance.judge(quick_record(decode=(1.0, 2.0)), T, floor=QWEN_FLOOR, baseline=BASE)
    roof = [c for c in v.checks if c.against == "roofline"]
    assert [c.note for c in roof] == ["2.3 % of roofline", "1.2 % of roofline"]
    assert not any(c.judged for c in roof)  # the baseline judges decode here; the roofline is printed beside it
    assert {c.figure for c in v.failures} == {"decode tok/s, 1 stream", "decode tok/s, 4 streams"}
    rec = quick_record()
    for r in rec["runs"]:
        del r["roofline_tokens_per_s"]
    assert any("the record has none" in n for n in acceptance.judge(rec, T, baseline=BASE).notes)


def test_warn_mode_keeps_the_failures_but_commits():
    warn = dataclasses.replace(T, mode="warn")
    v = acceptance.judge(quick_record(decode=(5.0, 10.0)), warn, floor=QWEN_FLOOR, baseline=BASE)
    assert not v.passed and len(v.failures) == 2 and v.decision == "commit"
    assert v.reason().startswith("acceptance failed")
    assert v.to_dict()["decision"] == "commit" and v.to_dict()["passed"] is False


@pytest.mark.parametrize("change", [dict(workload=("codegen", 2, "abc")), dict(workload=("codegen", 1, "edited"))])
def test_a_baseline_of_another_workload_is_refused_not_lined_up(change):
    with pytest.raises(record.BenchError, match="refusing to judge.*workload differs"):
        acceptance.judge(quick_record(**change), T, baseline=BASE)


def test_a_baseline_of_another_configuration_is_refused():
    other = copy.deepcopy(BASE)
    other["vllm_version"] = "0.31.0"
    with pytest.raises(record.BenchError, match="configuration differs in vllm_version"):
        acceptance.judge(quick_record(), T, baseline=other)


def test_a_full_bench_record_is_not_judged():
    rec = quick_record()
    del rec["gate"]
    with pytest.raises(record.BenchError, match="not an acceptance run"):
        acceptance.judge(rec, T)


def test_kv_capacity_below_the_plan_fails_more_never_does_and_an_unlogged_one_fails():
    short = acceptance.judge(quick_record(kv=(1_000_000, 700_000)), T, baseline=BASE)
    (f,) = short.failures
    assert (f.figure, f.against, f.measured, f.expected) == ("KV cache tokens", "plan", 700_000, 1_000_000)
    assert f.delta_pct == pytest.approx(-30.0)
    assert acceptance.judge(quick_record(kv=(1_000_000, 2_000_000)), T, baseline=BASE).passed
    (g,) = acceptance.judge(quick_record(kv=(1_000_000, None)), T, baseline=BASE).failures
    assert "logged no KV cache size" in g.note


def test_a_missed_needle_a_stale_prefill_and_untrusted_figures_fail():
    problems = ["1 streams: client and counter tokens disagree (x)",
                "prefill 12288: prefix cache hit 256 tokens, the prompt was not fresh"]
    v = acceptance.judge(quick_record(niah_passed=False, fresh=False, problems=problems), T, baseline=BASE)
    figures = [c.figure for c in v.failures]
    assert figures == ["prefill tok/s, 12288 tokens", "NIAH 32768 tokens at depth 50 %", "record"]
    assert "not fresh" in v.failures[0].note and "I do not know" in v.failures[1].note
    assert "disagree" in v.failures[2].note


def test_each_part_can_be_switched_off():
    off = dataclasses.replace(T, spec=False, decode=False, prefill=False, kv=False, niah=False, fail_on_problems=False)
    bad = quick_record(decode=(1.0, 1.0), prefill=1.0, per_pos=(0.0,), rate=0.0, kv=(10, 1), niah_passed=False,
                       problems=["1 streams: client and counter tokens disagree (x)"])
    v = acceptance.judge(bad, off, floor=QWEN_FLOOR, baseline=BASE)
    assert v.passed and [c.against for c in v.checks] == ["roofline", "roofline"]  # printed, never judged
    assert not any(c.judged for c in v.checks)


@pytest.mark.parametrize("name,value", [("ACCEPTANCE_MODE", "maybe"), ("ACCEPTANCE_DECODE_MAX_REGRESSION", 1.5),
                                        ("ACCEPTANCE_SPEC_FLOOR_FRACTION", -0.1), ("ACCEPTANCE_KV_ENABLED", "yes"),
                                        ("ACCEPTANCE_STREAMS", []), ("ACCEPTANCE_WINDOW_S", 0),
                                        ("ACCEPTANCE_NIAH_DEPTH", 150)])
def test_bad_settings_are_named_before_anything_is_measured(name, value):
    """The schema refuses them (every entry point reads settings through it): nothing reaches the probe."""
    with pytest.raises(SettingError, match=name):
        quick.QuickSettings.from_settings(typed({**ALL, name: value}))


# ---------------------------------------------------------------------------------------------------- the quick run

@pytest.fixture
def fake(monkeypatch):
    return bp.fake.__wrapped__(monkeypatch)  # the bench probe tests' fake vLLM, patched in the same way


def quick_settings(**data) -> quick.QuickSettings:
    d = {**ALL, "ACCEPTANCE_WINDOW_S": 0.4, "ACCEPTANCE_STREAMS": [1, 2], "ACCEPTANCE_PREFILL_TOKENS": 2000,
         "ACCEPTANCE_NIAH_ENABLED": False, "BENCH_MAX_TOKENS": 40, "BENCH_IGNORE_EOS": True, "BENCH_SETTLE_S": 0.05,
         **data}
    return quick.QuickSettings.from_settings(typed(d))


def run(qs, server, kv=None) -> dict:
    return asyncio.run(quick.run_quick(EP, FakeMetrics(server), qs, LABELS, kv))


def test_the_quick_run_is_the_bench_probe_with_its_gate_part(fake):
    qs = quick_settings()
    rec = run(qs, fake, kv={"planned_tokens": 1000, "measured_tokens": 1000})
    assert rec["gate"] == {"kind": "acceptance", "window_s": 0.4, "streams": [1, 2], "prefill_tokens": [2000],
                           "prefill_repeats": ALL["ACCEPTANCE_PREFILL_REPEATS"],
                           "kv": {"planned_tokens": 1000, "measured_tokens": 1000}, "niah": None}
    assert rec["window_s"] == 0.4 and rec["streams"] == [1, 2] and [r["streams"] for r in rec["runs"]] == [1, 2]
    assert rec["prefill"][0]["fresh"] and rec["problems"] == []
    assert len(rec["prefill"][0]["samples_tokens_per_s"]) == ALL["ACCEPTANCE_PREFILL_REPEATS"]
    per_pos = rec["runs"][0]["spec_decode"]["per_position_acceptance"]  # the fake accepts all but a request's last
    assert set(per_pos) == {"0", "1"} and all(0.8 < v <= 1.0 for v in per_pos.values())
    record.validate_record(rec)


def test_against_the_fake_a_rerun_passes_a_slowdown_and_a_draft_that_never_matches_fail(fake):
    qs = quick_settings()
    t = dataclasses.replace(T, kv=False, niah=False, decode_max_regression=0.5, prefill_max_regression=0.9)
    floor = acceptance.Floor(0.9, (0.9, 0.9), "test")
    first = run(qs, fake)
    assert acceptance.judge(first, t, floor=floor).passed  # nothing to compare with: becomes the baseline
    base = as_baseline(first)
    assert acceptance.judge(run(qs, fake), t, floor=floor, baseline=base).passed
    fake.interval = 0.02  # ten times slower per step: the CPU-quota drop-in of the e2e test, in miniature
    slow = acceptance.judge(run(qs, fake), t, floor=floor, baseline=base)
    assert {c.figure for c in slow.failures} >= {"decode tok/s, 1 stream", "decode tok/s, 2 streams"}
    wrong = FakeVLLM(step=1)  # every draft rejected: one token per step
    fake.__dict__.update(wrong.__dict__)
    v = acceptance.judge(run(qs, fake), t, floor=floor, baseline=None)
    assert {c.figure for c in v.failures} == {"spec-decode acceptance, 1 stream(s)",
                                              "spec-decode acceptance at draft position 0, 1 stream(s)",
                                              "spec-decode acceptance at draft position 1, 1 stream(s)"}
    assert all(c.measured == 0.0 for c in v.failures)


# ---------------------------------------------------------------------------------------------------- the deploy side

def test_only_a_rollout_waiting_for_its_verdict_is_judged():
    from tasks.acceptance import awaiting_verdict

    assert awaiting_verdict({"phase": "awaiting-verdict", "tx": "tx-42"}) == "tx-42"
    assert awaiting_verdict({"active": True, "applied": "a", "wanted": "a"}) is None  # today's rollout.py: nothing
    assert awaiting_verdict({"phase": "committed", "tx": "tx-42"}) is None
    assert awaiting_verdict({}) is None


def test_the_verdict_command_names_the_transaction_and_quotes_the_reason():
    import shlex

    from tasks.acceptance import REASON_CHARS, verdict_command

    commit = verdict_command(typed(ALL), "coder", "tx-42", "commit").get_raw_value()
    assert commit.endswith("/opt/sparkctl/bin/rollout.py verdict coder --tx tx-42 commit")
    assert commit.startswith("SPARKCTL_ENV_DIR=/etc/sparkctl ")
    reason = "decode tok/s, 1 stream: 9 vs 18.3 (-50.8 %) [baseline abc]; it's \"slow\" $(rm -rf /)\n" * 40
    raw = verdict_command(typed(ALL), "coder", "tx-42", "rollback", reason).get_raw_value()
    argv = shlex.split(raw)
    assert argv[-3:-1] == ["rollback", "--reason"] and len(argv[-1]) == REASON_CHARS
    assert argv[-1].startswith("decode tok/s, 1 stream: 9 vs 18.3") and "\n" not in argv[-1]


def test_the_box_is_told_how_long_to_wait_and_what_to_do_alone():
    from sparkctl.render.units import apply_verdict_args

    coder = type("Svc", (), {"role": "coder", "headless": False})()
    worker = type("Svc", (), {"role": "coder", "headless": True})()
    embedder = type("Svc", (), {"role": "embedder", "headless": False})()
    cfg = typed(ALL)
    assert apply_verdict_args(cfg, coder) == {"verdict_timeout": 1800, "verdict_default": "rollback"}
    assert apply_verdict_args(typed({**ALL, "ACCEPTANCE_MODE": "warn"}), coder)["verdict_default"] == "commit"
    assert apply_verdict_args(cfg, worker) == apply_verdict_args(cfg, embedder) == {}
    assert apply_verdict_args(typed({**ALL, "ACCEPTANCE_ENABLED": False}), coder) == {}
    with pytest.raises(SettingError, match="ACCEPTANCE_VERDICT_TIMEOUT_S = '30m' is not valid"):  # the schema's
        typed({**ALL, "ACCEPTANCE_VERDICT_TIMEOUT_S": "30m"})


def test_the_deploy_interface_measures_reads_the_baseline_and_judges(fake, tmp_path):
    from tests.measure.test_history import LocalHost

    host = LocalHost(name="spark-1", address="127.0.0.1")
    data = {**ALL, "STATE_DIR": str(tmp_path), "ACCEPTANCE_WINDOW_S": 0.4, "ACCEPTANCE_STREAMS": [1],
            "ACCEPTANCE_PREFILL_TOKENS": 2000, "ACCEPTANCE_NIAH_ENABLED": False, "ACCEPTANCE_KV_ENABLED": False,
            "BENCH_MAX_TOKENS": 40, "BENCH_IGNORE_EOS": True, "BENCH_SETTLE_S": 0.05,
            # the fake decodes ~700 tok/s, beyond a GX10's bandwidth bound for a 27B model (evidence.py refuses
            # such a record): a box fast enough for it
            "BOX_MEMORY_BANDWIDTH_GBPS": 8000,
            # the fake drafts 2 tokens per step: a floor for 2 positions (the catalog's Qwen has 3)
            "CATALOG_OVERRIDES": {"qwen3.8-27b": {"memory": {"measured_acceptance_per_position": [0.9, 0.9]}}}}
    config = host_config(data)
    first = quick.acceptance_of(host, config, endpoint=EP, metrics=FakeMetrics(fake))
    assert first.passed and first.baseline_id is None  # the box's (empty) history was read: no baseline yet
    assert first.record["gate"]["kind"] == "acceptance" and first.record["box"]["name"] == "spark-1"
    line = quick.record_accepted(host, config.cfg, first)
    # nothing measured judged it (the fake's ignore_eos run is not the published workload): provisional, no yardstick
    assert first.provisional and line["history"]["provisional"] is True and line["history"]["baseline"] is False
    line = history.confirm(host, config.cfg, line["history"]["id"][:8])  # the operator's word makes it one
    assert line["history"]["baseline"] is True and line["history"]["source"] == "confirm"
    fake.interval = 0.02
    slow = quick.acceptance_of(host, config, endpoint=EP, metrics=FakeMetrics(fake))
    assert slow.baseline_id == line["history"]["id"] and slow.decision == "rollback"
    assert "decode tok/s, 1 stream" in slow.reason()
    assert quick.record_accepted(host, config.cfg, slow) is None  # a failed run never joins the history
    assert len(history.read(host, config.cfg)) == 2  # the provisional run and its confirmation
