#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run as root, stdlib only): change a vLLM service as a transaction that
systemd owns, so the deploy's connection can die at any instant without changing the outcome.

Every argument, its type, the setting it comes from and the commands that take it are in contract.py (ARGS; the
deploy renders its calls from the same table, and `rollout.py COMMAND --help` lists them): an argument that comes
from a setting is required, the box has no default of its own. Exit codes: contract.py OUTCOMES (a name each,
every failure its own code; the table in docs/what-happens-when.md).

    rollout.py status SERVICE...          -> ONE JSON object {service: {contract.STATUS_FIELDS}} (one systemctl
                                             call, no venv python; read-only: a TP worker reads its head's over the
                                             link)
    rollout.py apply SERVICE --port P --served NAME --kind chat|embed|none <settings> [--retry-failed]
               [--peer-status-cmd CMD --peer-timeout S] [--verdict-timeout S --verdict-default rollback|commit]
                                          -> starts `rollout.py run` as the transient unit sparkctl-rollout-SERVICE
                                             (systemd-run --collect; its output goes to the journal and to
                                             STATE_DIR/rollout/vllm-SERVICE.log), or attaches to the one already
                                             running; prints {"txn": ID, "attached": bool} and returns at once.
                                             --verdict-timeout S: after the health gate, wait S s for the
                                             acceptance verdict before committing (rollout_verdict.py)
    rollout.py verdict SERVICE --tx TX commit|rollback [--reason TEXT]
                                          -> the acceptance verdict for the transaction that waits (status says
                                             "phase": "awaiting-verdict", "tx", "verdict_deadline"); verdict-refused,
                                             and nothing written, when TX is not the one that waits
    rollout.py follow SERVICE --txn ID [--offset N] [--wait]
                                          -> the log from byte N, then a line "@@ {contract.FOLLOW_FIELDS}";
                                             --wait repeats until done and exits with the result's code, or 0
                                             when the transaction waits for its acceptance verdict and none was
                                             sent yet ("awaiting": true). Killing it changes nothing on the box.
    rollout.py restart SERVICE --port P --served NAME --kind chat|embed <settings> [--reason TEXT] [--wait]
                                          -> restarts the service on its COMMITTED configuration as installed
                                             (rollout_restart.py; the watchdog's restart of a wedged engine) in the
                                             same transient unit sparkctl-rollout-SERVICE; refuses (owned) when that
                                             unit is already active (the deploy owns the service then). Prints
                                             {"txn": ID} and returns; --wait follows it and exits with its code
    rollout.py run SERVICE --txn ID ...   -> the transaction itself (rollout_txn.py), as apply starts it
    rollout.py run SERVICE --txn ID --restart-only [--reason TEXT] ...
                                          -> the restart alone (rollout_restart.py), as restart starts it
"""

from __future__ import annotations

import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contract as c  # noqa: E402
import readiness_gate  # noqa: E402
import rollout_peer as peer  # noqa: E402
import rollout_restart as rr  # noqa: E402
import rollout_txn as tx  # noqa: E402
import rollout_verdict as verdict  # noqa: E402
from boxio import Say, read, read_json, write_atomic  # noqa: E402

RUNNING = c.UNIT_RUNNING  # the transient unit's states while a transaction runs
NO_RESULT_GRACE_S = 10  # follow --wait: once the unit is gone, how long the result file may take to appear, s


rollout_unit = c.rollout_unit


def running(service: str) -> bool:
    return readiness_gate.unit_state(rollout_unit(service)).get("ActiveState") in RUNNING


def service_status(p: tx.Paths, states: dict) -> dict:
    """One service's entry of `rollout.py status` (contract.STATUS_FIELDS)."""
    wanted = tx.candidate(p) if os.path.exists(p.env_next) and os.path.exists(p.unit_next) else ""
    known = tx.failed_record(p, wanted) if wanted else {}
    last = read_json(p.result)
    unit = states[p.unit_name]
    active = unit.get("ActiveState") == "active"
    state = read_json(p.state)
    phase = state.get("phase") or c.IDLE
    running, current = states[rollout_unit(p.service)].get("ActiveState") in RUNNING, read(p.current).decode().strip()
    return {"active": active, "applied": tx.stamp_of(p), "wanted": wanted,
            "running": running, "current": current, "phase": phase,
            "tp_unit": peer.tp_unit_of(read(p.env_next)), "tp_unit_live": peer.tp_unit_of(read(p.env)),
            **verdict.status_fields(state),
            "failed": {k: known.get(k) for k in c.FAILED_FIELDS} if known else None,
            "last": {k: last.get(k) for k in c.LAST_FIELDS} if last else None,
            "invocation": unit.get("InvocationID", "") if active else "",
            "restarting": peer.restarting(p, running, current)}


def status(a) -> int:
    states = readiness_gate.show(*[u for s in a.services for u in (tx.Paths(s).unit_name, rollout_unit(s))])
    print(json.dumps({s: service_status(tx.Paths(s), states) for s in a.services}))
    return 0


def new_txn_id(suffix: str = "") -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}{suffix}"


def start_unit(service: str, txn_id: str, header: str, description: str, run_argv: list[str]) -> tuple[bool, str]:
    """Record txn_id as the service's current transaction, start a fresh log, and start `rollout.py run_argv` as
    the transient unit sparkctl-rollout-SERVICE: (started, systemd-run's complaint)."""
    p = tx.Paths(service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)
    write_atomic(p.current, f"{txn_id}\n", 0o644)
    write_atomic(p.log, f"{header}\n", 0o640)
    setenv = [f"--setenv={k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("SPARKCTL_")]
    r = readiness_gate.run("systemd-run", f"--unit={rollout_unit(service)}", "--collect", "--quiet",
                         "--service-type=exec", f"--description={description}", *setenv, sys.executable,
                         os.path.abspath(__file__), *run_argv)
    return r.returncode == 0, r.stderr.strip()


def not_started(service: str, err: str) -> int:
    print(f"rollout: systemd-run could not start {rollout_unit(service)}: {err}", file=sys.stderr)
    return c.code(c.NOT_STARTED)


def apply(a) -> int:
    p = tx.Paths(a.service)

    def attached() -> int:
        print(json.dumps({"txn": read(p.current).decode().strip(), "attached": True}))
        return 0

    if running(a.service):
        return attached()
    txn_id = new_txn_id()
    started, err = start_unit(a.service, txn_id, f"transaction {txn_id} for {p.unit_name}",
                              f"sparkctl rollout of {p.unit_name} (transaction {txn_id})",
                              c.forward("apply", vars(a), txn=txn_id))
    if not started:
        return attached() if running(a.service) else not_started(a.service, err)  # another deploy won the race
    print(json.dumps({"txn": txn_id, "attached": False}))
    return 0


def restart(a) -> int:
    """Start the restart-only transaction in the deploy's transient unit; never attach to one already running."""
    p = tx.Paths(a.service)

    def owned(txn: str) -> int:
        print(f"rollout: not restarting {p.unit_name} (asked by {a.reason}): {rollout_unit(a.service)} is active "
              f"(transaction {txn}), so a rollout owns the service now; nothing was touched", file=sys.stderr)
        return c.code(c.OWNED)

    if running(a.service):
        return owned(read(p.current).decode().strip() or "?")
    txn_id = new_txn_id("-restart")
    started, err = start_unit(a.service, txn_id, f"transaction {txn_id} (restart only, asked by {a.reason}) for "
                              f"{p.unit_name}", f"sparkctl restart of {p.unit_name} on its committed configuration "
                              f"(transaction {txn_id}, asked by {a.reason})",
                              c.forward("restart", vars(a), txn=txn_id, restart_only=True))
    if not started:
        return owned("started meanwhile") if running(a.service) else not_started(a.service, err)  # a deploy won
    if not a.wait:
        print(json.dumps({"txn": txn_id}))
        return 0
    return follow_until_done(a.service, txn_id, 0)


def follow_once(service: str, txn_id: str, offset: int) -> dict:
    p = tx.Paths(service)
    data = read(p.log)
    if offset > len(data):
        offset = 0  # a newer transaction rewrote the log
    result = read_json(p.result)
    done = result.get("txn") == txn_id
    state = read_json(p.state)
    awaiting = not done and verdict.waiting_for_control(p.txn, state, txn_id)
    return {"text": data[offset:].decode("utf-8", "replace"), "offset": len(data), "running": running(service),
            "done": done, "result": result if done else None, "awaiting": awaiting,
            **({k: state.get(k) or None for k in c.FOLLOW_AWAITING_FIELDS} if awaiting else {})}


def follow(a) -> int:
    if a.wait:
        return follow_until_done(a.service, a.txn, a.offset)
    st = follow_once(a.service, a.txn, a.offset)
    sys.stdout.write(st.pop("text"))
    print("@@ " + json.dumps(st))
    return 0


def follow_until_done(service: str, txn_id: str, offset: int) -> int:
    """Print the log as it grows until the result: exit with its code (0 while it awaits a verdict)."""
    gone_since = None
    while True:
        st = follow_once(service, txn_id, offset)
        offset = st["offset"]
        sys.stdout.write(st["text"])
        sys.stdout.flush()
        if st["done"]:
            return int(st["result"].get("rc", c.code(c.NO_RESULT)))
        if st["awaiting"]:
            print(f"rollout: transaction {txn_id} of vllm-{service}.service passed its health gate and waits for "
                  f"its acceptance verdict until {time.strftime('%H:%M:%S', time.localtime(st['verdict_deadline']))}: "
                  f"rollout.py verdict {service} --tx {txn_id} commit|rollback [--reason TEXT]")
            return c.code(c.AWAITING)
        if not st["running"]:  # the unit is gone: give the result file a moment, then say so
            gone_since = gone_since or time.monotonic()
            if time.monotonic() - gone_since > NO_RESULT_GRACE_S:
                print(f"rollout: {rollout_unit(service)} ended without recording a result for {txn_id}; see "
                      f"journalctl -u {rollout_unit(service)}")
                return c.code(c.NO_RESULT)
        time.sleep(1)


def send_verdict(a) -> int:
    p = tx.Paths(a.service)
    rc, text = verdict.send(p, a.tx, a.decision, a.reason)
    print(text, file=sys.stderr if rc else sys.stdout)
    return rc


def run(a) -> int:
    """The transient unit's command: the transaction (rollout_txn.py), or the restart alone (rollout_restart.py)."""
    p = tx.Paths(a.service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)
    return rr.restart_committed(a, Say(p.log)) if a.restart_only else tx.execute(a, Say(p.log))


def main(argv=None) -> int:
    a = c.parse(argv, __doc__.splitlines()[0])
    commands = {"status": status, "apply": apply, "run": run, "restart": restart, "follow": follow,
                "verdict": send_verdict}
    return commands[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
