"""The acceptance step's wiring in the deploy (docs/acceptance.md): the coder's rollout is told to wait for its verdict and
judges it inside its own op when the box waits, the Acceptance step (for a transaction found waiting later) comes
right after Health, and the verdict command follows the box to its result (tasks/acceptance.py, tasks/common.py)."""

from __future__ import annotations

import json
import os
import types

import pytest

from sparkctl.config import groupdata
from tests.conftest import typed
from tests.deploy.test_deploy_fake import run_fake


def applies(out: dict) -> dict[str, str]:
    return {c.split("apply ")[1].split()[0]: c for c in out["commands"] if "rollout.py apply" in c}


def test_only_the_coder_waits_for_a_verdict_and_acceptance_follows_health(tmp_path):
    out = run_fake("dgx", tmp_path)
    a = applies(out)
    assert "--verdict-timeout 1800 --verdict-default rollback" in a["coder"]
    assert "--verdict-timeout" not in a["embed-qwen3"] and "--verdict-timeout" not in a["embed-bge-m3"]
    order = [o.split(" | ")[0] for o in out["ops"]]
    assert order.index("Acceptance") == order.index("Health") + sum(1 for o in order if o == "Health")
    assert order.index("Acceptance") < order.index("Gateway hand-off")


@pytest.mark.parametrize("data, expect", [("ACCEPTANCE_MODE=warn", "--verdict-default commit"),
                                          ("ACCEPTANCE_ENABLED=False", None)])
def test_the_mode_sets_what_the_box_decides_alone(tmp_path, data, expect):
    coder = applies(run_fake("dgx", tmp_path, "--data", data))["coder"]
    assert (expect in coder) if expect else "--verdict-timeout" not in coder


def waiting_run(tmp_path, mode: str) -> tuple[list[str], dict]:
    """The @fake deploy whose coder rollout reports that it waits for its verdict (tests/standins/gx10_inventory.py)."""
    os.environ["FAKE_ROLLOUT_AWAITS"] = mode
    try:
        out = run_fake("dgx", tmp_path)
    finally:
        del os.environ["FAKE_ROLLOUT_AWAITS"]
    assert "waits for the acceptance verdict until 2030-03-17 17:46:40 UTC" in out["log"]
    return out["commands"], out


def test_a_first_install_is_judged_inside_its_rollout_op_through_the_proxy_set_up_before_it(tmp_path):
    """A first install is judged as soon as its box waits, not after the embedders' rollouts: on a slow box those
    outlasted the verdict's deadline, the box decided alone, and a first install's rollback removed the coder. The
    proxy step (nginx -t) therefore runs before the services."""
    cmds, out = waiting_run(tmp_path, "1")
    coder = next(i for i, c in enumerate(cmds) if "rollout.py apply coder" in c)
    verdict = next(i for i, c in enumerate(cmds) if "rollout.py verdict coder --tx fake-txn rollback" in c)
    assert any("nginx -t" in c for c in cmds[:coder])  # the proxy exists before the coder waits
    assert coder < verdict and "acceptance could not measure" in cmds[verdict]
    assert not any("rollout.py apply embed-qwen3" in c for c in cmds)  # judged before anything else moved


def test_pyinfra_hands_the_judge_its_state_and_host(monkeypatch):
    """FunctionCommand passes (state, host) only to a function whose parameters carry exactly those names."""
    from pyinfra.api import FunctionCommand

    from sparkctl.errors import SparkctlError
    from tasks import acceptance as acc

    seen, handed = {}, []

    def cannot_measure(conn, data, **k):
        handed.append(data)
        raise SparkctlError("no box here")

    monkeypatch.setattr(acc.quick, "acceptance_of", cannot_measure)
    monkeypatch.setattr(acc.hosts, "find", lambda name: object())
    monkeypatch.setattr(acc, "_decide", lambda state, host, d, name, unit, tx, decision, reason, *rest:
                        seen.update(host=host, tx=tx, decision=decision, reason=reason) or True)
    settings = types.SimpleNamespace(cfg=typed({**groupdata.load(["all", "gx10"]), "ACCEPTANCE_MODE": "fail"}))
    service = types.SimpleNamespace(name="coder", unit="vllm-coder.service")
    host = types.SimpleNamespace(name="spark-1")
    assert FunctionCommand(acc.judge_waiting(settings, service, None), ("tx-1",), {}).execute("state", host, {})
    assert seen == {"host": host, "tx": "tx-1", "decision": "rollback",
                    "reason": "acceptance could not measure: no box here"}
    assert handed[0] is settings  # the quick acceptance measures with exactly the validated settings


def test_a_flip_that_waits_is_judged_inside_its_own_rollout_op_before_anything_else_moves(tmp_path):
    """One box at a time: a coder that served before is judged from within its serial rollout op, so the next box
    (and the next service) is touched only after its verdict. Here the fake box cannot be measured -> rollback,
    and it keeps answering "waiting": the host fails, and no later rollout runs."""
    cmds, out = waiting_run(tmp_path, "serving")
    apply = next(i for i, c in enumerate(cmds) if "rollout.py apply coder" in c)
    verdict = next(i for i, c in enumerate(cmds) if "rollout.py verdict coder --tx fake-txn rollback" in c)
    assert apply < verdict and "acceptance could not measure" in cmds[verdict]
    assert not any("rollout.py apply embed-qwen3" in c for c in cmds)  # nothing else moved
    assert "still waits for its acceptance verdict on the box" in out["log"]


class StubHost:
    """What _decide and _wait use of a pyinfra host: canned answers to the verdict and follow commands."""

    name = "spark-1"
    current_op_global_arguments: dict = {}

    def __init__(self, follows: list[dict], verdict_ok: bool = True):
        self.follows, self.verdict_ok, self.commands, self.lines = follows, verdict_ok, [], []

    def run_shell_command(self, cmd, **kw):
        text = str(cmd.get_raw_value() if hasattr(cmd, "get_raw_value") else cmd)
        self.commands.append(text)
        if " verdict " in text:
            return self.verdict_ok, types.SimpleNamespace(stdout_lines=[], stderr_lines=["refused"])
        st = self.follows.pop(0)
        return True, types.SimpleNamespace(stdout_lines=[*st.pop("lines", []), "@@ " + json.dumps(st)],
                                           stderr_lines=[])

    def log(self, message, *a, **kw):
        self.lines.append(message)

    def log_styled(self, message, *a, **kw):
        self.lines.append(message)


@pytest.fixture
def decide(gx10_cfg, monkeypatch):
    import tasks.acceptance as acc

    marks, recorded = [], []
    monkeypatch.setattr(acc, "mark_ready", lambda host, handoff, ready: marks.append(ready))
    monkeypatch.setattr(acc, "_record", lambda state, host, conn, d, v: recorded.append(v) or True)
    monkeypatch.setattr("tasks.common.gevent.sleep", lambda s: None)

    def run(host, decision, reason, verdict=object()):
        ok = acc._decide(None, host, gx10_cfg, "coder", "vllm-coder.service", "tx-1", decision, reason,
                         {"dir": "x"}, verdict, None)
        return ok, marks, recorded
    return run


def running(**kw) -> dict:
    return {"offset": 0, "running": True, "done": False, "result": None, "awaiting": False, **kw}


def done(rc, outcome, message, by="control", **kw) -> dict:
    return {"offset": 9, "running": False, "done": True, "awaiting": False,
            "result": {"rc": rc, "outcome": outcome, "message": message, "txn": "tx-1",
                       "verdict": {"by": by, "decision": "x", "reason": kw.pop("why", "")}, **kw}}


def test_commit_is_followed_to_the_box_result_then_marked_ready_and_recorded(decide):
    host = StubHost([running(lines=["09:00:01 rollout: acceptance verdict ... commit"]),
                     done(0, "ready", "rollout: vllm-coder.service serves laguna")])
    ok, marks, recorded = decide(host, "commit", "acceptance passed against baseline b1")
    assert ok and marks == [True] and len(recorded) == 1
    verdict_cmd = host.commands[0]
    assert "rollout.py verdict coder --tx tx-1 commit --reason 'acceptance passed against baseline b1'" \
        in verdict_cmd
    assert sum("rollout.py follow coder --txn tx-1" in c for c in host.commands) == 2
    assert any("acceptance verdict ... commit" in x for x in host.lines)


def test_rollback_is_followed_until_the_rollback_finished_and_fails_the_host_naming_the_figure(decide):
    reason = "acceptance failed: spec-decode acceptance, 1 stream(s): 0.02 vs 0.58 [catalog floor]"
    host = StubHost([running(), running(lines=["09:00:05 draining 'coder' again before the rollback"]),
                     done(3, "rolled-back", "rollout: ROLLED BACK vllm-coder.service to qwen3.8-27b")])
    ok, marks, recorded = decide(host, "rollback", reason)
    assert not ok and marks == [False, True] and recorded == []  # not ready while it rolls back, then ready again
    assert "rollback --reason" in host.commands[0]
    failure = host.lines[-1]
    assert failure.startswith("vllm-coder.service: rolled back: " + reason) and "ROLLED BACK" in failure


def test_a_refused_verdict_that_leaves_the_box_waiting_fails_the_host(decide):
    host = StubHost([running(awaiting=True, candidate="c0ffee", verdict_deadline=1900000000)], verdict_ok=False)
    ok, marks, recorded = decide(host, "commit", "acceptance passed")
    assert not ok and recorded == [] and any("did not take the verdict commit" in x for x in host.lines)
    assert "still waits for its acceptance verdict" in host.lines[-1]


def test_a_box_that_decided_alone_is_reported_not_recorded(decide):
    host = StubHost([done(0, "ready", "serves laguna (no acceptance verdict within 300 s: the box decided alone)",
                          by="box", why="no acceptance verdict within 300 s")], verdict_ok=False)
    ok, marks, recorded = decide(host, "commit", "acceptance passed")
    assert ok and recorded == [] and marks == [True]
    assert any("kept by the box's own decision" in x for x in host.lines)


@pytest.mark.parametrize("raised,reason", [
    (lambda: __import__("sparkctl.measure.history", fromlist=["x"]).HistoryError(
        "spark-1:/var/lib/sparkctl/acceptance/history.jsonl line 3: not UTF-8 (byte 0xff at offset 812)"),
     "acceptance failed: the box's history cannot be read: spark-1:/var/lib/sparkctl/acceptance/history.jsonl "
     "line 3: not UTF-8 (byte 0xff at offset 812)"),
    (lambda: KeyError("depth"), "acceptance failed: the verdict crashed: KeyError: 'depth'")])
def test_a_history_that_cannot_be_read_or_a_crash_is_a_failed_verdict_sent_at_once(monkeypatch, raised, reason):
    """No silent wait for the box's deadline: whatever stops the judge is a rollback sent now, naming why."""
    from tasks import acceptance as acc

    seen = {}

    def fails(conn, data, **k):
        raise raised()

    monkeypatch.setattr(acc.quick, "acceptance_of", fails)
    monkeypatch.setattr(acc.hosts, "find", lambda name: object())
    monkeypatch.setattr(acc, "_decide", lambda state, host, d, name, unit, tx, decision, reason, *rest:
                        seen.update(tx=tx, decision=decision, reason=reason) or True)
    settings = types.SimpleNamespace(cfg=typed({**groupdata.load(["all", "gx10"]), "ACCEPTANCE_MODE": "fail"}))
    service = types.SimpleNamespace(name="coder", unit="vllm-coder.service")
    assert acc.judge_waiting(settings, service, None)("state", types.SimpleNamespace(name="spark-1"), "tx-1")
    assert seen == {"tx": "tx-1", "decision": "rollback", "reason": reason}


def test_the_boxes_of_one_wave_are_measured_one_after_another(monkeypatch):
    """A wave's boxes roll out together, each in its own greenlet, but the quick probe runs an asyncio loop of its
    own and only one may run in pyinfra's thread: their measurements never overlap, and each box gets its verdict."""
    import gevent

    from tasks import acceptance as acc

    measuring, overlaps, decided = set(), [], []

    def measure(conn, data, **k):
        measuring.add(conn)
        overlaps.append(len(measuring))
        gevent.sleep(0.05)
        measuring.discard(conn)
        raise acc.SparkctlError("stand-in probe: nothing measured")

    monkeypatch.setattr(acc.quick, "acceptance_of", measure)
    monkeypatch.setattr(acc.hosts, "find", lambda name: name)
    monkeypatch.setattr(acc, "_decide", lambda state, host, d, name, unit, tx, *rest: decided.append(host.name) or 1)
    settings = types.SimpleNamespace(cfg=typed({**groupdata.load(["all", "gx10"]), "ACCEPTANCE_MODE": "fail"}))
    service = types.SimpleNamespace(name="coder", unit="vllm-coder.service")
    judge = acc.judge_waiting(settings, service, None)
    boxes = [f"spark-{i}" for i in range(1, 5)]
    gevent.joinall([gevent.spawn(judge, "state", types.SimpleNamespace(name=b), "tx") for b in boxes], timeout=10)
    assert overlaps == [1, 1, 1, 1] and sorted(decided) == boxes
