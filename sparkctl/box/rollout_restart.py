#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout.py): restart a vLLM service on its COMMITTED configuration, as
installed, through the same transient unit as the deploy's transaction (sparkctl-rollout-S), so the two never
run at once. The watchdog uses it for a wedged engine (`rollout.py restart S ... --wait`).

What it reads and touches: the live unit and env file are restarted as they are (no daemon-reload, nothing
installed); the staged candidate (.next), the snapshot, the stamp and the failed-candidate records are never
touched. It refuses while a transaction of the deploy is open (its live files may be an un-gated candidate; the
deploy's next run resumes that one). While it restarts, the served model is drained at the proxy (new requests get
503 + Retry-After) when it was serving; running requests are not waited for (a wedged engine never finishes
them). The drain is always lifted at the end. The result goes to the deploy's result file (outcome "restarted" or
"restart-failed", "by" = --reason), so `rollout.py status`, the box facts and `sparkctl status` show it.
"""

from __future__ import annotations

import os
import time

import contract as c
import rollout_drain as drain
import rollout_gate as sd
import rollout_txn as tx
from boxio import read, write_json


def restart_committed(a, say) -> int:
    """Restart a.service on what is installed, gate it, record the result; return the exit code."""
    p = tx.Paths(a.service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)
    t0 = time.monotonic()
    by = a.reason or "manual"
    result = {"txn": a.txn, "service": a.service, "unit": p.unit_name, "started": tx.now(), "by": by,
              "restart_only": True}

    def finish(outcome: str, message: str, **extra) -> int:
        result.update(rc=c.code(outcome), outcome=outcome, message=message, finished=tx.now(),
                      total_s=round(time.monotonic() - t0, 1), **extra)
        write_json(p.result, result, 0o644)
        say(message)
        return result["rc"]

    txn = tx.Txn(p, say)
    if txn.open:
        why = (f"transaction {txn.state.get('id')} of the deploy is open (phase {txn.state.get('phase')}); its "
               f"live files may be an un-gated candidate, and the deploy's next run resumes it")
        return finish(c.REFUSED, f"rollout: not restarting {p.unit_name} (asked by {by}): {why}; "
                      f"nothing was touched", why=why)
    if not (os.path.exists(p.unit) and os.path.exists(p.env)):
        why = f"{p.unit} or {p.env} does not exist"
        return finish(c.NOTHING_INSTALLED, f"rollout: not restarting {p.unit_name} (asked by {by}): no committed "
                      f"configuration is installed ({why})", why=why)
    model = tx.model_of(read(p.env))
    result.update(model=model, stamp=read(p.stamp).decode().strip())
    active = sd.unit_state(p.unit_name).get("ActiveState") == "active"
    say(f"restart of {p.unit_name} ({model}) on its committed configuration, asked by {by}")
    ok, why, took, restart_s = False, "", 0.0, 0.0
    try:
        if a.kind != "none" and active and a.drain_timeout > 0:
            reloaded, err = drain.drain_on(tx.DRAIN_DIR, a.served, a.retry_after, "a restart")
            say(f"draining {a.served!r}: new requests get 503 + Retry-After {a.retry_after} s (running requests "
                f"are not waited for)" if reloaded else f"draining {a.served!r}: nginx did not reload ({err})")
        ok, why, took, restart_s = sd.restart_and_gate(p.unit_name, p.unit_name, a, say)
    except Exception as exc:  # noqa: BLE001 - recorded as a failed restart; the drain is lifted below regardless
        ok, why = False, f"{type(exc).__name__}: {exc}"
    finally:
        drain.drain_off(tx.DRAIN_DIR, a.served)
    if ok:
        return finish(c.RESTARTED, f"rollout: {p.unit_name} restarted on its committed configuration ({model}, "
                      f"asked by {by}); ready {took:.0f} s after the restart", restart_s=round(restart_s, 1),
                      load_s=round(took, 1))
    return finish(c.RESTART_FAILED, f"rollout: {p.unit_name} does not come up again on its committed configuration "
                  f"({model}, restart asked by {by}): {why}; nothing else was changed.\n"
                  f"{sd.journal(p.unit_name, a.journal)}", why=why)
