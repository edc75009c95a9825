#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run as root, stdlib only): change a vLLM service as a transaction that
systemd owns, so the deploy's connection can die at any instant without changing the outcome.

    rollout.py status SERVICE...          -> ONE JSON object {service: {active, applied, wanted, running, phase,
                                             failed, last, tp_unit, tp_unit_live}} (one systemctl call, no
                                             venv python; read-only: a TP worker reads its head's over the link)
    rollout.py apply SERVICE --port P --served NAME --kind chat|embed|none [--timeout S] [--interval S]
               [--journal N] [--drain-timeout S] [--retry-after S] [--retry-failed] [--keep-failed N]
               [--verdict-timeout S --verdict-default rollback|commit]
                                          -> starts `rollout.py run` as the transient unit sparkctl-rollout-SERVICE
                                             (systemd-run --collect; its output goes to the journal and to
                                             STATE_DIR/rollout/vllm-SERVICE.log), or attaches to the one already
                                             running; prints {"txn": ID, "attached": bool} and returns at once.
                                             --verdict-timeout S > 0: after the health gate, wait S s for the
                                             acceptance verdict before committing (rollout_verdict.py)
    rollout.py verdict SERVICE --tx TX commit|rollback [--reason TEXT]
                                          -> the acceptance verdict for the transaction that waits (status says
                                             "phase": "awaiting-verdict", "tx", "verdict_deadline"); exit 1, and
                                             nothing written, when TX is not the one that waits
    rollout.py follow SERVICE --txn ID [--offset N] [--wait]
                                          -> the log from byte N, then a line "@@ {offset, done, running, result}";
                                             --wait repeats until done and exits with the result's code, or 0
                                             when the transaction waits for its acceptance verdict and none was
                                             sent yet ("awaiting": true). Killing it changes nothing on the box.
    rollout.py restart SERVICE --port P --served NAME --kind chat|embed [--timeout S] [--interval S]
               [--journal N] [--drain-timeout S] [--retry-after S] [--gate-max-tokens N]
               [--gate-request-timeout S] [--reason TEXT] [--wait]
                                          -> restarts the service on its COMMITTED configuration as installed
                                             (rollout_restart.py; the watchdog's restart of a wedged engine) in the
                                             same transient unit sparkctl-rollout-SERVICE; refuses with exit 10 when
                                             that unit is already active (the deploy owns the service then). Prints
                                             {"txn": ID} and returns; --wait follows it and exits with its code
    rollout.py run SERVICE --txn ID ...   -> the transaction itself (rollout_txn.py); exit codes: 0 ready or
                                             unchanged, 2 nothing staged / no previous configuration, 3 rolled back,
                                             4 rollback failed too, 5 rejected before anything stopped, 6 the
                                             committed configuration does not come up again, 7 this
                                             candidate failed before (not retried without --retry-failed),
                                             11 a tensor-parallel worker whose head failed or never came
                                             (the worker changed nothing)
    rollout.py run SERVICE --txn ID --restart-only [--reason TEXT] ...
                                          -> the restart alone (rollout_restart.py); exit codes: 0 restarted and
                                             ready, 2 nothing installed, 6 it does not come up again, 9 refused: a
                                             transaction of the deploy is open
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import rollout_gate as sd  # noqa: E402
import rollout_peer as peer  # noqa: E402
import rollout_restart as rr  # noqa: E402
import rollout_txn as tx  # noqa: E402
import rollout_verdict as verdict  # noqa: E402

OWNED = 10  # `restart`: sparkctl-rollout-SERVICE is already active, a transaction owns the service


def rollout_unit(service: str) -> str:
    return f"sparkctl-rollout-{service}.service"


class Say:
    """Log lines to the transaction log and to stdout; a closed or broken stdout never stops a rollback."""

    def __init__(self, path: str):
        self.path = path

    def __call__(self, message: str) -> None:
        line = f"{time.strftime('%H:%M:%S')} {message}\n"
        try:
            with open(self.path, "a") as f:
                f.write(line)
        except OSError:
            pass
        try:
            sys.stdout.write(line)
            sys.stdout.flush()
        except (OSError, ValueError, AttributeError):
            pass


def status(services: list[str]) -> dict:
    units = [u for s in services for u in (f"vllm-{s}.service", rollout_unit(s))]
    states = sd.show(*units)
    out = {}
    for s in services:
        p = tx.Paths(s)
        wanted = tx.candidate(p) if os.path.exists(p.env_next) and os.path.exists(p.unit_next) else ""
        known = tx.failed_record(p, wanted) if wanted else {}
        last = tx.read_json(p.result)
        active = states[p.unit_name].get("ActiveState") == "active"
        state = tx.read_json(f"{p.txn}/state.json")
        phase = state.get("phase", "")
        tp_unit, tp_live = peer.tp_unit_of(tx.read(p.env_next)), peer.tp_unit_of(tx.read(p.env))
        out[s] = {"active": active, "applied": tx.applied(p, wanted, active, bool(phase)), "wanted": wanted,
                  "running": states[rollout_unit(s)].get("ActiveState") in ("active", "activating", "reloading"),
                  "current": tx.read(p.current).decode().strip(),
                  "phase": phase, "tp_unit": tp_unit, "tp_unit_live": tp_live, **verdict.status_fields(state),
                  "failed": {k: known.get(k) for k in ("at", "why", "model")} if known else None,
                  "last": {k: last.get(k) for k in ("txn", "outcome", "finished", "message", "candidate", "by")}
                  if last else None}
    return out


def run_args(a) -> list[str]:
    args = ["--port", str(a.port), "--served", a.served, "--kind", a.kind, "--timeout", str(a.timeout),
            "--interval", str(a.interval), "--journal", str(a.journal), "--drain-timeout", str(a.drain_timeout),
            "--retry-after", str(a.retry_after), "--keep-failed", str(a.keep_failed),
            "--gate-max-tokens", str(a.gate_max_tokens), "--gate-request-timeout", str(a.gate_request_timeout),
            "--worker-settle", str(a.worker_settle)]
    if a.peer_status_cmd:
        args += ["--peer-status-cmd", a.peer_status_cmd, "--peer-timeout", str(a.peer_timeout),
                 "--peer-call-timeout", str(a.peer_call_timeout)]
    args += ["--verdict-timeout", str(a.verdict_timeout), "--verdict-default", a.verdict_default]
    return args + (["--retry-failed"] if a.retry_failed else [])


def apply(a) -> int:
    p = tx.Paths(a.service)
    unit = rollout_unit(a.service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)
    if sd.unit_state(unit).get("ActiveState") in ("active", "activating"):
        print(json.dumps({"txn": tx.read(p.current).decode().strip(), "attached": True}))
        return 0
    txn_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}"
    tx.write_atomic(p.current, f"{txn_id}\n".encode(), 0o644)
    tx.write_atomic(p.log, f"transaction {txn_id} for vllm-{a.service}.service\n".encode(), 0o640)
    setenv = [f"--setenv={k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("SPARKCTL_")]
    r = sd.run("systemd-run", f"--unit={unit}", "--collect", "--quiet", "--service-type=exec",
               f"--description=sparkctl rollout of vllm-{a.service}.service (transaction {txn_id})", *setenv,
               sys.executable, os.path.abspath(__file__), "run", a.service, "--txn", txn_id, *run_args(a))
    if r.returncode != 0:
        if sd.unit_state(unit).get("ActiveState") in ("active", "activating"):  # another deploy won the race
            print(json.dumps({"txn": tx.read(p.current).decode().strip(), "attached": True}))
            return 0
        print(f"rollout: systemd-run could not start {unit}: {r.stderr.strip()}", file=sys.stderr)
        return 1
    print(json.dumps({"txn": txn_id, "attached": False}))
    return 0


def restart_args(a) -> list[str]:
    return ["--port", str(a.port), "--served", a.served, "--kind", a.kind, "--timeout", str(a.timeout),
            "--interval", str(a.interval), "--journal", str(a.journal), "--drain-timeout", str(a.drain_timeout),
            "--retry-after", str(a.retry_after), "--gate-max-tokens", str(a.gate_max_tokens),
            "--gate-request-timeout", str(a.gate_request_timeout), "--reason", a.reason]


def restart(a) -> int:
    """Start the restart-only transaction in the deploy's transient unit; never attach to one already running."""
    p = tx.Paths(a.service)
    unit = rollout_unit(a.service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)

    def owned(txn: str) -> int:
        print(f"rollout: not restarting vllm-{a.service}.service (asked by {a.reason}): {unit} is active "
              f"(transaction {txn}), so a rollout owns the service now; nothing was touched", file=sys.stderr)
        return OWNED

    if sd.unit_state(unit).get("ActiveState") in ("active", "activating", "reloading"):
        return owned(tx.read(p.current).decode().strip() or "?")
    txn_id = f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-restart"
    tx.write_atomic(p.current, f"{txn_id}\n".encode(), 0o644)
    tx.write_atomic(p.log, f"transaction {txn_id} (restart only, asked by {a.reason}) for vllm-{a.service}.service"
                    f"\n".encode(), 0o640)
    setenv = [f"--setenv={k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("SPARKCTL_")]
    r = sd.run("systemd-run", f"--unit={unit}", "--collect", "--quiet", "--service-type=exec",
               f"--description=sparkctl restart of vllm-{a.service}.service on its committed configuration "
               f"(transaction {txn_id}, asked by {a.reason})", *setenv,
               sys.executable, os.path.abspath(__file__), "run", a.service, "--txn", txn_id, "--restart-only",
               *restart_args(a))
    if r.returncode != 0:
        if sd.unit_state(unit).get("ActiveState") in ("active", "activating"):  # a deploy won the race
            return owned("started meanwhile")
        print(f"rollout: systemd-run could not start {unit}: {r.stderr.strip()}", file=sys.stderr)
        return 1
    if not a.wait:
        print(json.dumps({"txn": txn_id}))
        return 0
    return follow(argparse.Namespace(service=a.service, txn=txn_id, offset=0, wait=True))


def follow_once(service: str, txn_id: str, offset: int) -> dict:
    p = tx.Paths(service)
    data = tx.read(p.log)
    if offset > len(data):
        offset = 0  # a newer transaction rewrote the log
    chunk = data[offset:].decode("utf-8", "replace")
    result = tx.read_json(p.result)
    running = sd.unit_state(rollout_unit(service)).get("ActiveState") in ("active", "activating")
    done = result.get("txn") == txn_id
    state = tx.read_json(f"{p.txn}/state.json")
    awaiting = not done and verdict.waiting_for_control(p.txn, state, txn_id)
    return {"text": chunk, "offset": len(data), "running": running, "done": done,
            "result": result if done else None, "awaiting": awaiting,
            **({"candidate": state.get("candidate"), "verdict_deadline": state.get("verdict_deadline"),
                "probe_key": state.get("probe_key") or None} if awaiting else {})}


def follow(a) -> int:
    offset, idle_since = a.offset, None
    while True:
        st = follow_once(a.service, a.txn, offset)
        offset = st.pop("offset")
        text = st.pop("text")
        if text:
            sys.stdout.write(text)
        if not a.wait:
            print("@@ " + json.dumps({"offset": offset, **st}))
            return 0
        sys.stdout.flush()
        if st["done"]:
            return int(st["result"].get("rc", 1))
        if st["awaiting"]:
            print(f"rollout: transaction {a.txn} of vllm-{a.service}.service passed its health gate and waits for "
                  f"its acceptance verdict until {time.strftime('%H:%M:%S', time.localtime(st['verdict_deadline']))}: "
                  f"rollout.py verdict {a.service} --tx {a.txn} commit|rollback [--reason TEXT]")
            return 0
        if not st["running"]:  # the unit is gone: give the result file a moment, then say so
            idle_since = idle_since or time.monotonic()
            if time.monotonic() - idle_since > 10:
                print(f"rollout: {rollout_unit(a.service)} ended without recording a result for {a.txn}; see "
                      f"journalctl -u {rollout_unit(a.service)}")
                return 8
        time.sleep(1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("status")
    s.add_argument("services", nargs="+")
    for name in ("apply", "run", "restart"):
        a = sub.add_parser(name)
        a.add_argument("service")
        a.add_argument("--port", type=int, required=True)
        a.add_argument("--served", required=True)
        a.add_argument("--kind", choices=["chat", "embed"] + ([] if name == "restart" else ["none"]), required=True)
        a.add_argument("--timeout", type=float, default=1800)
        a.add_argument("--interval", type=float, default=2)
        a.add_argument("--journal", type=int, default=40)
        a.add_argument("--drain-timeout", type=float, default=1800)
        a.add_argument("--retry-after", type=int, default=30)
        if name != "restart":
            a.add_argument("--retry-failed", action="store_true")
            a.add_argument("--keep-failed", type=int, default=20)
        a.add_argument("--gate-max-tokens", type=int, default=sd.LIMITS["max_tokens"])
        a.add_argument("--gate-request-timeout", type=float, default=sd.LIMITS["request_timeout_s"])
        if name != "restart":
            a.add_argument("--worker-settle", type=float, default=sd.LIMITS["worker_settle_s"])
            # tensor-parallel worker: how to read the head's status (a shell-quoted command), how long to wait
            # for the head's transaction at each step, and how long one status read may take
            a.add_argument("--peer-status-cmd", default="")
            a.add_argument("--peer-timeout", type=float, default=3600)
            a.add_argument("--peer-call-timeout", type=float, default=30)
            a.add_argument("--verdict-timeout", type=float, default=0)
            a.add_argument("--verdict-default", choices=verdict.DECISIONS, default="rollback")
        if name == "run":
            a.add_argument("--txn", required=True)
            a.add_argument("--restart-only", action="store_true", help="restart the committed configuration only")
        if name in ("run", "restart"):
            a.add_argument("--reason", default="manual", help="who or what asked for the restart (recorded as by)")
        if name == "restart":
            a.add_argument("--wait", action="store_true")
    f = sub.add_parser("follow")
    f.add_argument("service")
    f.add_argument("--txn", required=True)
    f.add_argument("--offset", type=int, default=0)
    f.add_argument("--wait", action="store_true")
    v = sub.add_parser("verdict")
    v.add_argument("service")
    v.add_argument("--tx", required=True)
    v.add_argument("decision", choices=verdict.DECISIONS)
    v.add_argument("--reason", default="")
    args = ap.parse_args(argv)
    if args.cmd == "status":
        print(json.dumps(status(args.services)))
        return 0
    if args.cmd == "apply":
        return apply(args)
    if args.cmd == "follow":
        return follow(args)
    if args.cmd == "restart":
        return restart(args)
    if args.cmd == "verdict":
        p = tx.Paths(args.service)
        rc, text = verdict.send(p.txn, p.unit_name, args.tx, args.decision, args.reason)
        print(text, file=sys.stderr if rc else sys.stdout)
        return rc
    sd.LIMITS.update(max_tokens=args.gate_max_tokens, request_timeout_s=args.gate_request_timeout,
                     worker_settle_s=args.worker_settle)
    p = tx.Paths(args.service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)
    if args.restart_only:
        return rr.restart_committed(args, Say(p.log))
    return tx.execute(args, Say(p.log))


if __name__ == "__main__":
    sys.exit(main())
