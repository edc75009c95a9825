"""Tensor-parallel as one unit (sparkctl/box/rollout_peer.py): two stand-in boxes, the worker's transaction reading
the head's `rollout.py status` the way it does over the link (here a local command instead of ssh).

The head and worker roll forward together and back together: the worker changes nothing until the head's candidate
is installed, and keeps its own candidate only when the head committed the same unit."""

from __future__ import annotations

import http.server
import json
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sparkctl.box import contract
from tests.box.test_rollout_box import FAST, ROLLOUT, Box, Endpoint, restarts


class MeteredEndpoint(Endpoint):
    """The stand-in vLLM with /health and the step counters the watchdog reads, beside the request gauges."""

    def do_GET(self):
        if self.path == "/health":
            return self._send(200 if self._serving()["up"] else 503, b"")
        if self.path != "/metrics":
            return super().do_GET()
        counters = b'vllm:iteration_tokens_total_count{engine="0"} 7.0\nvllm:generation_tokens_total{engine="0"} 9.0\n'
        running = 'vllm:num_requests_running{engine="0"} 0.0\nvllm:num_requests_waiting{engine="0"} 0.0\n'
        return self._send(200, running.encode() + counters, "text/plain")


def start_box(root: Path) -> tuple[Box, http.server.ThreadingHTTPServer]:
    handler = type("H", (MeteredEndpoint,), {"sd": root / "fake"})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return Box(root, server.server_address[1]), server


def on(b: Box, *argv: str) -> list[str]:
    """argv run as on box b (its stand-in systemd and directories), from anywhere: what ssh over the link does."""
    env = {k: b.environ[k] for k in ("PATH", "FAKE_SD", "SPARKCTL_ENV_DIR", "SPARKCTL_UNIT_DIR", "SPARKCTL_STATE_DIR",
                                     "SPARKCTL_DRAIN_DIR")}
    return ["env", *[f"{k}={v}" for k, v in env.items()], *argv]


class Pair:
    def __init__(self, tmp_path: Path):
        (self.head, self._hs), (self.worker, self._ws) = start_box(tmp_path / "head"), start_box(tmp_path / "worker")
        self.peer_cmd = shlex.join(on(self.head, sys.executable, str(ROLLOUT), "status", "coder"))  # the head's
        self.worker_cmd = shlex.join(on(self.worker, sys.executable, str(ROLLOUT), "status", "coder"))  # the worker's

    def stage(self, model: str, unit: str) -> None:
        for b in (self.head, self.worker):
            b.stage(model, headless=b is self.worker)
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


def test_a_replica_becoming_the_worker_leaves_the_routers_and_drains_before_it_restarts(pair):
    """Two replicas formed into a pair: the future worker served clients until now, so its transaction fails its
    router health path and drains before its engine restarts headless, as a serving box's rollout does; a worker that
    was already headless (the pair's own rollouts, above) has no clients and does neither."""
    for b in (pair.head, pair.worker):  # both serve as replicas (no --headless)
        b.stage("qwen")
        assert b.run(txn="replicas").returncode == 0
        (b.sd / "calls.log").unlink()
    pair.stage("qwen-pair", "u1")
    w = pair.start_worker("t1")
    wait_phase(pair.worker, "awaiting-head")
    calls = pair.worker.calls()
    assert calls.count("reload nginx.service") == 2 and restarts(pair.worker) == 0, calls  # out, then drained
    assert sorted(p.name for p in pair.worker.drain.iterdir()) == ["coder.conf", "coder.unready.conf"]
    r = pair.head.run(txn="t1")
    out = w.communicate(timeout=60)[0]
    assert r.returncode == 0 and w.returncode == 0, r.stdout + out
    assert "draining 'coder'" in out and pair.worker.live_model() == "qwen-pair"
    assert list(pair.worker.drain.iterdir()) == []  # lifted at the commit
    pair.stage("qwen-pair2", "u2")  # now headless: the next rollout neither leaves the routers nor drains
    (pair.worker.sd / "calls.log").unlink()
    w = pair.start_worker("t2")
    assert pair.head.run(txn="t2").returncode == 0
    out = w.communicate(timeout=60)[0]
    assert w.returncode == 0 and "draining" not in out, out


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


def test_head_progress_reads_only_the_matching_unit():
    sys.path.insert(0, str(Path(ROLLOUT).parent))  # the box scripts import each other by file name
    import rollout_peer as peer
    committed = {"tp_unit": "u2", "tp_unit_live": "u2", "phase": "", "running": False, "active": True,
                 "applied": "h", "wanted": "h", "failed": None, "last": {"txn": "t"}}
    assert peer.head_progress(committed, "u2")[0] == peer.COMMITTED
    assert peer.head_progress(committed, "u3")[0] == peer.WAITING  # an older or other unit is never taken for ours
    assert peer.head_progress({**committed, "phase": "started"}, "u2")[0] == peer.GO
    assert peer.head_progress({**committed, "phase": "awaiting-verdict"}, "u2")[0] == peer.GO  # not committed yet
    assert peer.head_progress({**committed, "phase": "rolling-back"}, "u2")[0] == peer.FAILED
    assert peer.head_progress({**committed, "failed": {"why": "x"}}, "u2")[0] == peer.FAILED
    assert peer.head_progress(None, "u2")[0] == peer.WAITING
    assert peer.tp_unit_of(b"A=1\nSPARKCTL_TP_UNIT=abc\n") == "abc" and peer.tp_unit_of(b"A=1\n") == ""


# --- a pair restart (rollout_restart.py, rollout_peer.py): both boxes' transactions, the head never alone ---------
PEER_WAIT = 20  # --peer-timeout of these tests, s


def head_restart_args(pair: Pair, **kw) -> list[str]:
    return pair.head.args("restart", **{"peer-status-cmd": pair.worker_cmd, "peer-timeout": PEER_WAIT,
                                        "peer-call-timeout": 10, **kw})


def worker_restart_argv(pair: Pair) -> list[str]:
    """The worker's part, as its watchdog's rendered "follow" command runs it."""
    args = pair.worker.args("restart", kind="none", **{"worker-settle": 0.2, "peer-status-cmd": pair.peer_cmd,
                                                       "peer-timeout": PEER_WAIT, "peer-call-timeout": 10})
    return on(pair.worker, sys.executable, str(ROLLOUT), "restart", "coder", *args, "--reason", "pair-restart",
              "--wait")


def follower(pair: Pair, tmp_path: Path):
    """The worker's real watchdog (watchdog.py, follow_head), checking every 0.2 s in a thread until stopped."""
    from sparkctl.box.watchdog import Watchdog
    cfg = {"interval_s": 1, "stall_s": 60, "probe_idle_s": 30, "probe_timeout_s": 1, "http_timeout_s": 2,
           "max_restarts": 3, "window_s": 3600, "restart_command": "", "stop_command": "",
           "rollout_active_command": f"test -e {tmp_path}/never-{{service}}",
           "state_file": str(tmp_path / "worker-watchdog" / "state.json"),
           "textfile": str(tmp_path / "worker-watchdog.prom"), "services": [],
           "follow": {"service": "coder", "unit": "vllm-coder.service", "peer_status_command": pair.peer_cmd,
                      "call_timeout_s": 10, "restart_command": worker_restart_argv(pair)}}
    dog, stop = Watchdog(cfg), threading.Event()

    def loop():
        while not stop.is_set():
            dog.check_once()
            time.sleep(0.2)
    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    return dog, stop, thread


def test_a_pair_restart_restarts_both_boxes_through_their_transactions_the_head_after_the_worker(pair, tmp_path):
    pair.converge("qwen", "u1")
    dog, stop, thread = follower(pair, tmp_path)
    try:
        r = pair.head.cli("restart", "coder", *head_restart_args(pair), "--reason", "watchdog", "--wait")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    head, worker = pair.head.result(), pair.worker.result()
    assert (head["outcome"], head["by"]) == ("restarted", "watchdog")
    assert (worker["outcome"], worker["by"]) == ("restarted", "pair-restart") and head["txn"] in worker["message"]
    assert restarts(pair.head) == restarts(pair.worker) == 1  # one restart each, both through their own unit
    assert "systemd-run sparkctl-rollout-coder.service" in pair.worker.calls()
    log = r.stdout
    assert log.index("waiting for the worker's part to start") < log.index("follows it; restarting the head") < \
        log.index("restarted vllm-coder.service")  # the head restarted only once the worker's part had started
    assert dog.record("coder")["followed"] == head["txn"]
    for b in (pair.head, pair.worker):
        st = b.status()
        assert st["restarting"] == "" and st["active"] and st["tp_unit_live"] == "u1"
    assert not (pair.head.drain / "coder.conf").exists()


def test_the_head_never_restarts_alone(pair):
    pair.converge("qwen", "u1")
    r = pair.head.cli("restart", "coder", *head_restart_args(pair, **{"peer-timeout": 1}), "--wait")  # no follower
    assert r.returncode == contract.code(contract.PEER_ABSENT), r.stdout + r.stderr
    assert "did not start" in pair.head.result()["why"] and "never restarts alone" in r.stdout
    assert pair.head.calls() == ["systemd-run sparkctl-rollout-coder.service"]  # no drain, no restart
    assert pair.head.status()["restarting"] == ""
    unreachable = shlex.join(["sh", "-c", "echo 'ssh: connect to host port 22: No route to host' >&2; exit 255"])
    r = pair.head.cli("restart", "coder", *head_restart_args(pair, **{"peer-status-cmd": unreachable}), "--wait")
    assert r.returncode == contract.code(contract.PEER_ABSENT) and "No route to host" in pair.head.result()["why"]
    r = pair.head.cli("restart", "coder", *pair.head.args("restart"), "--wait")  # no way to reach the worker at all
    assert r.returncode == contract.code(contract.REFUSED) and "only together with its worker" in r.stdout
    assert restarts(pair.head) == restarts(pair.worker) == 0


def test_a_pair_restart_is_refused_while_either_boxs_transaction_is_open_or_running(pair):
    pair.converge("qwen", "u1")
    pair.stage("laguna", "u2")
    w = pair.start_worker("t1", peer_timeout=60)  # the worker's deploy transaction waits for its head ...
    wait_phase(pair.worker, "awaiting-head")
    w.kill()  # ... and dies there: open, not running
    w.wait()
    r = pair.head.cli("restart", "coder", *head_restart_args(pair), "--wait")
    assert r.returncode == contract.code(contract.REFUSED), r.stdout + r.stderr
    assert "the other box's transaction is open (phase awaiting-head)" in pair.head.result()["why"]
    worker_apply = pair.worker.args(kind="none", **{"worker-settle": 0.2, "peer-status-cmd": pair.peer_cmd,
                                                    "peer-timeout": 60, "peer-call-timeout": 10})
    assert pair.worker.cli("apply", "coder", *worker_apply).returncode == 0  # resumed in its transient unit: running
    try:
        r = pair.head.cli("restart", "coder", *head_restart_args(pair), "--wait")
        assert r.returncode == contract.code(contract.REFUSED) and "is running (it owns the pair)" in r.stdout
    finally:
        unit = json.loads((pair.worker.sd / "units" / "sparkctl-rollout-coder.service.json").read_text())
        os.kill(unit["pid"], signal.SIGKILL)
    assert restarts(pair.head) == restarts(pair.worker) == 0


def test_a_workers_part_without_the_heads_pair_restart_changes_nothing(pair):
    pair.converge("qwen", "u1")
    r = subprocess.run(worker_restart_argv(pair), capture_output=True, text=True, timeout=60)
    assert r.returncode == contract.code(contract.HEAD_ABSENT), r.stdout + r.stderr
    assert "the head runs no pair restart" in pair.worker.result()["why"] and restarts(pair.worker) == 0


def test_a_pair_restart_whose_head_fails_its_gate_fails_on_both_boxes(pair, tmp_path):
    pair.converge("qwen", "u1")
    (pair.head.sd / "unready").write_text("qwen\n")  # the head starts again but never answers
    dog, stop, thread = follower(pair, tmp_path)
    try:
        r = pair.head.cli("restart", "coder", *head_restart_args(pair, timeout=2), "--wait")
    finally:
        stop.set()
        thread.join(timeout=60)
    assert r.returncode == contract.code(contract.RESTART_FAILED), r.stdout + r.stderr
    worker = pair.worker.result()
    assert worker["outcome"] == contract.RESTART_FAILED and "ended restart-failed" in worker["why"]
    assert not (pair.head.drain / "coder.conf").exists()


def test_a_dead_worker_is_caught_and_the_pair_restarted_by_the_heads_watchdog_through_both_transactions(pair,
                                                                                                      tmp_path):
    """The real watchdog on each box: the head's judges the pair (the worker's engine it served with is gone) and
    restarts it with its configured command; the worker's follows the head's announcement."""
    from prometheus_client.parser import text_string_to_metric_families

    from sparkctl.box.watchdog import Watchdog
    from sparkctl.config import groupdata
    pair.converge("qwen", "u1")
    h = pair.head
    cfg = {"interval_s": 1, "stall_s": 60, "probe_idle_s": 1, "probe_timeout_s": 5, "http_timeout_s": 2,
           "max_restarts": 3, "window_s": 3600, "stop_command": "systemctl stop {unit}",
           "restart_command": groupdata.load(["all"])["WATCHDOG_RESTART_COMMAND"],  # the deploy's own
           "rollout_active_command": f"test -e {tmp_path}/never-{{service}}",
           "rollout_command": on(h, sys.executable, str(ROLLOUT)),
           "rollout_limits": contract.setting_argv("restart", {**FAST, "TP_PEER_CALL_TIMEOUT_S": 10}),
           "state_file": str(tmp_path / "head-watchdog" / "state.json"), "textfile": str(tmp_path / "head.prom"),
           "services": [{"name": "coder", "unit": "vllm-coder.service", "kind": "chat", "served": "coder",
                         "port": h.port, "url": f"http://127.0.0.1:{h.port}",
                         "pair": {"peer_status_command": pair.worker_cmd, "call_timeout_s": 10,
                                  "env_file": str(h.env_dir / "vllm-coder.env")},
                         "peer_args": contract.options("restart", peer_status_cmd=pair.worker_cmd,
                                                       peer_timeout=PEER_WAIT)}]}
    head_dog = Watchdog(cfg)
    assert head_dog.check_once(now=1000.0)["coder"] == "idle"
    assert head_dog.check_once(now=1002.0)["coder"] == "idle"  # its probe answered: the pair serves
    subprocess.run(on(pair.worker, "systemctl", "stop", "vllm-coder.service"), check=True)  # the worker dies
    dog, stop, thread = follower(pair, tmp_path)
    try:
        assert head_dog.check_once(now=1010.0)["coder"] == "wedged"  # runs the pair restart, --wait
    finally:
        stop.set()
        thread.join(timeout=60)
    head, worker = pair.head.result(), pair.worker.result()
    assert (head["outcome"], head["by"], worker["outcome"]) == ("restarted", "watchdog", "restarted"), (head, worker)
    assert restarts(pair.head) == restarts(pair.worker) == 1 and pair.worker.status()["active"]
    text = (tmp_path / "head.prom").read_text()
    assert {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            }["sparkctl_watchdog_restarts_total"] == 1
    assert dog.record("coder")["followed_total"] == 1
    assert head_dog.check_once(now=1020.0)["coder"] == "idle"  # judged afresh, the pair whole again
