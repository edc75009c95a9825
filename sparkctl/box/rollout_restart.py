#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout.py): restart a vLLM service on its COMMITTED configuration, as
installed, through the same transient unit as the deploy's transaction (sparkctl-rollout-S), so the two never
run at once. The watchdog uses it for a wedged engine (`rollout.py restart S ... --wait`).

What it reads and touches: the live unit and env file are restarted as they are (no daemon-reload, nothing
installed); the staged candidate (.next), the snapshot, the stamp and the failed-candidate records are never
touched. It refuses while a transaction of the deploy is open (its live files may be an un-gated candidate; the
deploy's next run resumes that one). While it restarts, the served model is drained at the proxy (new requests get
503 + Retry-After) when it was serving; running requests are not waited for (a wedged engine never finishes
them); the served model's router health path fails at the same moment, without waiting for the routers' health
window (a wedged engine answers nobody, so the routers' own checks and retries already fail it). Both are always
lifted at the end. The result goes to the deploy's result file (outcome "restarted" or
"restart-failed", "by" = --reason), so `rollout.py status`, the box facts and `sparkctl status` show it.

Tensor-parallel (the live env file carries SPARKCTL_TP_UNIT): the pair restarts as one unit, never the head alone
(rollout_peer.py: the head announces it and waits for the worker's part; the worker's part, --kind none, follows the
head's). A head asked without --peer-status-cmd refuses: it has no way to bring its worker along.
"""

from __future__ import annotations

import os
import time

import contract as c
import drain
import readiness_gate
import rollout_peer as peer
import rollout_txn as tx
from boxio import read, write_json


class Restart:
    """One restart-only run: its arguments, the service's files, and the result it records."""

    def __init__(self, a, say):
        self.a, self.say, self.p = a, say, tx.Paths(a.service)
        self.t0, self.by = time.monotonic(), a.reason or "manual"
        self.model, self.tp = "", ""
        self.result = {"txn": a.txn, "service": a.service, "unit": self.p.unit_name, "started": tx.now(),
                       "by": self.by, "restart_only": True}

    def finish(self, outcome: str, message: str, **extra) -> int:
        peer.unmark(self.p)
        self.result.update(rc=c.code(outcome), outcome=outcome, message=message, finished=tx.now(),
                           total_s=round(time.monotonic() - self.t0, 1), **extra)
        write_json(self.p.result, self.result, 0o644)
        self.say(message)
        return self.result["rc"]

    def not_restarting(self, outcome: str, why: str) -> int:
        return self.finish(outcome, f"rollout: not restarting {self.p.unit_name} (asked by {self.by}): {why}; "
                           f"nothing was touched", why=why)

    def refusal(self) -> int | None:
        """Refused before anything is read from the service: a deploy's transaction, or nothing installed."""
        p, txn = self.p, tx.Txn(self.p, self.say)
        if txn.open:
            return self.not_restarting(c.REFUSED, f"transaction {txn.state.get('id')} of the deploy is open (phase "
                                       f"{txn.state.get('phase')}); its live files may be an un-gated candidate, "
                                       f"and the deploy's next run resumes it")
        if not (os.path.exists(p.unit) and os.path.exists(p.env)):
            return self.not_restarting(c.NOTHING_INSTALLED, f"no committed configuration is installed ({p.unit} or "
                                       f"{p.env} does not exist)")
        env = read(p.env)
        self.model, self.tp = tx.model_of(env), c.tp_unit_of(env)
        self.result.update(model=self.model, stamp=tx.stamp_of(p))
        if self.tp and self.a.kind != "none" and not self.a.peer_status_cmd:
            return self.not_restarting(c.REFUSED, "a tensor-parallel head restarts only together with its worker, "
                                       "and no --peer-status-cmd says how to reach it")
        return None


def restart_committed(a, say) -> int:
    """Restart a.service on what is installed, gate it, record the result; return the exit code. Tensor-parallel:
    the head leads a pair restart, the worker (--kind none) follows the head's."""
    os.makedirs(tx.Paths(a.service).dir, mode=0o755, exist_ok=True)
    r = Restart(a, say)
    refused = r.refusal()
    if refused is not None:
        return refused
    if a.kind == "none":
        return follow_pair_restart(r)
    if r.tp:
        refused = lead_pair_restart(r)
        if refused is not None:
            return refused
    return restart_and_record(r)


def lead_pair_restart(r: Restart) -> int | None:
    """The head: refuse unless the worker can be read and owns nothing; announce the pair restart and wait until
    the worker's part follows it (None: go on and restart the head)."""
    a, say = r.a, r.say
    worker, err = peer.peer_status(a.peer_status_cmd, a.service, a.peer_call_timeout)
    if worker is None:
        return r.not_restarting(c.PEER_ABSENT, f"a tensor-parallel head restarts only with its worker, and {err}")
    problem = peer.pair_problem(worker, r.tp)
    if problem:
        return r.not_restarting(c.REFUSED, problem)
    peer.mark(r.p, a.txn, a.txn)
    say(f"tensor-parallel: pair restart {a.txn} of unit {r.tp[:12]}: waiting for the worker's part to start")
    verdict, why = peer.poll(a, lambda w: peer.worker_follows(w, a.txn), (peer.GO,), a.peer_timeout, say,
                             who="the worker")
    if verdict != peer.GO:
        return r.not_restarting(c.PEER_ABSENT, f"the worker's part of the pair restart did not start ({why}), and a "
                                f"tensor-parallel head never restarts alone")
    say(f"tensor-parallel: {why}; restarting the head")
    return None


def restart_and_record(r: Restart) -> int:
    a, p, say = r.a, r.p, r.say
    active = readiness_gate.unit_state(p.unit_name).get("ActiveState") == "active"
    say(f"restart of {p.unit_name} ({r.model}) on its committed configuration, asked by {r.by}")
    ok, why, took, restart_s = False, "", 0.0, 0.0
    try:
        if a.kind != "none" and active:  # out of the routers at once: a wedged engine answers nobody anyway
            drain.unready_on(tx.DRAIN_DIR, a.served, reload=a.drain_timeout <= 0)  # else the drain's reload
        if a.kind != "none" and active and a.drain_timeout > 0:
            reloaded, err = drain.drain_on(tx.DRAIN_DIR, a.served, a.retry_after, "a restart")
            say(f"draining {a.served!r}: new requests get 503 + Retry-After {a.retry_after} s (running requests "
                f"are not waited for)" if reloaded else f"draining {a.served!r}: nginx did not reload ({err})")
        ok, why, took, restart_s, r.result["cold_start"] = tx.gated_restart(p, p.unit_name, a, say)
    except Exception as exc:  # noqa: BLE001 - recorded as a failed restart; the drain is lifted below regardless
        ok, why = False, f"{type(exc).__name__}: {exc}"
    finally:
        drain.reopen(tx.DRAIN_DIR, a.served)
    if ok:
        return r.finish(c.RESTARTED, f"rollout: {p.unit_name} restarted on its committed configuration ({r.model}, "
                        f"asked by {r.by}); ready {took:.0f} s after the restart", restart_s=round(restart_s, 1),
                        load_s=round(took, 1))
    return r.finish(c.RESTART_FAILED, f"rollout: {p.unit_name} does not come up again on its committed configuration "
                    f"({r.model}, restart asked by {r.by}): {why}; nothing else was changed.\n"
                    f"{readiness_gate.journal(p.unit_name, a.journal)}", why=why)


def follow_pair_restart(r: Restart) -> int:
    """The worker's part: only while the head runs a pair restart of the same unit. Restart the worker's engine at
    once, then end with the head's result (its gate is a real request through both ranks)."""
    a, p, say = r.a, r.p, r.say
    head, err = peer.peer_status(a.peer_status_cmd, a.service, a.peer_call_timeout)
    pair, why = peer.head_restart(head, r.tp) if head is not None else ("", err)
    if not pair:
        return r.not_restarting(c.HEAD_ABSENT, f"a tensor-parallel worker restarts only with its head, and {why}")
    peer.mark(p, a.txn, pair)
    say(f"tensor-parallel: {why}; restarting the worker")
    ok, why, took, restart_s, _ = tx.gated_restart(p, f"{p.unit_name} (worker)", a, say, record=False)
    if ok:
        verdict, why = peer.poll(a, lambda h: peer.restart_result(h, pair), (peer.COMMITTED,), a.peer_timeout, say,
                                 alive=peer.worker_alive(p.unit_name))
        ok = verdict == peer.COMMITTED
        say(f"tensor-parallel: {why}")
        if ok:
            tx.mark_warm(p, time.monotonic() - r.t0)
    if ok:
        return r.finish(c.RESTARTED, f"rollout: {p.unit_name} (worker) restarted with its head's pair restart {pair} "
                        f"({r.model}, asked by {r.by}); the pair serves again", restart_s=round(restart_s, 1))
    return r.finish(c.RESTART_FAILED, f"rollout: the pair restart {pair} failed for {p.unit_name} (worker, "
                    f"{r.model}): {why}", why=why, restart_s=round(restart_s, 1))
