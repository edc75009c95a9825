"""Joins do not queue, as the whole deploy runs it (pyinfra's @fake connector, three boxes of one pool): a box whose
coder was never committed (rollout.py status: no `applied`, not active) waits for no wave and takes none of the
pool's MAX_UNAVAILABLE; a box that serves keeps its wave."""

from __future__ import annotations

import json

import pytest

from tests.deploy.test_deploy_fake import run_fake

POOL = {"qwen": {"model": "qwen3.8-27b", "boxes": 3}}


def deploy_three(tmp_path, committed: str) -> dict:
    mp = pytest.MonkeyPatch()
    for key, value in (("FAKE_HOSTS", "3"), ("FAKE_POOLS", json.dumps(POOL)), ("FAKE_COMMITTED", committed),
                       ("SPARKCTL_TEST_HANDOFF", str(tmp_path / "handoff"))):
        mp.setenv(key, value)
    try:
        return run_fake("dgx", tmp_path)
    finally:
        mp.undo()


def wave_lines(out: dict) -> list[str]:
    return sorted({line.split("] ", 1)[-1] + " @" + line.split("]")[0].rsplit("/", 1)[-1]
                   for line in out["log"].splitlines() if "vllm-coder: " in line and "wave " in line})


def test_two_joining_boxes_roll_out_at_once_and_the_serving_one_after_them(tmp_path):
    out = deploy_three(tmp_path, committed="spark-1")
    lines = wave_lines(out)
    joined = [x for x in lines if "a first install (it serves nothing yet)" in x]
    assert [x.rsplit("@", 1)[1] for x in joined] == ["spark-2", "spark-3"], lines
    assert all("judged with wave 1 of 2 (@fake/spark-2, @fake/spark-3)" in x for x in joined), lines
    assert any("vllm-coder: wave 2 of 2 (@fake/spark-1)" in x for x in lines), lines  # it was the pool's one serving box
    assert all("apply coder" in " ".join(out["by_host"][f"@fake/spark-{i}"]) for i in (1, 2, 3))
