"""The probe and acceptance checks against the converged simulated Spark: real vLLM (CPU build, tiny models),
through nginx (TLS + bearer token), /metrics over ssh. The sim coder runs ngram speculative decoding. The probe runs
once for the module, on the pair as the group data says (as `converged_spark` gives it to each test).

Asserts what the probe claims about itself (counter and client tokens agree, the prefill was fresh, every label
is in the JSON); speed figures go to the JSON, never into assertions.
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import pytest

from sparkctl.__main__ import main
from sparkctl.check.load import host_config
from sparkctl.measure import client, labels, niah, probe, record, report, workloads
from tests.e2e.conftest import PAIR

pytestmark = pytest.mark.scenario("bench")

FIX = Path(__file__).resolve().parent.parent / "fixtures" / "bench"
SIM_MAX_CONTEXT = 4096


@pytest.fixture(scope="module")
def probe_record(spark_1, tmp_path_factory):
    PAIR.as_in_the_files()  # what `converged_spark` does for one test, for the module's one probe
    sp = spark_1
    data = sp.data
    served = data["CODER_SERVED_NAME"]
    ep = client.Endpoint(sp.base_url(served), served, token=sp.token, ca=sp.ca)
    source = probe.MetricsSource.ssh(sp.host, data["CODER_PORT"])
    tags = {**labels.model_labels(host_config(data)), **labels.box_labels(sp.host, host_config(data))}
    settings = probe.ProbeSettings(
        workload=workloads.load(), streams=[1, 2], window_s=4.0, max_tokens=int(data["BENCH_MAX_TOKENS"]),
        prefill_tokens=[int(data["BENCH_PREFILL_TOKENS"])], ignore_eos=True,  # tiny random weights: run to max
        timeout_s=float(data["BENCH_CLIENT_TIMEOUT_S"]), settle_s=float(data["BENCH_SETTLE_S"]),
        idle_timeout_s=float(data["BENCH_IDLE_TIMEOUT_S"]),
        agreement_tolerance=float(data["BENCH_AGREEMENT_TOLERANCE"]))
    roofline, _why = labels.roofline_single_stream(host_config(data))
    rec = asyncio.run(probe.run_probe(ep, source, settings, tags, roofline_single=roofline))
    out = tmp_path_factory.mktemp("bench")
    path = record.write_record(rec, out / "bench.json")
    png = report.plot_records([rec], out / "bench.png")
    return rec, path, png


def test_counter_and_client_tokens_agree(probe_record):
    rec, _, _ = probe_record
    assert [r["streams"] for r in rec["runs"]] == [1, 2]
    for run in rec["runs"]:
        assert run["counter_tokens"] > 0, run
        assert run["client_count_method"] == "usage", run
        lo, hi = run["client_tokens_bracket"]  # the client count over the scrapes' earliest/latest instants
        assert lo <= run["client_tokens"] <= hi, run
        assert 0.95 * lo <= run["counter_tokens"] <= 1.05 * hi, run
        assert run["agree"] is True
        assert run["requests_errored"] == 0


def test_record_carries_every_label(probe_record, converged_spark):
    rec, path, _ = probe_record
    on_disk = json.loads(path.read_text())
    assert on_disk == json.loads(json.dumps(rec))
    assert record.validate_record(on_disk) == on_disk  # the pydantic model keeps every field, coerces none
    assert on_disk["workload"]["name"] == "codegen" and on_disk["workload"]["version"] == 1
    assert on_disk["window_s"] == 4.0 and on_disk["streams"] == [1, 2]
    model = on_disk["model"]
    assert model["key"] == converged_spark.data["CODING_MODEL"] and model["served_name"] == "coder"
    assert re.fullmatch(r"[0-9a-f]{40}", on_disk["revision"] or ""), on_disk["revision"]
    assert on_disk["served_sha"] == on_disk["revision"]  # the server runs the locked commit
    assert on_disk["vllm_version"] and on_disk["vllm_version"].startswith(converged_spark.data["VLLM_VERSION"])
    assert on_disk["box"]["name"] == converged_spark.host.name and on_disk["box"]["simulated"] is True
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", on_disk["date"])
    assert on_disk["problems"] == []


def test_spec_decode_fields(probe_record):
    rec, _, _ = probe_record
    for run in rec["runs"]:
        sd = run["spec_decode"]
        assert sd is not None, "the sim coder runs ngram speculative decoding"
        assert sd["draft_tokens"] > 0 and 0 < sd["acceptance_rate"] <= 1
        assert 1 < sd["tokens_per_step"] <= 1 + 3  # num_speculative_tokens 3
        assert set(sd["per_position_acceptance"]) == {"0", "1", "2"}


def test_prefill_is_fresh_and_measured(probe_record, converged_spark):
    rec, _, _ = probe_record
    (p,) = rec["prefill"]
    target = int(converged_spark.data["BENCH_PREFILL_TOKENS"])
    assert p["error"] is None
    assert p["prefix_cache_hits_delta"] == 0 and p["fresh"] is True
    assert target - 32 <= p["prompt_tokens"] <= target and p["token_count_source"] == "tokenize"
    assert p["prompt_tokens_delta"] == p["prompt_tokens"]
    assert p["ttft_s"] > 0 and p["tokens_per_s"] > 0


def test_plot_written(probe_record):
    _, _, png = probe_record
    assert png.stat().st_size > 1000 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_compare_cli_flags_different_windows(probe_record, tmp_path, capsys):
    rec, path, _ = probe_record
    other = record.write_record({**rec, "window_s": 40}, tmp_path / "other.json")
    assert main(["bench", "compare", str(path), str(other), "--plot", str(tmp_path / "cmp.png")]) == 0
    out = capsys.readouterr().out
    assert "WINDOWS DIFFER" in out and "decode tok/s, 2 streams" in out
    assert (tmp_path / "cmp.png").exists()


def test_niah_tiny_grid_cli(converged_spark, tmp_path, capsys):
    out = tmp_path / "niah.json"
    rc = main(["niah", "--host", converged_spark.host.name, "--ca", converged_spark.ca,
               "--lengths", "1024,2048,3072", "--depths", "10,50,90", "--max-tokens", "16", "--out", str(out)])
    assert rc == 0
    rec = json.loads(out.read_text())
    assert rec["schema"] == niah.SCHEMA and rec["max_model_len"] == SIM_MAX_CONTEXT
    assert len(rec["cells"]) == 9 and not any(c["skipped"] or c["error"] for c in rec["cells"])
    assert all(c["length"] - 32 <= c["prompt_tokens"] <= c["length"] for c in rec["cells"])
    assert all(c["passed"] == niah.score_answer(c["answer"], c["needle_value"]) for c in rec["cells"])
    assert 0 <= rec["scores"]["overall"] <= 10  # random weights: the score itself means nothing here
    assert "score:" in capsys.readouterr().out


def test_evals_compare_on_fixture_files(capsys):
    a, b = FIX / "evals-a_eval_results.json", FIX / "evals-b.jsonl"
    assert main(["evals", "compare", str(a), str(b), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"both_pass": 28, "both_fail": 14, "only_a": 5, "only_b": 3,
                                                   "n": 50, "p_value": 0.7265625}
