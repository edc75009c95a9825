"""Tensor-parallel as one unit (sparkctl/box/rollout_peer.py): two stand-in boxes, the worker's transaction reading
the head's `rollout.py status` the way it does over the link (here a local command instead of ssh).

The head and worker roll forward together and back together: the worker changes nothing until the head's candidate
is installed, and keeps its own candidate only when the head committed the same unit."""

from __future__ import annotations

import http.server
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparkctl.box import contract
from tests.box.test_rollout_box import ROLLOUT, Box, Endpoint, restarts


def start_box(root: Path) -> tuple[Box, http.server.ThreadingHTTPServer]:
    handler = type("H", (Endpoint,), {"sd": root / "fake"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return Box(root, server.server_address[1]), server


class Pair:
    def __init__(self, tmp_path: Path):
        (self.head, self._hs), (self.worker, self._ws) = start_box(tmp_path / "head"), start_box(tmp_path / "worker")
        env = {k: self.head.environ[k] for k in ("PATH", "FAKE_SD", "SPARKCTL_ENV_DIR", "SPARKCTL_UNIT_DIR",
                                                  "SPARKCTL_STATE_DIR", "SPARKCTL_DRAIN_DIR")}
        self.peer_cmd = shlex.join(["env", *[f"{k}={v}" for k, v in env.items()], sys.executable, str(ROLLOUT),
                                    "status", "coder"])

    def stage(self, model: str, unit: str) -> None:
        for b in (self.head, self.worker):
            b.stage(model)
            with open(b.env_dir / "vllm-coder.env.next", "a") as f:
                f.write(f"SPARKCTL_TP_UNIT={unit}\n")

    def start_worker(self, txn: str, peer_timeout: float = 20) -> subprocess.Popen:
        w = self.worker
        args = w.args(kind="none", **{"worker-settle": 0.2, "peer-status-cmd": self.peer_cmd,
                                      "peer-timeout": peer_timeout, "peer-call-timeout": 10})
        return subprocess.Popen([sys.executable, str(ROLLOUT), "run", "coder", "--txn", txn, *args],
                                env=w.environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    def converge(self, model: str, unit: str) -> None:
        self.stage(model, unit)
        w = self.start_worker(f"converge-{model}")
        r = self.head.run(txn=f"converge-{model}")
        out = w.communicate(timeout=60)[0]
        assert r.returncode == 0 and w.returncode == 0, r.stdout + out
        for b in (self.head, self.worker):
            (b.sd / "calls.log").unlink()

    def close(self) -> None:
        self._hs.shutdown()
        self._ws.shutdown()


@pytest.fixture
def pair(tmp_path):
    p = Pair(tmp_path)
    yield p
    p.close()


def wait_phase(b: Box, phase: str, timeout: float = 20) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if b.status().get("phase") == phase:
            return
        time.sleep(0.05)
    raise AssertionError(f"phase {phase!r} never reached: {b.status()}")


def test_the_worker_changes_nothing_until_the_head_installs_then_commits_with_it(pair):
    pair.converge("qwen", "u1")
    pair.stage("laguna", "u2")
    w = pair.start_worker("t1")
    wait_phase(pair.worker, "awaiting-head")
    time.sleep(0.5)
    assert pair.worker.live_model() == "qwen" and restarts(pair.worker) == 0  # the head has not moved yet
    r = pair.head.run(txn="t1")
    out = w.communicate(timeout=60)[0]
    assert r.returncode == 0 and w.returncode == 0, r.stdout + out
    assert pair.head.live_model() == pair.worker.live_model() == "laguna"
    assert "the head committed it" in out and pair.worker.result()["outcome"] == "ready"
    st = pair.worker.status()
    assert st["applied"] == st["wanted"] and st["tp_unit_live"] == "u2" and not pair.worker.txn_dir().exists()
    # the head's status says which unit it runs: what the worker matched on
    assert pair.head.status()["tp_unit_live"] == "u2"


def test_a_head_that_fails_its_gate_brings_both_boxes_back_to_the_previous_configuration(pair):
    pair.converge("qwen", "u1")
    worker_unit = (pair.worker.units / "vllm-coder.service").read_text()
    worker_env = (pair.worker.env_dir / "vllm-coder.env").read_text()
    (pair.head.sd / "unready").write_text("broken\n")  # the head starts the candidate but never answers its gate
    pair.stage("broken", "u3")
    w = pair.start_worker("t1")
    r = pair.head.run(txn="t1", timeout=3)
    out = w.communicate(timeout=60)[0]
    assert r.returncode == 3, r.stdout  # the head rolled back
    assert w.returncode == 3, out  # and so did the worker
    assert "the head's candidate failed" in out or "the head is rolling back" in out
    assert pair.head.live_model() == pair.worker.live_model() == "qwen"
    # exactly what the worker's candidate replaced
    assert (pair.worker.units / "vllm-coder.service").read_text() == worker_unit
    assert (pair.worker.env_dir / "vllm-coder.env").read_text() == worker_env
    assert restarts(pair.worker) == 2  # forward, then back
    st = pair.worker.status()
    assert st["failed"] and st["tp_unit_live"] == "u1" and pair.worker.result()["outcome"] == "rolled-back"
    # the same pair again: both remember, neither restarts
    n = restarts(pair.worker)
    again = pair.start_worker("t2")
    assert again.wait(timeout=60) == 7 and restarts(pair.worker) == n


def test_a_head_that_never_comes_leaves_the_worker_untouched(pair):
    pair.converge("qwen", "u1")
    pair.stage("laguna", "u2")
    w = pair.start_worker("t1", peer_timeout=1)  # the deploy died before it reached the head
    out = w.communicate(timeout=60)[0]
    assert w.returncode == contract.code(contract.HEAD_ABSENT), out
    assert "did not decide" in out and pair.worker.live_model() == "qwen" and restarts(pair.worker) == 0
    assert pair.worker.result()["outcome"] == "head-absent" and not pair.worker.txn_dir().exists()
    assert pair.worker.status()["failed"] is None  # not the candidate's fault: a rerun tries it again


def test_a_head_rejected_before_it_stopped_anything_leaves_both_as_they_were(pair):
    pair.converge("qwen", "u1")
    pair.stage("laguna", "u2")
    nxt = pair.head.env_dir / "vllm-coder.service.next"  # the head's vLLM install is missing: refused up front
    nxt.write_text(nxt.read_text().replace(str(pair.head.venv), str(pair.head.root / "nope")))
    w = pair.start_worker("t1")
    wait_phase(pair.worker, "awaiting-head")
    assert pair.head.run(txn="t1").returncode == 5
    out = w.communicate(timeout=60)[0]
    assert w.returncode == contract.code(contract.HEAD_FAILED), out
    assert pair.worker.result()["outcome"] == contract.HEAD_FAILED
    assert pair.worker.live_model() == "qwen" and restarts(pair.worker) == 0 and restarts(pair.head) == 0


def test_judge_reads_only_the_matching_unit():
    sys.path.insert(0, str(Path(ROLLOUT).parent))  # the box scripts import each other by file name
    import rollout_peer as peer
    committed = {"tp_unit": "u2", "tp_unit_live": "u2", "phase": "", "running": False, "active": True,
                 "applied": "h", "wanted": "h", "failed": None, "last": {"txn": "t"}}
    assert peer.judge(committed, "u2")[0] == peer.COMMITTED
    assert peer.judge(committed, "u3")[0] == peer.WAITING  # an older or other unit is never taken for ours
    assert peer.judge({**committed, "phase": "started"}, "u2")[0] == peer.GO
    assert peer.judge({**committed, "phase": "awaiting-verdict"}, "u2")[0] == peer.GO  # not committed yet
    assert peer.judge({**committed, "phase": "rolling-back"}, "u2")[0] == peer.FAILED
    assert peer.judge({**committed, "failed": {"why": "x"}}, "u2")[0] == peer.FAILED
    assert peer.judge(None, "u2")[0] == peer.WAITING
    assert peer.tp_unit_of(b"A=1\nSPARKCTL_TP_UNIT=abc\n") == "abc" and peer.tp_unit_of(b"A=1\n") == ""
