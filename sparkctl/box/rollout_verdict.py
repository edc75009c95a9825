#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout_txn.py and rollout.py): the acceptance verdict (issue 12).

With `--verdict-timeout S` (> 0) a candidate that passed the health gate is not committed yet: the transaction
records the phase `awaiting-verdict` (with `verdict_deadline`, unix seconds, and `verdict_default`), reopens the
proxy for its served model (the control side's acceptance probe goes through the proxy) and waits up to S s for a
verdict file in its txn dir, written by `rollout.py verdict SERVICE --tx TX commit|rollback [--reason TEXT]`:

  commit      the normal commit (stamp, snapshot dropped)
  rollback    exactly the failed-gate path: the candidate is remembered as failed with the reason, the proxy
              drains again, the snapshot is restored, restarted and gated; the result is "rolled-back"
  no verdict  by the deadline: the box decides alone with --verdict-default (rollback in ACCEPTANCE_MODE fail,
              commit in warn), and the result says so and why

A run that finds its transaction in `awaiting-verdict` (the rollout unit died, the box rebooted) gates the
candidate again and waits on until the recorded deadline, not a new one.
"""

from __future__ import annotations

import json
import os
import secrets
import time

import rollout_drain as drain
import rollout_gate as sd

AWAITING = "awaiting-verdict"
DECISIONS = ("commit", "rollback")
VERDICT_FILE = "verdict.json"  # in the txn dir (root 0700), written atomically by `rollout.py verdict`


def _read_json(path: str) -> dict:
    try:
        with open(path, "rb") as f:
            return json.loads(f.read() or b"{}")
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return {}


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def ids(state: dict) -> set[str]:
    """The ids a verdict may name: the waiting run's, and the run it resumed (same candidate, same wait)."""
    return {str(x) for x in (state.get("id"), state.get("resumed_wait")) if x}


def pending(txn_dir: str, state: dict) -> dict:
    """The verdict written for this waiting transaction ({} while none)."""
    v = _read_json(f"{txn_dir}/{VERDICT_FILE}")
    return v if v.get("verdict") in DECISIONS and str(v.get("tx")) in ids(state) else {}


def status_fields(state: dict) -> dict:
    """What `rollout.py status` adds: the open transaction's id; while it waits, its deadline, default and the
    probe key that lets the acceptance probe through the drain (status runs as root)."""
    waiting = state.get("phase") == AWAITING
    return {"tx": state.get("id") if state.get("phase") else None,
            "verdict_deadline": state.get("verdict_deadline") if waiting else None,
            "verdict_default": state.get("verdict_default") if waiting else None,
            "probe_key": state.get("probe_key") or None if waiting else None}


def waiting_for_control(txn_dir: str, state: dict, txn_id: str) -> bool:
    """`rollout.py follow`: transaction txn_id waits for a verdict and none was written yet (the deploy's op may
    end here; once a verdict is written, following goes on until the result)."""
    return state.get("phase") == AWAITING and txn_id in ids(state) and not pending(txn_dir, state)


def send(txn_dir: str, unit: str, tx: str, decision: str, reason: str = "") -> tuple[int, str]:
    """`rollout.py verdict`: write the verdict for transaction tx, only if tx is the one that waits."""
    state = _read_json(f"{txn_dir}/state.json")
    if state.get("phase") != AWAITING:
        return 1, (f"rollout: no transaction of {unit} waits for a verdict (phase {state.get('phase') or 'none'}"
                   f"{', transaction ' + str(state.get('id')) if state.get('id') else ''}); nothing written")
    if tx not in ids(state):
        return 1, (f"rollout: transaction {tx} does not wait for a verdict; {unit}'s waiting transaction is "
                   f"{state.get('id')}; nothing written")
    before = pending(txn_dir, state)
    if before and before["verdict"] != decision:
        return 1, (f"rollout: transaction {tx} of {unit} already has the verdict {before['verdict']} "
                   f"({before.get('at')}); nothing written")
    body = {"tx": tx, "verdict": decision, "reason": " ".join(str(reason).split()),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = f"{txn_dir}/.{VERDICT_FILE}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(body) + "\n")
        f.flush()
        os.fsync(f.fileno())
    os.rename(tmp, f"{txn_dir}/{VERDICT_FILE}")
    return 0, json.dumps({"tx": tx, "verdict": decision, "written": True})


def annotate(message: str, decided: dict) -> str:
    """The result's message, saying when the box decided alone."""
    return f"{message} ({decided['reason']})" if decided.get("by") == "box" else message


def wait(txn, a, say, drain_dir: str, closed: bool = False) -> tuple[bool, str]:
    """After the health gate (or on resume): wait for the verdict; (True, "") = commit, (False, why) = roll back.

    txn: rollout_txn.Txn (state, set_phase, p); a: the run's arguments (verdict_timeout, verdict_default, served,
    port, kind, interval, timeout, drain_timeout, retry_after). closed: the service served before this change, so
    clients keep getting 503 + Retry-After while it is judged, and only the acceptance probe, carrying the
    transaction's probe key (status and follow report it to root), is let through; a first install (nothing to
    protect, and the deploy's health step needs the path) is simply reopened."""
    p, state = txn.p, txn.state
    if state.get("phase") == AWAITING:  # resumed: the same wait, until the deadline it recorded
        old = state.get("id")
        txn.set_phase(AWAITING, id=a.txn, resumed_wait=old)
        say(f"rollout: resuming transaction {old}, which waited for its acceptance verdict (until "
            f"{_clock(float(state['verdict_deadline']))}); gating {p.unit_name} again")
        ok, why, took = sd.gate(p.unit_name, a.port, a.served, a.kind, a.timeout, a.interval)
        if not ok:
            return _decided(txn, "rollback", "box", f"the candidate is not healthy after the interruption: {why}")
    else:
        deadline = time.time() + float(a.verdict_timeout)
        txn.set_phase(AWAITING, verdict_deadline=round(deadline, 3), verdict_default=a.verdict_default,
                      verdict_timeout=a.verdict_timeout, probe_key=secrets.token_hex(16) if closed else "")
        say(f"rollout: {p.unit_name} passed its health gate; waiting up to {a.verdict_timeout:.0f} s (until "
            f"{_clock(deadline)}) for the acceptance verdict of transaction {a.txn}; with none, the box decides "
            f"alone: {a.verdict_default}")
    key = txn.state.get("probe_key") or ""
    if key:  # the candidate passed health; its probe goes through the proxy, clients wait for the verdict
        reloaded, err = drain.drain_on(drain_dir, a.served, a.retry_after, "its acceptance check", except_key=key)
        say(f"{a.served!r} stays drained while it is judged; only the acceptance probe passes" if reloaded else
            f"drain with the acceptance probe's exemption: nginx did not reload ({err})")
    else:  # a first install: nothing served before, and the deploy's health step goes through the proxy
        reloaded, err = drain.drain_off(drain_dir, a.served)
        if not reloaded:
            say(f"reopening {a.served!r} at the proxy: nginx did not reload ({err})")
    deadline, default = float(txn.state["verdict_deadline"]), txn.state.get("verdict_default") or "rollback"
    while True:
        v = pending(p.txn, txn.state)
        if v:
            decision = _decided(txn, v["verdict"], "control", v.get("reason") or "")
            break
        if time.time() >= deadline:
            limit = txn.state.get("verdict_timeout")
            why = f"no acceptance verdict within {float(limit):.0f} s" if limit else "no acceptance verdict in time"
            decision = _decided(txn, default, "box", why)
            break
        time.sleep(max(0.05, min(float(a.interval), deadline - time.time())))
    if not decision[0] and a.kind != "none" and a.drain_timeout > 0:  # back to the drained path of a failed gate
        reloaded, err = drain.drain_on(drain_dir, a.served, a.retry_after)
        say(f"draining {a.served!r} again before the rollback" if reloaded else
            f"draining {a.served!r}: nginx did not reload ({err})")
        drain.wait_idle(a.port, a.drain_timeout, a.interval, say)
    return decision


def _decided(txn, decision: str, by: str, reason: str) -> tuple[bool, str]:
    if by == "box":
        reason = f"{reason}: the box decided alone: {decision} (--verdict-default)"
    txn.state["verdict"] = {"decision": decision, "by": by, "reason": reason, "at": _clock(time.time())}
    txn.set_phase(AWAITING)  # recorded before it is acted on
    who = "from the control side" if by == "control" else "decided by the box"
    txn.say(f"rollout: acceptance verdict for {txn.p.unit_name}: {decision} ({who}){': ' + reason if reason else ''}")
    if decision == "commit":
        return True, ""
    return False, f"acceptance verdict rollback: {reason}" if by == "control" else reason
