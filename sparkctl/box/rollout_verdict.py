#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout_txn.py and rollout.py): the acceptance verdict.

With `--verdict-timeout S` (> 0) a candidate that passed the health gate is not committed yet: the transaction
records the phase `awaiting-verdict` (with `verdict_deadline`, unix seconds, and `verdict_default`) and waits up
to S s for a verdict file; meanwhile a service that served before stays drained for clients at the proxy, which
lets through only the control side's acceptance probe carrying the transaction's probe key (a first install, with
nothing to protect, is reopened). The verdict file is in its txn dir, written by
`rollout.py verdict SERVICE --tx TX commit|rollback [--reason TEXT]`:

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
import secrets
import time

import contract as c
import drain
import readiness_gate
from boxio import read_json, write_atomic

VERDICT_FILE = "verdict.json"  # in the txn dir (root 0700), written atomically by `rollout.py verdict`


def _clock(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def ids(state: dict) -> set[str]:
    """The ids a verdict may name: the waiting run's, and the run it resumed (same candidate, same wait)."""
    return {str(x) for x in (state.get("id"), state.get("resumed_wait")) if x}


def pending(txn_dir: str, state: dict) -> dict:
    """The verdict written for this waiting transaction ({} while none)."""
    v = read_json(f"{txn_dir}/{VERDICT_FILE}")
    return v if v.get("verdict") in c.DECISIONS and str(v.get("tx")) in ids(state) else {}


def status_fields(state: dict) -> dict:
    """What `rollout.py status` adds: the open transaction's id; while it waits, its deadline, default and the
    probe key that lets the acceptance probe through the drain (status runs as root)."""
    waiting = state.get("phase") == c.AWAITING_VERDICT
    return {"tx": state.get("id") if state.get("phase") else None,
            "verdict_deadline": state.get("verdict_deadline") if waiting else None,
            "verdict_default": state.get("verdict_default") if waiting else None,
            "probe_key": state.get("probe_key") or None if waiting else None}


def waiting_for_control(txn_dir: str, state: dict, txn_id: str) -> bool:
    """`rollout.py follow`: transaction txn_id waits for a verdict and none was written yet (the deploy's op may
    end here; once a verdict is written, following goes on until the result)."""
    return state.get("phase") == c.AWAITING_VERDICT and txn_id in ids(state) and not pending(txn_dir, state)


def send(p, tx: str, decision: str, reason: str = "") -> tuple[int, str]:
    """`rollout.py verdict`: write the verdict for transaction tx of the service whose files are p
    (contract.Paths), only if tx is the one that waits (else the exit code of VERDICT_REFUSED, and nothing
    written)."""
    refused = c.code(c.VERDICT_REFUSED)
    txn_dir, unit = p.txn, p.unit_name
    state = read_json(p.state)
    if state.get("phase") != c.AWAITING_VERDICT:
        return refused, (f"rollout: no transaction of {unit} waits for a verdict (phase {state.get('phase') or 'none'}"
                   f"{', transaction ' + str(state.get('id')) if state.get('id') else ''}); nothing written")
    if tx not in ids(state):
        return refused, (f"rollout: transaction {tx} does not wait for a verdict; {unit}'s waiting transaction is "
                   f"{state.get('id')}; nothing written")
    before = pending(txn_dir, state)
    if before and before["verdict"] != decision:
        return refused, (f"rollout: transaction {tx} of {unit} already has the verdict {before['verdict']} "
                   f"({before.get('at')}); nothing written")
    body = {"tx": tx, "verdict": decision, "reason": " ".join(str(reason).split()),
            "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    write_atomic(f"{txn_dir}/{VERDICT_FILE}", json.dumps(body) + "\n", 0o600)
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
    if txn.state.get("phase") == c.AWAITING_VERDICT:  # resumed: the same wait, until the deadline it recorded
        healthy, why = _resume(txn, a, say)
        if not healthy:
            return _decided(txn, "rollback", "box", f"the candidate is not healthy after the interruption: {why}")
    else:
        _start(txn, a, say, closed)
    _open_for_judging(txn, a, say, drain_dir)
    decision = _await(txn, a)
    if not decision[0] and a.kind != "none" and a.drain_timeout > 0:  # back to the drained path of a failed gate
        reloaded, err = drain.drain_on(drain_dir, a.served, a.retry_after)
        say(f"draining {a.served!r} again before the rollback" if reloaded else
            f"draining {a.served!r}: nginx did not reload ({err})")
        drain.wait_idle(a.port, a.drain_timeout, a.interval, say)
    return decision


def _resume(txn, a, say) -> tuple[bool, str]:
    """Take over the wait of the run that died; gate the candidate again: (healthy, why not)."""
    old = txn.state.get("id")
    txn.set_phase(c.AWAITING_VERDICT, id=a.txn, resumed_wait=old)
    say(f"rollout: resuming transaction {old}, which waited for its acceptance verdict (until "
        f"{_clock(float(txn.state['verdict_deadline']))}); gating {txn.p.unit_name} again")
    ok, why, _ = readiness_gate.gate(txn.p.unit_name, a)
    return ok, why


def _start(txn, a, say, closed: bool) -> None:
    deadline = time.time() + float(a.verdict_timeout)
    txn.set_phase(c.AWAITING_VERDICT, verdict_deadline=round(deadline, 3), verdict_default=a.verdict_default,
                  verdict_timeout=a.verdict_timeout, probe_key=secrets.token_hex(16) if closed else "")
    say(f"rollout: {txn.p.unit_name} passed its health gate; waiting up to {a.verdict_timeout:.0f} s (until "
        f"{_clock(deadline)}) for the acceptance verdict of transaction {a.txn}; with none, the box decides "
        f"alone: {a.verdict_default}")


def _open_for_judging(txn, a, say, drain_dir: str) -> None:
    key = txn.state.get("probe_key") or ""
    if key:  # the candidate passed health; its probe goes through the proxy, clients wait for the verdict
        reloaded, err = drain.drain_on(drain_dir, a.served, a.retry_after, "its acceptance check", except_key=key)
        say(f"{a.served!r} stays drained while it is judged; only the acceptance probe passes" if reloaded else
            f"drain with the acceptance probe's exemption: nginx did not reload ({err})")
        return
    # a first install: nothing served before, and the deploy's health step goes through the proxy
    reloaded, err = drain.drain_off(drain_dir, a.served)
    if not reloaded:
        say(f"reopening {a.served!r} at the proxy: nginx did not reload ({err})")


def _await(txn, a) -> tuple[bool, str]:
    """Poll for the verdict until the recorded deadline; with none by then, the recorded default decides."""
    deadline, default = float(txn.state["verdict_deadline"]), txn.state.get("verdict_default") or "rollback"
    while True:
        v = pending(txn.p.txn, txn.state)
        if v:
            return _decided(txn, v["verdict"], "control", v.get("reason") or "")
        if time.time() >= deadline:
            limit = txn.state.get("verdict_timeout")
            why = f"no acceptance verdict within {float(limit):.0f} s" if limit else "no acceptance verdict in time"
            return _decided(txn, default, "box", why)
        time.sleep(max(0.05, min(float(a.interval), deadline - time.time())))


def _decided(txn, decision: str, by: str, reason: str) -> tuple[bool, str]:
    if by == "box":
        reason = f"{reason}: the box decided alone: {decision} (--verdict-default)"
    txn.state["verdict"] = {"decision": decision, "by": by, "reason": reason, "at": _clock(time.time())}
    txn.set_phase(c.AWAITING_VERDICT)  # recorded before it is acted on
    who = "from the control side" if by == "control" else "decided by the box"
    txn.say(f"rollout: acceptance verdict for {txn.p.unit_name}: {decision} ({who}){': ' + reason if reason else ''}")
    if decision == "commit":
        return True, ""
    return False, f"acceptance verdict rollback: {reason}" if by == "control" else reason
