"""The restart-only transaction (sparkctl/box/rollout_restart.py, `rollout.py restart`), the watchdog's restart of
a wedged engine, against the same stand-in systemd tools and vLLM endpoint as tests/box/test_rollout_box.py: it
restarts what is installed and committed, never the staged candidate; it refuses while the deploy's transaction
is open or its unit runs; the drain is on during the restart and always off after; the result is recorded."""

from __future__ import annotations

import json
import time

from prometheus_client.parser import text_string_to_metric_families

from sparkctl.box import box_textfile, contract
from tests.box.test_rollout_box import box, restarts  # noqa: F401  (the fixture)


def untouched(b) -> dict:
    """Everything a restart must leave as it is: the staged candidate, the stamp, failure records, the snapshot."""
    ro = b.state / "rollout"
    paths = [b.env_dir / "vllm-coder.env.next", b.env_dir / "vllm-coder.service.next", ro / "vllm-coder.stamp",
             b.env_dir / "vllm-coder.env", b.units / "vllm-coder.service"]
    out = {str(p): p.read_text() if p.exists() else None for p in paths}
    for d in (ro / "vllm-coder.failed", b.txn_dir()):
        out[str(d)] = sorted((f.name, f.read_text()) for f in d.iterdir()) if d.exists() else None
    return out


def restart_only(b, reason="watchdog", txn="r1", **kw):
    return b.run("--restart-only", "--reason", reason, txn=txn, **kw)


def last_ok(b) -> dict:
    text = box_textfile.collect(str(b.root), str(b.root / "no-cert.pem"), str(b.state / "rollout")).text()
    return {s.labels["result"]: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name == "sparkctl_rollout_last_ok"}


def test_restart_only_restarts_the_live_configuration_not_the_staged_candidate(box):
    box.converge("qwen")
    box.stage("laguna")  # the deploy staged a candidate and has not rolled it out yet
    before = untouched(box)
    r = restart_only(box)
    assert r.returncode == 0, r.stdout + r.stderr
    assert box.live_model() == "qwen" and box.serving() == {"up": True, "model": "qwen"}
    assert untouched(box) == before  # candidate, stamp, live files, failure records: as they were
    assert restarts(box) == 1 and "daemon-reload" not in box.calls()  # nothing installed
    res = box.result()
    assert (res["outcome"], res["rc"], res["by"], res["model"]) == ("restarted", 0, "watchdog", "qwen")
    st = box.status()
    assert st["last"]["outcome"] == "restarted" and st["last"]["by"] == "watchdog"
    assert st["applied"] != st["wanted"]  # the staged candidate is still the deploy's to roll out
    assert last_ok(box) == {"restarted": 1.0}
    r = box.run(txn="t2")  # and the deploy's rollout of it still works as before
    assert r.returncode == 0 and box.live_model() == "laguna"


def test_restart_only_refuses_while_a_transaction_of_the_deploy_is_open(box):
    box.converge("qwen")
    box.stage("laguna")
    box.kill_on("restart#1")  # the deploy's transaction dies after installing the candidate, before its gate
    box.run()
    assert box.status()["phase"] == "started" and box.live_model() == "laguna"
    before, n = untouched(box), restarts(box)
    r = restart_only(box, txn="r1")
    assert r.returncode == 9 and "not restarting vllm-coder.service" in r.stdout and "transaction t1" in r.stdout
    assert restarts(box) == n and untouched(box) == before  # nothing moved: not even the drain
    assert (box.drain / "coder.conf").exists()  # the interrupted deploy's drain is the deploy's to lift
    res = box.result()
    assert res["outcome"] == "refused" and "transaction t1 of the deploy is open" in res["why"]
    assert last_ok(box) == {"refused": 0.0}
    r = box.run(txn="t2")  # the deploy's next run resumes its own transaction
    assert r.returncode == 0 and "resuming" in r.stdout and not (box.drain / "coder.conf").exists()


def test_drain_is_on_during_the_restart_and_off_after(box):
    box.converge("qwen")
    (box.sd / "running_until").write_text(str(time.time() + 60))  # requests "running" that a wedge never ends
    t0 = time.monotonic()
    r = restart_only(box)
    assert r.returncode == 0, r.stdout
    assert time.monotonic() - t0 < 30  # running requests are not waited for
    calls = box.calls()
    assert calls == ["reload nginx.service", "reset-failed vllm-coder.service", "restart vllm-coder.service",
                     "reload nginx.service"]  # drained and out of the routers (one reload), restarted, reopened
    assert not (box.drain / "coder.conf").exists() and not (box.drain / "coder.unready.conf").exists()
    box.kill_on("restart#2")  # freeze it mid-restart to look at the proxy's drain file
    restart_only(box, txn="r2")
    text = (box.drain / "coder.conf").read_text()
    assert "return 503" in text and "add_header Retry-After 7 always;" in text and "for a restart" in text
    # the routers' health path failed at once, without their health window (a wedged engine answers nobody)
    assert "return 503" in (box.drain / "coder.unready.conf").read_text()
    assert time.monotonic() - t0 < 30
    # the killed restart left both behind, and no transaction is open: the next run of the box's rollout lifts them
    n = len(box.calls())
    box.run(txn="t3")
    assert not (box.drain / "coder.conf").exists() and not (box.drain / "coder.unready.conf").exists()
    assert "reload nginx.service" in box.calls()[n:]  # and nginx was told


def test_a_gate_that_fails_records_restart_failed_and_still_lifts_the_drain(box):
    box.converge("qwen")
    box.stage("laguna")
    before = untouched(box)
    box.break_model("qwen")  # the committed configuration does not come up again
    r = restart_only(box, reason="operator")
    assert r.returncode == 6 and "does not come up again" in r.stdout and "stand-in journal line" in r.stdout
    res = box.result()
    assert (res["outcome"], res["by"]) == ("restart-failed", "operator") and "exited while starting" in res["why"]
    assert not (box.drain / "coder.conf").exists() and box.calls().count("reload nginx.service") == 2
    assert not (box.drain / "coder.unready.conf").exists()  # a failed restart never leaves it out of the routers
    assert untouched(box) == before and box.status()["failed"] is None  # never remembered as a failed candidate
    assert last_ok(box) == {"restart-failed": 0.0}  # exported as a failure: SparkRolloutFailed fires


def test_restart_cli_runs_in_the_deploys_unit_and_wait_exits_with_the_result(box):
    box.converge("qwen")
    r = box.cli("restart", "coder", *box.args("restart"), "--reason", "watchdog", "--wait")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "restarted on its committed configuration" in r.stdout
    assert "systemd-run sparkctl-rollout-coder.service" in box.calls()
    assert box.result()["txn"].endswith("-restart") and box.result()["by"] == "watchdog"
    started = json.loads(box.cli("restart", "coder", *box.args("restart")).stdout)  # without --wait: returns at once
    r = box.cli("follow", "coder", "--txn", started["txn"], "--wait")
    assert r.returncode == 0 and box.result()["txn"] == started["txn"] and box.result()["by"] == "manual"
    box.break_model("qwen")
    r = box.cli("restart", "coder", *box.args("restart"), "--wait")
    assert r.returncode == 6 and box.result()["outcome"] == "restart-failed"


def test_restart_cli_refuses_while_the_deploys_transaction_unit_runs(box):
    box.converge("qwen")
    (box.sd / "running_until").write_text(str(time.time() + 2))  # the deploy drains for 2 s
    box.stage("laguna")
    deploy = json.loads(box.cli("apply", "coder", *box.args()).stdout)
    r = box.cli("restart", "coder", *box.args("restart"), "--reason", "watchdog", "--wait")
    assert r.returncode == contract.code(contract.OWNED) and "a rollout owns the service now" in r.stderr
    assert deploy["txn"] in r.stderr
    assert sum(1 for c in box.calls() if c.startswith("systemd-run")) == 1  # never a second transaction
    r = box.cli("follow", "coder", "--txn", deploy["txn"], "--wait")
    assert r.returncode == 0 and box.live_model() == "laguna" and box.result()["outcome"] == "ready"


def test_nothing_installed_is_refused(box):
    r = restart_only(box)
    assert r.returncode == contract.code(contract.NOTHING_INSTALLED) and box.calls() == []
    assert box.result()["outcome"] == contract.NOTHING_INSTALLED
