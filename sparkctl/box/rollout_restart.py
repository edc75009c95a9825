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

import rollout_drain as drain
import rollout_gate as sd
import rollout_txn as tx

# exit codes (rollout.py documents them): 0 restarted and ready, 2 nothing installed, 6 the committed configuration
# does not come up again, 9 refused: a transaction of the deploy is open
OK, NOTHING_INSTALLED, RESTART_FAILED, TXN_OPEN = tx.OK, 2, tx.RESTART_FAILED, 9


def restart_committed(a, say) -> int:
    """Restart a.service on what is installed, gate it, record the result; return the exit code."""
    p = tx.Paths(a.service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)
    t0 = time.monotonic()
    by = a.reason or "manual"
    result = {"txn": a.txn, "service": a.service, "unit": p.unit_name, "started": tx.now(), "by": by,
              "restart_only": True}

    def finish(rc: int, outcome: str, message: str, **extra) -> int:
        result.update(rc=rc, outcome=outcome, message=message, finished=tx.now(),
                      total_s=round(time.monotonic() - t0, 1), **extra)
        tx.write_json(p.result, result)
        say(message)
        return rc

    txn = tx.Txn(p, say)
    if txn.open:
        why = (f"transaction {txn.state.get('id')} of the deploy is open (phase {txn.state.get('phase')}); its "
               f"live files may be an un-gated candidate, and the deploy's next run resumes it")
        return finish(TXN_OPEN, "refused", f"rollout: not restarting {p.unit_name} (asked by {by}): {why}; "
                      f"nothing was touched", why=why)
    if not (os.path.exists(p.unit) and os.path.exists(p.env)):
        why = f"{p.unit} or {p.env} does not exist"
        return finish(NOTHING_INSTALLED, "nothing-installed", f"rollout: not restarting {p.unit_name} (asked by "
                      f"{by}): no committed configuration is installed ({why})", why=why)
    model = tx.model_of(tx.read(p.env))
    result.update(model=model, stamp=tx.read(p.stamp).decode().strip())
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
        return finish(OK, "restarted", f"rollout: {p.unit_name} restarted on its committed configuration ({model}, "
                      f"asked by {by}); ready {took:.0f} s after the restart", restart_s=round(restart_s, 1),
                      load_s=round(took, 1))
    return finish(RESTART_FAILED, "restart-failed",
                  f"rollout: {p.unit_name} does not come up again on its committed configuration ({model}, restart "
                  f"asked by {by}): {why}; nothing else was changed.\n{sd.journal(p.unit_name, a.journal)}", why=why)
