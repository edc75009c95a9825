"""The pair's link probe (sparkctl/box/link_probe.py): nccl-tests' bus bandwidth, the judgement against
LINK_MIN_BUSBW_GBPS, its timing and CLI; the all-reduce itself with two local gloo ranks where torch is importable."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys

import pytest

from sparkctl import REPO_ROOT
from sparkctl.box import link_probe
from sparkctl.config import groupdata

SCRIPT = REPO_ROOT / "sparkctl/box/link_probe.py"


def test_bus_bandwidth_is_nccl_tests_all_reduce_formula():
    algbw, busbw = link_probe.bus_bandwidth(10**9, 0.1, 2)  # 1 GB in 0.1 s
    assert algbw == pytest.approx(10.0) and busbw == pytest.approx(10.0)  # 2(n-1)/n = 1 for a pair
    assert link_probe.bus_bandwidth(10**9, 0.1, 4)[1] == pytest.approx(15.0)  # 2 x 3/4
    assert link_probe.bus_bandwidth(10**9, 0.1, 1)[1] == 0.0  # one rank moves nothing over a link
    with pytest.raises(ValueError):
        link_probe.bus_bandwidth(10**9, 0.0, 2)


def result(busbw: float, **extra) -> dict:
    return {"rank": 0, "backend": "nccl", "bytes": 1 << 30, "iters": 20, "busbw_gbps": busbw, **extra}


def test_judge_against_the_floor():
    floor = groupdata.load(["all", "gx10"])["LINK_MIN_BUSBW_GBPS"]
    ok, why = link_probe.judge(result(23.7), floor)
    assert ok and "reaches LINK_MIN_BUSBW_GBPS = 15" in why
    ok, why = link_probe.judge(result(3.0), floor)  # one twin, or TCP: the playbooks' 3 GB/s
    assert not ok and "3.00 GB/s" in why and "below LINK_MIN_BUSBW_GBPS = 15" in why
    assert link_probe.judge(result(0.01), 0.0)[0]  # 0: no floor (the simulated Spark's)
    ok, why = link_probe.judge({"rank": 1, "error": "RuntimeError: timed out"}, floor)
    assert not ok and "rank 1" in why and "timed out" in why


def test_timed_counts_only_the_timed_iterations_and_waits_for_the_device():
    calls, clock = [], iter([10.0, 12.0])
    seconds = link_probe.timed(lambda: calls.append("reduce"), lambda: calls.append("sync"), iters=4, warmup=2,
                               clock=lambda: next(clock))
    assert seconds == 0.5
    assert calls == ["reduce"] * 2 + ["sync"] + ["reduce"] * 4 + ["sync"]


def test_the_cli_the_rehearsal_calls():
    a = link_probe.parse(["--rank", "1", "--world", "2", "--master", "192.168.100.10", "--port", "29600",
                          "--bytes", "1073741824", "--iters", "20", "--backend", "nccl"])
    assert (a.rank, a.world, a.master, a.port, a.bytes, a.iters, a.backend, a.warmup) == \
        (1, 2, "192.168.100.10", 29600, 1 << 30, 20, "nccl", link_probe.DEFAULT_WARMUP)
    with pytest.raises(SystemExit):
        link_probe.parse(["--rank", "2", "--world", "2", "--master", "x", "--port", "1", "--bytes", "8",
                          "--iters", "1", "--backend", "gloo"])


@pytest.mark.parametrize("groups", [["all", "gx10"], ["all", "gx10", "sim"]])
def test_the_settings_make_a_command_line_the_probe_accepts(groups):
    d = groupdata.load(groups)
    a = link_probe.parse(["--rank", "0", "--world", "2", "--master", "10.0.0.1", "--port", "29600", "--bytes",
                          str(d["LINK_PROBE_BYTES"]), "--iters", str(d["LINK_PROBE_ITERS"]),
                          "--backend", d["LINK_PROBE_BACKEND"]])
    assert a.backend == ("gloo" if "sim" in groups else "nccl") and a.bytes % link_probe.FLOAT32_BYTES == 0


def test_a_failure_is_one_json_line_and_exit_1(monkeypatch, capsys):
    def fail(_):
        raise RuntimeError("no route to host")
    monkeypatch.setattr(link_probe, "run", fail)
    assert link_probe.main(["--rank", "0", "--world", "2", "--master", "127.0.0.1", "--port", "1", "--bytes", "8",
                            "--iters", "1", "--backend", "gloo"]) == 1
    assert json.loads(capsys.readouterr().out) == {"rank": 0, "error": "RuntimeError: no route to host"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="torch is not importable on this control machine: the probe's all-reduce runs with the "
                           "box's vLLM venv (the pure parts above are tested without it)")
def test_two_local_gloo_ranks_measure_one_all_reduce():
    port = free_port()
    procs = [subprocess.Popen([sys.executable, str(SCRIPT), "--rank", str(r), "--world", "2", "--master", "127.0.0.1",
                               "--port", str(port), "--bytes", str(1 << 20), "--iters", "3", "--warmup", "1",
                               "--backend", "gloo", "--timeout-s", "60"], stdout=subprocess.PIPE, text=True)
             for r in (0, 1)]
    outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    for r, out in enumerate(outs):
        assert out["rank"] == r and out["bytes"] == 1 << 20 and out["busbw_gbps"] > 0, out
        assert out["busbw_gbps"] == pytest.approx(out["algbw_gbps"])  # a pair: 2(n-1)/n = 1
