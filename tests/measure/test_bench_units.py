"""The probe's maths and mechanics without a server: token timelines, window results, SSE parsing, the whole
probe against an in-process fake vLLM (httpx.MockTransport + counters, busy while it streams, scrapes that take
time), the record's model, reports. No assertions on speed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sparkctl.config import groupdata
from sparkctl.measure import labels, maths, prometheus, record, report
from sparkctl.measure.workloads import haystack, load
from tests.measure.test_acceptance import workload_part

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "bench"


def snap(name: str) -> prometheus.Snapshot:
    return prometheus.parse((FIX / name).read_text())


TOLERANCE = groupdata.load(["all"])["BENCH_AGREEMENT_TOLERANCE"]


def log_with(points, t_sent=0.0, t_done=None) -> maths.RequestLog:
    r = maths.RequestLog(t_sent=t_sent, t_done=t_done, continuous_usage=True)
    for t, cum in points:
        r.record(t, cum)
    return r


# ----------------------------------------------------------------------------------------------- token timelines

def test_tokens_at_and_window_counting():
    # a request that started before the window, multi-token chunks (speculative decoding), finishes inside it
    early = log_with([(0.5, 0), (1.0, 4), (2.0, 8), (3.0, 12)], t_sent=0.4, t_done=3.0)
    # one that starts inside and is still running at the end
    late = log_with([(2.5, 1), (4.0, 5), (6.0, 9)], t_sent=2.4)
    assert early.tokens_at(0.9) == 0 and early.tokens_at(1.0) == 4 and early.tokens_at(99) == 12
    # window [1.5, 4.5]: early contributes 12 - 4, late 5 - 0
    assert maths.tokens_in_window([early, late], 1.5, 4.5) == 8 + 5
    assert maths.tokens_in_window([early, late], 10, 20) == 0


def test_cumulative_count_never_goes_back():
    r = log_with([(1.0, 5), (2.0, 3)])
    assert r.cum_tokens == [5, 5]


def test_relative_gap_and_roofline():
    assert maths.relative_gap(105, 100) == pytest.approx(0.05)
    assert maths.relative_gap(3, 0) is None
    assert maths.aggregate_roofline(20.0, 8) == 160.0
    assert maths.aggregate_roofline(None, 8) is None


def test_window_result_from_recorded_scrapes():
    s0 = maths.Scrape(10.0, 10.2, snap("vllm-0.32-ngram-before.txt"))
    s1 = maths.Scrape(20.0, 20.2, snap("vllm-0.32-ngram-after.txt"))
    # the client saw the same 128 tokens (two requests of 64) inside [10.1, 20.1]
    logs = [log_with([(11.0 + i * 0.1, (i + 1) * 4) for i in range(16)], t_sent=10.5, t_done=12.6),
            log_with([(13.0 + i * 0.1, (i + 1) * 4) for i in range(16)], t_sent=12.7, t_done=14.6)]
    r = maths.window_result(2, s0, s1, logs, tolerance=TOLERANCE, roofline_single=32.0)
    assert r["window_s"] == pytest.approx(10.0)
    assert r["counter_tokens"] == 128 and r["client_tokens"] == 128
    assert r["counter_tokens_per_s"] == pytest.approx(12.8)
    assert r["per_stream_tokens_per_s"] == pytest.approx(6.4)
    assert r["agree"] and r["client_vs_counter"] == 0 and r["counter_outside_bracket"] == 0
    assert r["client_tokens_bracket"] == [128, 128]  # no chunk arrived while a scrape ran
    assert r["client_count_method"] == "usage"
    assert r["roofline_tokens_per_s"] == 64.0 and r["roofline_pct"] == pytest.approx(20.0)
    assert r["spec_decode"]["tokens_per_step"] == pytest.approx(1 + 94 / 34)
    assert r["requests_finished"] == 2 and r["requests_started"] == 2
    # a client that saw 10 % fewer tokens than the counter (another client on the server) disagrees
    short = maths.window_result(2, s0, s1, logs[:1] + [log_with([(13.0, 51)], t_sent=12.7)], tolerance=TOLERANCE)
    assert not short["agree"] and short["client_vs_counter"] == pytest.approx((115 - 128) / 128)
    assert short["counter_outside_bracket"] == pytest.approx((115 - 128) / 128)
    assert short["roofline_pct"] is None


def test_agreement_allows_for_when_the_scrapes_read_the_counters():
    # 100 tokens/s on one request from t=0 to t=20; two slow scrapes (0.6 s each), as on a loaded 2-core host
    logs = [log_with([(i / 100, i) for i in range(1, 2001)], t_sent=0.0, t_done=20.0)]
    slow0, slow1 = (10.0, 10.6), (15.0, 15.6)
    before, after = snap("vllm-0.32-ngram-before.txt"), snap("vllm-0.32-ngram-after.txt")
    r = maths.window_result(1, maths.Scrape(*slow0, before), maths.Scrape(*slow1, after), logs, tolerance=TOLERANCE)
    # the counter moved 128 tokens; the client's bracket over these scrapes is [15.0-10.6, 15.6-10.0] s
    assert r["client_tokens_bracket"] == [440, 560] and r["client_tokens"] == 500
    assert not r["agree"] and r["counter_outside_bracket"] == pytest.approx((440 - 128) / 128)
    # read late in the first scrape and early in the second, a counter of 450 is consistent (midpoint gap +11 %)
    assert maths.gap_outside(440, 560, 450) == 0 and maths.relative_gap(500, 450) > 0.1
    assert maths.gap_outside(440, 560, 600) == pytest.approx((560 - 600) / 600)
    assert maths.gap_outside(440, 560, 0) is None


def test_prefill_result_freshness():
    before, after = snap("vllm-0.32-ngram-before.txt"), snap("vllm-0.32-ngram-after.txt")
    hit = maths.prefill_result(494, 494, 0.1, before, after, "tokenize")
    assert hit["tokens_per_s"] == pytest.approx(4940)
    assert hit["prefix_cache_hits_delta"] == 384 and hit["fresh"] is False
    fresh = maths.prefill_result(494, 494, 0.1, before, before, "tokenize")
    assert fresh["fresh"] is True and fresh["prefix_cache_hits_delta"] == 0


def test_check_record_names_every_problem():
    rec = {"runs": [{"streams": 1, "agree": True, "counter_outside_bracket": 0.0},
                    {"streams": 2, "agree": False, "counter_outside_bracket": -0.2, "counter_tokens": 1000,
                     "client_tokens_bracket": [780, 800]}],
           "prefill": [{"target_tokens": 12288, "error": None, "fresh": False, "prefix_cache_hits_delta": 256},
                       {"target_tokens": 204800, "error": "does not fit max_model_len 4096"}]}
    problems = record.check_record(rec)
    assert len(problems) == 3
    assert "2 streams" in problems[0] and "-20.0 %" in problems[0] and "780-800" in problems[0]
    assert "prefix cache hit 256" in problems[1]
    assert "does not fit" in problems[2]


def test_served_checkpoint_is_checked_against_the_labels():
    sha = "c" * 40
    root = f"/srv/models/hub/models--sim--tiny-qwen/snapshots/{sha}"
    assert record.served_sha(root) == sha and record.served_sha("/models/tiny") is None
    rec = {"model": {"repo": "sim/tiny-qwen"}, "revision": sha, "served_model_root": root, "served_sha": sha}
    assert record.check_record(rec) == []
    flipped = dict(rec, served_model_root=root.replace("tiny-qwen", "tiny-laguna"))
    assert "not the configured checkpoint sim/tiny-qwen" in record.check_record(flipped)[0]
    stale = dict(rec, revision="d" * 40)
    assert "the lock file says" in record.check_record(stale)[0]


# ------------------------------------------------------------------------------------------------------ reports


def _record(key="qwen3.8-27b", window=40, workload=("codegen", 1, "abc"), rates=(18.3, 40, 73, 122)):
    return {"schema": record.SCHEMA, "date": "2026-11-20T10:00:00Z", "model": {"key": key}, "revision": "f" * 40,
            "vllm_version": "0.32.0", "box": {"name": "spark-1", "simulated": False}, "window_s": window,
            "max_tokens": 1024,
            "ignore_eos": False, "temperature": 0.0,
            "workload": workload_part(*workload),
            "runs": [{"streams": n, "counter_tokens_per_s": r, "roofline_pct": 50.0,
                      "spec_decode": {"acceptance_rate": 0.5, "tokens_per_step": 2.5}}
                     for n, r in zip((1, 2, 4, 8), rates)],
            "prefill": [{"target_tokens": 12288, "tokens_per_s": 2088.0, "error": None}]}


def _render(table) -> str:
    from rich.console import Console
    console = Console(width=200, record=True)
    console.print(table)
    return console.export_text()


def test_compare_same_workload():
    a, b = _record(), _record("laguna-s-2.1", rates=(46.5, 52, 96, 176))
    assert report.differences(a, b) == []
    rows = {r[0]: r for r in report.compare_rows(a, b)}
    assert rows["decode tok/s, 8 streams"][1:] == ("122.0 (50%)", "176.0 (50%)", "1.44x")
    assert rows["prefill tok/s, 12K prompt"][1] == "2088"
    text = _render(report.compare_table(a, b, "qwen", "laguna"))
    assert "same workload codegen-v1, same 40 s window" in text


def test_compare_says_when_workloads_or_windows_differ():
    a, b = _record(), _record(window=10, workload=("codegen", 2, "def"))
    diffs = report.differences(a, b)
    assert "WORKLOADS DIFFER: codegen-v1 vs codegen-v2" in diffs
    assert "WINDOWS DIFFER: 40 s vs 10 s" in diffs
    text = _render(report.compare_table(a, b))
    assert "WORKLOADS DIFFER" in text and "WINDOWS DIFFER" in text
    # same name and version but edited prompts is still a different workload
    assert report.differences(a, _record(workload=("codegen", 1, "edited")))[0].startswith("WORKLOADS DIFFER")


def test_record_tables_and_plot(tmp_path):
    rec = _record()
    for run in rec["runs"]:
        run.update(per_stream_tokens_per_s=1.0, client_tokens_per_s=1.0, client_vs_counter=0.01, agree=True,
                   requests_finished=3)
    decode, prefill = report.record_tables(rec)
    assert "122.0 (50%)" in _render(decode) and "12288" in _render(prefill)
    # --no-prefill: no prefill table at all, not an empty one
    assert [t.title for t in report.record_tables({**rec, "prefill": []})] == [decode.title]
    png = report.plot_records([rec, _record("laguna-s-2.1")], tmp_path / "p.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_write_and_load_record(tmp_path):
    path = record.write_record(_record(), tmp_path / "r" / "x.json")
    assert record.load_record(path) == json.loads(path.read_text())  # nothing added, nothing coerced
    for bad, why in (('{"runs": []}', "schema"), ("[1, 2]", "not an object"), ("{", "not a readable"),
                     (json.dumps({**_record(), "schema": "sparkctl.niah/1"}), "schema"),
                     (json.dumps({**_record(), "runs": [{"streams": "four", "counter_tokens_per_s": 1}]}),
                      "runs.0.streams")):
        (tmp_path / "bad.json").write_text(bad)
        with pytest.raises(record.BenchError, match=why):
            record.load_record(tmp_path / "bad.json")


def test_records_written_before_the_agreement_bracket_still_load(tmp_path):
    """A record of the first probe (no client_tokens_bracket / counter_outside_bracket, no served_* labels)."""
    old = _record()
    for run in old["runs"]:
        run.update(counter_tokens=1000.0, client_tokens=990, client_vs_counter=-0.01, agree=True)
    old["prefill"][0].update(fresh=True, prefix_cache_hits_delta=0.0)
    path = record.write_record(old, tmp_path / "old.json")
    loaded = record.load_record(path)
    assert loaded == old and "client_tokens_bracket" not in loaded["runs"][0]
    assert record.check_record(loaded) == []
    assert "decode tok/s, 8 streams" in _render(report.compare_table(loaded, _record("laguna-s-2.1")))


def test_utc_timestamp_is_iso_to_the_second_with_a_z():
    import re
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", record.utc_timestamp())


# ------------------------------------------------------------------------------------------------------ workloads

def test_workload_is_versioned_data():
    w = load("codegen-v1")
    assert (w.name, w.version, w.label) == ("codegen", 1, "codegen-v1")
    assert len(w.prompts) >= 16 and len(set(w.prompts)) == len(w.prompts)
    assert w.prompt(0) == w.prompt(len(w.prompts))
    assert len(w.sha256) == 64


def test_haystack_is_deterministic_and_digit_free():
    t = haystack.text(20000, seed=3)
    assert t == haystack.text(20000, seed=3) and t != haystack.text(20000, seed=4)
    assert haystack.text(40000, seed=3).startswith(t)
    assert not any(ch.isdigit() for ch in t)
    assert 19000 < len(t) <= 20000


def test_model_labels_read_the_lock(tmp_path):
    from sparkctl.check.load import host_config

    def labels_with(lock_file) -> dict:
        return labels.model_labels(host_config({**groupdata.load(["all", "gx10"]), "MODEL_LOCK_FILE": str(lock_file)}))

    lock = tmp_path / "lock.json"
    lock.write_text(json.dumps({"checkpoints": {"unsloth/Qwen3.8-27B-NVFP4": {"revision": "main", "sha": "1" * 40}}}))
    tags = labels_with(lock)
    assert tags["revision"] == "1" * 40
    assert tags["model"]["key"] == "qwen3.8-27b" and tags["model"]["served_name"] == "coder"
    assert labels_with(tmp_path / "missing.json")["revision"] is None
    lock.write_text("not json")
    assert labels_with(lock)["revision"] is None


def test_roofline_is_the_planners():
    from sparkctl.capacity import planner
    from sparkctl.check.load import host_config

    config = host_config(groupdata.load(["all", "gx10"]))
    value, source = labels.roofline_single_stream(config)
    key = config.cfg.CODING_MODEL
    plan = planner.plan_box(config.cfg, config.catalog, coding_model=key).model(key)
    assert source == "sparkctl.capacity.planner" and value == plan.roofline_tokens_per_s > 0
    # worked out by hand for the configured coder (Qwen): 273 GB/s over 16 GB of weights a step, 2.5 tokens a step
    assert value == pytest.approx(273 / 16.0 * 2.5)
    # the roofline scales with the box's bandwidth setting: it is read, not a fallback
    faster = {**groupdata.load(["all", "gx10"]), "BOX_MEMORY_BANDWIDTH_GBPS": 2 * config.cfg.BOX_MEMORY_BANDWIDTH_GBPS}
    doubled, _ = labels.roofline_single_stream(host_config(faster))
    assert doubled == pytest.approx(2 * value)


def test_roofline_omitted_with_the_reason_when_the_model_has_none():
    from sparkctl.check.load import host_config

    no_weights = {"qwen3.8-27b": {"memory": {"bytes_read_per_step_gb": 0.0}}}
    config = host_config({**groupdata.load(["all", "gx10"]), "CATALOG_OVERRIDES": no_weights})
    value, why = labels.roofline_single_stream(config)
    assert value is None and why == "the planner has no roofline for 'qwen3.8-27b'"