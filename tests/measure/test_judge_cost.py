"""scripts/judge_cost.py (the cost of `bench judge` by history length, cited in docs/measured.md) still runs and
still judges: every call passes, at every size. How long it takes is the benchmark's business, never asserted here."""

from __future__ import annotations

import importlib.util

from sparkctl import REPO_ROOT


def test_the_judge_cost_benchmark_runs_and_every_judgement_passes():
    spec = importlib.util.spec_from_file_location("judge_cost", REPO_ROOT / "scripts" / "judge_cost.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rows = script.run([3, 120])  # 120 lines: three vLLM builds, so a previous configuration and an anchor exist
    assert [r["lines"] for r in rows] == [3, 120] and all(r["cold_s"] > 0 and r["warm_s"] > 0 for r in rows)
