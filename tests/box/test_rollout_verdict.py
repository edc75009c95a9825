"""The acceptance verdict phase of the box-side rollout (sparkctl/box/rollout_verdict.py, issue 12): after the
health gate the transaction waits for `rollout.py verdict`, against the same stand-in systemd and vLLM endpoint
as tests/box/test_rollout_box.py."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from sparkctl.box import contract
from tests.box.test_rollout_box import ROLLOUT, box, restarts  # noqa: F401  (the fixture)


def start(b, txn="v1", timeout=30, default="rollback", **kw) -> subprocess.Popen:
    """`rollout.py run` with a verdict timeout, in the background (as the transient unit runs it)."""
    return subprocess.Popen([sys.executable, str(ROLLOUT), "run", "coder", "--txn", txn,
                             *b.args(**{"verdict-timeout": timeout, "verdict-default": default, **kw})],
                            env=b.environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def until_waiting(b, proc=None, limit=20) -> dict:
    deadline = time.time() + limit
    while time.time() < deadline:
        st = b.status()
        if st["phase"] == "awaiting-verdict":
            return st
        assert proc is None or proc.poll() is None, proc.stdout.read()
        time.sleep(0.05)
    raise AssertionError(f"never waited for a verdict: {b.status()}")


def verdict(b, tx, decision, *extra) -> subprocess.CompletedProcess:
    return b.cli("verdict", "coder", "--tx", tx, decision, *extra)


def finish(proc) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=60)
    return proc.returncode, out


def stamp(b) -> str:
    return (b.state / "rollout" / "vllm-coder.stamp").read_text().strip()


def test_after_the_gate_it_waits_drained_but_for_its_probe_and_commit_stamps_and_reopens(box):
    box.converge("qwen")
    before = stamp(box)
    box.stage("laguna")
    proc = start(box)
    st = until_waiting(box, proc)
    assert st["tx"] == "v1" and st["verdict_deadline"] > time.time() + 20 and st["verdict_default"] == "rollback"
    assert stamp(box) == before and st["applied"] != st["wanted"]  # not committed yet
    # it served before: clients keep getting 503 while it is judged; only the probe with the key passes
    drain = (box.drain / "coder.conf").read_text()
    assert st["probe_key"] and f'!= "{st["probe_key"]}"' in drain and "return 503" in drain
    assert box.serving() == {"up": True, "model": "laguna"}
    assert (box.drain / "coder.unready.conf").exists()  # out of the routers until the verdict
    assert (box.txn_dir() / "env").read_text().startswith("SPARKCTL_MODEL=qwen")  # the snapshot is kept
    follow = json.loads(box.cli("follow", "coder", "--txn", "v1").stdout.splitlines()[-1][3:])
    assert follow["awaiting"] and not follow["done"] and follow["candidate"] == st["wanted"]
    r = box.cli("follow", "coder", "--txn", "v1", "--wait")  # the deploy's op ends here
    assert r.returncode == 0 and "waits for its acceptance verdict" in r.stdout
    r = verdict(box, "v1", "commit", "--reason", "acceptance passed against baseline b1")
    assert r.returncode == 0, r.stderr
    assert not json.loads(box.cli("follow", "coder", "--txn", "v1").stdout.splitlines()[-1][3:])["awaiting"]
    rc, out = finish(proc)
    assert rc == 0 and "serves laguna" in out, out
    res = box.result()
    assert res["outcome"] == "ready" and res["verdict"]["by"] == "control" and res["verdict"]["decision"] == "commit"
    assert stamp(box) == box.status()["wanted"] and not box.txn_dir().exists()
    assert box.status()["phase"] == "" and box.status()["tx"] is None and box.status()["verdict_deadline"] is None
    assert not (box.drain / "coder.conf").exists() and box.status()["probe_key"] is None  # open for everyone
    assert not (box.drain / "coder.unready.conf").exists()  # back in the routers once committed


def test_a_first_install_waits_open_there_is_nobody_to_keep_out_and_health_needs_the_path(box):
    box.stage("qwen")
    proc = start(box)
    st = until_waiting(box, proc)
    assert st["probe_key"] is None and not (box.drain / "coder.conf").exists()
    # open for the deploy's health step, but in no router: clients through a router meet it only once committed
    assert (box.drain / "coder.unready.conf").exists()
    assert verdict(box, st["tx"], "commit").returncode == 0
    assert finish(proc)[0] == 0
    assert not (box.drain / "coder.unready.conf").exists()


def test_rollback_remembers_the_candidate_with_the_reason_and_restores_the_snapshot_exactly(box):
    box.converge("qwen")
    unit_before = (box.units / "vllm-coder.service").read_text()
    env_before = (box.env_dir / "vllm-coder.env").read_text()
    stamp_before = stamp(box)
    box.stage("laguna", unit_extra="# travels with the candidate\n")
    proc = start(box)
    until_waiting(box, proc)
    n = restarts(box)
    reason = "acceptance failed: spec-decode acceptance, 1 stream(s): 0.02 vs 0.58 [catalog floor]"
    assert verdict(box, "v1", "rollback", "--reason", reason).returncode == 0
    rc, out = finish(proc)
    assert rc == 3 and "ROLLED BACK vllm-coder.service to qwen" in out, out
    assert (box.units / "vllm-coder.service").read_text() == unit_before
    assert (box.env_dir / "vllm-coder.env").read_text() == env_before and stamp(box) == stamp_before
    assert box.serving() == {"up": True, "model": "qwen"} and restarts(box) == n + 1
    assert box.calls().count("reload nginx.service") >= 2  # drained again before the rollback, then reopened
    assert not (box.drain / "coder.conf").exists() and not box.txn_dir().exists()
    assert not (box.drain / "coder.unready.conf").exists()  # the snapshot serves again: back in the routers
    res = box.result()
    assert res["outcome"] == "rolled-back" and reason in res["why"] and res["verdict"]["by"] == "control"
    st = box.status()
    assert st["failed"]["model"] == "laguna" and reason in st["failed"]["why"]
    r = box.run(txn="v2", **{"verdict-timeout": 30, "verdict-default": "rollback"})  # not retried unless asked
    assert r.returncode == 7 and restarts(box) == n + 1 and "ROLLOUT_RETRY_FAILED=True" in r.stdout


@pytest.mark.parametrize("default, rc, outcome, model", [("rollback", 3, "rolled-back", "qwen"),
                                                         ("commit", 0, "ready", "laguna")])
def test_no_verdict_in_time_the_box_decides_alone_with_its_default(box, default, rc, outcome, model):
    box.converge("qwen")
    box.stage("laguna")
    r = box.run(txn="v1", **{"verdict-timeout": 1, "verdict-default": default})
    assert r.returncode == rc, r.stdout
    res = box.result()
    assert res["outcome"] == outcome and box.live_model() == model
    assert res["verdict"] == {**res["verdict"], "by": "box", "decision": default}
    assert "no acceptance verdict within 1 s: the box decided alone" in res["message"]
    assert "decided alone" in (res.get("why") or res["message"])
    if default == "rollback":
        assert "no acceptance verdict within 1 s" in box.status()["failed"]["why"]
    else:
        assert box.status()["failed"] is None and stamp(box) == box.status()["wanted"]


def test_a_verdict_for_another_transaction_or_none_waiting_is_refused(box):
    box.converge("qwen")
    r = verdict(box, "v1", "commit")
    refused = contract.code(contract.VERDICT_REFUSED)
    assert r.returncode == refused and "no transaction of vllm-coder.service waits for a verdict" in r.stderr
    box.stage("laguna")
    proc = start(box, interval=3)  # polls slowly: the second verdict below meets the first still unread
    until_waiting(box, proc)
    r = verdict(box, "someone-else", "rollback", "--reason", "x")
    assert r.returncode == refused and "does not wait for a verdict" in r.stderr and "v1" in r.stderr
    assert not (box.txn_dir() / "verdict.json").exists() and box.status()["phase"] == "awaiting-verdict"
    assert verdict(box, "v1", "commit").returncode == 0
    r = verdict(box, "v1", "rollback")  # a second, contradicting verdict
    assert r.returncode == refused and "already has the verdict commit" in r.stderr
    rc, out = finish(proc)
    assert rc == 0 and box.live_model() == "laguna", out


def test_a_run_that_died_while_waiting_is_resumed_until_the_recorded_deadline(box):
    box.converge("qwen")
    box.stage("laguna")
    proc = start(box, timeout=4)
    deadline = until_waiting(box, proc)["verdict_deadline"]
    proc.kill()  # the rollout unit dies (or the box reboots) while it waits
    proc.wait()
    n = restarts(box)
    resumed = start(box, txn="v2", timeout=600)  # a later apply: its own timeout does not extend the wait
    st = until_waiting(box, resumed)
    for _ in range(200):  # the state still says v1 until the resumed run has taken the wait over
        if st["tx"] == "v2":
            break
        time.sleep(0.05)
        st = until_waiting(box, resumed)
    assert st["tx"] == "v2" and st["verdict_deadline"] == deadline
    # the same key again (read before the verdict: once the run commits it reopens, and the file is gone)
    assert st["probe_key"] and st["probe_key"] in (box.drain / "coder.conf").read_text()
    assert (box.drain / "coder.unready.conf").exists()  # still out of the routers while the resumed run waits
    # the verdict may still name the transaction that started the wait
    assert verdict(box, "v1", "commit").returncode == 0
    rc, out = finish(resumed)
    assert rc == 0 and "resuming transaction v1" in out and restarts(box) == n, out  # no restart on resume
    assert box.result()["txn"] == "v2" and stamp(box) == box.status()["wanted"] and box.live_model() == "laguna"
    assert not (box.drain / "coder.unready.conf").exists()  # the resumed run let the routers back in


def test_a_resumed_wait_past_its_deadline_decides_at_once(box):
    box.converge("qwen")
    box.stage("laguna")
    proc = start(box, timeout=1)
    until_waiting(box, proc)
    proc.kill()
    proc.wait()
    time.sleep(1.2)
    t0 = time.monotonic()
    r = box.run(txn="v2")  # no --verdict-timeout given: the recorded wait still governs
    assert r.returncode == 3 and time.monotonic() - t0 < 10 and box.live_model() == "qwen", r.stdout
    assert box.result()["verdict"]["by"] == "box" and box.status()["failed"]["model"] == "laguna"


def test_without_a_verdict_timeout_nothing_waits(box):
    box.converge("qwen")
    box.stage("laguna")
    r = box.run()
    assert r.returncode == 0 and "verdict" not in box.result() and "acceptance verdict" not in r.stdout
