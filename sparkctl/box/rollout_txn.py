#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout.py): one vLLM service change as a transaction.

The candidate is what the deploy staged: <ENV_DIR>/vllm-S.env.next and <ENV_DIR>/vllm-S.service.next (the unit
names the venv in ExecStart, so the vLLM install is part of it). Phases, recorded in STATE_DIR/rollout/vllm-S.txn/:

  prepared    snapshot of exactly what the candidate replaces (live env file and unit file, or their absence)
  draining    the proxy answers 503 for this served model; in-flight requests finish
  awaiting-head  tensor-parallel worker only: nothing changes until the head's candidate is in place
               (rollout_peer.py); the worker's gate is then the head's gate
  installed   candidate renamed into place, daemon-reload
  started     restarted, gating (one real request)
  awaiting-verdict  only with --verdict-timeout: proxy reopened, waiting for the acceptance verdict
              (rollout_verdict.py); commit -> committed, rollback -> rolling-back as after a failed gate
  committed   stamp = candidate; snapshot dropped; proxy reopened
  rolling-back  snapshot restored, daemon-reload, restart, gated like a forward step

A run that finds an unfinished transaction resumes from its phase: before `rolling-back` the snapshot stays the
last known-good state and the staged candidate is tried again; in `rolling-back` the rollback is finished. A
failed candidate is remembered (hash, when, why, journal) and not retried unless asked.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time

import rollout_drain as drain
import rollout_gate as sd
import rollout_peer as peer
import rollout_verdict as verdict

ENV_DIR = os.environ.get("SPARKCTL_ENV_DIR", "/etc/sparkctl")
STATE_DIR = os.environ.get("SPARKCTL_STATE_DIR", "/var/lib/sparkctl")
UNIT_DIR = os.environ.get("SPARKCTL_UNIT_DIR", "/etc/systemd/system")
DRAIN_DIR = os.environ.get("SPARKCTL_DRAIN_DIR", "/etc/nginx/sparkctl-drain")

FORWARD = ("prepared", "draining", "awaiting-head", "installed", "started")

# exit codes (rollout.py documents them)
OK, NOTHING_STAGED, NO_PREVIOUS, ROLLED_BACK, ROLLBACK_FAILED, REJECTED, RESTART_FAILED, KNOWN_FAILED = \
    0, 2, 2, 3, 4, 5, 6, 7
HEAD_FAILED = 11  # tensor-parallel worker: the head's transaction failed or never came; this worker changed nothing


class Paths:
    def __init__(self, service: str):
        self.service = service
        self.unit_name = f"vllm-{service}.service"
        self.env = f"{ENV_DIR}/vllm-{service}.env"
        self.env_next = f"{self.env}.next"
        self.legacy_prev = f"{self.env}.prev"  # the old single-file rollback; removed on the next commit
        self.unit = f"{UNIT_DIR}/{self.unit_name}"
        self.unit_next = f"{ENV_DIR}/{self.unit_name}.next"  # outside systemd's search path until installed
        self.dir = f"{STATE_DIR}/rollout"
        base = f"{self.dir}/vllm-{service}"
        self.stamp, self.txn, self.result = f"{base}.stamp", f"{base}.txn", f"{base}.result.json"
        self.log, self.failed, self.current = f"{base}.log", f"{base}.failed", f"{base}.current"


def read(path: str) -> bytes:
    try:
        with open(path, "rb") as f:
            return f.read()
    except (FileNotFoundError, NotADirectoryError):
        return b""


def read_json(path: str) -> dict:
    try:
        return json.loads(read(path) or b"{}")
    except ValueError:
        return {}


def write_atomic(path: str, data: bytes, mode: int = 0o600) -> None:
    """path := data, created with `mode`, fsynced and renamed into place (never half-written or wider)."""
    tmp = f"{os.path.dirname(path)}/.{os.path.basename(path)}.tmp-{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)
    os.rename(tmp, path)


def write_json(path: str, obj: dict, mode: int = 0o644) -> None:
    write_atomic(path, (json.dumps(obj, indent=1, sort_keys=True) + "\n").encode(), mode)


def candidate(p: Paths) -> str:
    """Hash of everything the service will read: staged unit (incl. the venv path) + staged env file."""
    h = hashlib.sha256()
    for part in (read(p.unit_next), read(p.env_next)):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def applied(p: Paths, cand: str, active: bool, txn_open: bool) -> str:
    """The stamp, or the candidate when a running service's live files already are exactly the candidate under a
    stamp of an earlier scheme (so upgrading this script restarts nothing)."""
    stamp = read(p.stamp).decode().strip()
    if stamp and stamp != cand and active and not txn_open and cand and read(p.unit) == read(p.unit_next) \
            and read(p.env) == read(p.env_next):
        return cand
    return stamp


def model_of(data: bytes) -> str:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("SPARKCTL_MODEL="):
            return line.split("=", 1)[1]
    return "?"


def exec_binary(unit_text: bytes) -> str:
    for line in unit_text.decode("utf-8", "replace").splitlines():
        if line.startswith("ExecStart="):
            return line.split("=", 1)[1].split()[0].lstrip("@-:+!")
    return ""


def now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def failed_record(p: Paths, cand: str) -> dict:
    return read_json(f"{p.failed}/{cand}.json")


def remember_failure(p: Paths, cand: str, model: str, why: str, journal_text: str, keep: int) -> None:
    os.makedirs(p.failed, mode=0o755, exist_ok=True)
    write_json(f"{p.failed}/{cand}.json", {"candidate": cand, "at": now(), "why": why, "model": model,
                                           "journal": journal_text}, 0o640)
    records = sorted((os.path.getmtime(f"{p.failed}/{n}"), n) for n in os.listdir(p.failed) if n.endswith(".json"))
    for _, name in records[:-keep] if keep > 0 else []:
        os.unlink(f"{p.failed}/{name}")


def forget_failure(p: Paths, cand: str) -> None:
    try:
        os.unlink(f"{p.failed}/{cand}.json")
    except FileNotFoundError:
        pass


class Txn:
    """The recorded transaction of one service; every phase change is written before it is acted on."""

    def __init__(self, p: Paths, say):
        self.p, self.say = p, say
        self.state = read_json(f"{p.txn}/state.json")

    @property
    def open(self) -> bool:
        return bool(self.state.get("phase"))

    def set_phase(self, phase: str, **extra) -> None:
        self.state.update(phase=phase, **extra)
        write_json(f"{self.p.txn}/state.json", self.state, 0o600)

    def begin(self, txn_id: str, cand: str) -> None:
        """Snapshot exactly what the candidate replaces, unless an unfinished transaction already holds the last
        known-good state (then keep that snapshot: the live files may be an un-gated candidate)."""
        p = self.p
        if self.open and self.state.get("phase") in FORWARD:
            self.say(f"resuming the unfinished transaction {self.state.get('id')} (phase {self.state['phase']}); "
                     f"its snapshot is the last known-good state")
            self.set_phase("prepared", id=txn_id, candidate=cand, resumed=self.state.get("id"))
            return
        shutil.rmtree(p.txn, ignore_errors=True)  # a half-written snapshot (no state.json) is no snapshot
        os.makedirs(p.txn, mode=0o700)
        for name, path in (("env", p.env), ("unit", p.unit)):
            if os.path.exists(path):
                write_atomic(f"{p.txn}/{name}", read(path), 0o600)
        self.state = {}
        self.set_phase("prepared", id=txn_id, candidate=cand, started=now(),
                       had_env=os.path.exists(p.env), had_unit=os.path.exists(p.unit),
                       stamp_before=read(p.stamp).decode().strip(), model_before=model_of(read(p.env)))

    @property
    def has_previous(self) -> bool:
        return bool(self.state.get("had_env") and self.state.get("had_unit"))

    def install_candidate(self) -> None:
        p = self.p
        write_atomic(p.unit, read(p.unit_next), 0o644)
        write_atomic(p.env, read(p.env_next), 0o600)
        sd.systemctl("daemon-reload")

    def restore_snapshot(self) -> None:
        p = self.p
        for name, path, mode, had in (("unit", p.unit, 0o644, "had_unit"), ("env", p.env, 0o600, "had_env")):
            if self.state.get(had):
                write_atomic(path, read(f"{p.txn}/{name}"), mode)
            elif os.path.exists(path):
                os.unlink(path)
        sd.systemctl("daemon-reload")

    def close(self) -> None:
        shutil.rmtree(self.p.txn, ignore_errors=True)


def execute(a, say) -> int:
    """Run (or resume) the transaction for a.service; record the result; return the exit code."""
    p = Paths(a.service)
    os.makedirs(p.dir, mode=0o755, exist_ok=True)
    t0 = time.monotonic()
    txn = Txn(p, say)
    result = {"txn": a.txn, "service": a.service, "unit": p.unit_name, "started": now()}

    def finish(rc: int, outcome: str, message: str, **extra) -> int:
        if txn.state.get("verdict"):  # issue 12: who decided after the health gate, and why
            result["verdict"], message = txn.state["verdict"], verdict.annotate(message, txn.state["verdict"])
        result.update(rc=rc, outcome=outcome, message=message, finished=now(),
                      total_s=round(time.monotonic() - t0, 1), **extra)
        write_json(p.result, result)
        say(message)
        return rc

    def rollback(why: str) -> int:
        unit = p.unit_name
        failed_model = model_of(read(p.env))
        if not txn.has_previous:
            sd.systemctl("stop", unit)
            txn.restore_snapshot()  # back to "not installed", exactly what was there before
            sd.systemctl("reset-failed", unit)
            drain.drain_off(DRAIN_DIR, a.served)
            txn.close()
            return finish(NO_PREVIOUS, "failed-no-previous",
                          f"rollout: {unit} ({failed_model}) failed ({why}) and there is no previous configuration "
                          f"to roll back to; the unit is removed again, nothing serves {a.served!r} on this box")
        say(f"rollout: rolling {unit} back to the snapshot of transaction {txn.state.get('id')} "
            f"({txn.state.get('model_before')})")
        txn.restore_snapshot()
        restarted, err = sd.restart(unit)
        ok2, why2, took2 = sd.gate(unit, a.port, a.served, a.kind, a.timeout, a.interval)
        back = model_of(read(p.env))
        drain.drain_off(DRAIN_DIR, a.served)
        if ok2:
            before = txn.state.get("stamp_before", "")
            if before:
                write_atomic(p.stamp, f"{before}\n".encode(), 0o644)
            txn.close()
            return finish(ROLLED_BACK, "rolled-back",
                          f"rollout: ROLLED BACK {unit} to {back} (ready in {took2:.0f} s); the box serves {back} as "
                          f"{a.served!r}. The failed candidate ({failed_model}) is remembered and not retried "
                          f"unless asked (ROLLOUT_RETRY_FAILED=True)", why=why, load_s=round(took2, 1))
        txn.close()
        return finish(ROLLBACK_FAILED, "rollback-failed",
                      f"rollout: rollback of {unit} to {back} ALSO FAILED: {why2 or err}; the box has no healthy "
                      f"{a.served!r}.\n{sd.journal(unit, a.journal)}", why=why)

    phase = txn.state.get("phase")
    if phase == verdict.AWAITING:  # the run died while it waited for its acceptance verdict: wait on, then decide
        result.update(candidate=txn.state.get("candidate"), model=model_of(read(p.env)))
        ok, why = verdict.wait(txn, a, say, DRAIN_DIR)
        if ok:
            write_atomic(p.stamp, f"{txn.state.get('candidate')}\n".encode(), 0o644)
        else:
            remember_failure(p, txn.state.get("candidate"), model_of(read(p.env)), why, "", a.keep_failed)
        txn.set_phase("committed" if ok else "rolling-back", why=why)
        phase = txn.state["phase"]
    if phase == "rolling-back":
        say(f"rollout: resuming the interrupted rollback of transaction {txn.state.get('id')}")
        result["candidate"] = txn.state.get("candidate")
        return rollback(txn.state.get("why", "interrupted"))
    if phase == "committed":
        drain.drain_off(DRAIN_DIR, a.served)
        txn.close()
        return finish(OK, "ready", f"rollout: {p.unit_name} was committed by transaction {txn.state.get('id')}; "
                      f"cleanup finished")
    if not (os.path.exists(p.env_next) and os.path.exists(p.unit_next)):
        if txn.open:
            return rollback("the staged candidate disappeared")
        return finish(NOTHING_STAGED, "nothing-staged", f"rollout: {p.env_next} or {p.unit_next} does not exist; "
                      f"nothing staged, nothing restarted")
    cand = candidate(p)
    model = model_of(read(p.env_next))
    result.update(candidate=cand, model=model)
    known = failed_record(p, cand)
    if known and not a.retry_failed:
        if txn.open:  # an interrupted forward step of a candidate that already failed: back to known-good
            return rollback(known.get("why", "failed before"))
        return finish(KNOWN_FAILED, "known-failed",
                      f"rollout: {p.unit_name}: this configuration ({model}, candidate {cand[:12]}) failed at "
                      f"{known.get('at')} ({known.get('why')}); nothing restarted. To try it again on purpose: "
                      f"--data ROLLOUT_RETRY_FAILED=True", failed_at=known.get("at"), why=known.get("why"))
    if known:
        say(f"rollout: retrying candidate {cand[:12]} on purpose (it failed at {known.get('at')})")
        forget_failure(p, cand)
    active = sd.unit_state(p.unit_name).get("ActiveState") == "active"
    if not txn.open and active and applied(p, cand, active, txn.open) == cand:
        return finish(OK, "unchanged", f"rollout: {p.unit_name} already runs candidate {cand[:12]}")
    if not txn.open and read(p.stamp).decode().strip() == cand:  # committed before, not running now: restart it
        restarted, err = sd.restart(p.unit_name)
        ok, why, took = sd.gate(p.unit_name, a.port, a.served, a.kind, a.timeout, a.interval) if restarted else \
            (False, err, 0.0)
        if ok:
            return finish(OK, "restarted", f"rollout: {p.unit_name} was not running its committed configuration; "
                          f"restarted, ready in {took:.0f} s", load_s=round(took, 1))
        return finish(RESTART_FAILED, "restart-failed",
                      f"rollout: {p.unit_name} does not come up with its committed configuration ({why}); "
                      f"nothing was changed.\n{sd.journal(p.unit_name, a.journal)}", why=why)

    binary = exec_binary(read(p.unit_next))  # checks before anything stops
    problem = "" if not binary or os.path.exists(binary) else f"{binary} (ExecStart of the staged unit) is missing"
    checker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_vllm_args.py")
    python = os.path.join(os.path.dirname(binary), "python") if binary else ""
    if not problem and a.kind != "none" and os.path.exists(checker) and os.path.exists(python):
        r = sd.run(python, checker, p.env_next)
        problem = f"vLLM rejects the staged arguments:\n{r.stderr.strip()}" if r.returncode != 0 else ""
    if problem:
        remember_failure(p, cand, model, problem, "", a.keep_failed)
        if txn.open:
            return rollback(problem)
        return finish(REJECTED, "rejected", f"rollout: {p.unit_name}: {problem}; nothing was restarted", why=problem)

    txn.begin(a.txn, cand)
    drain_s = 0.0
    drains = a.kind != "none" and active and a.drain_timeout > 0  # it served: keep new requests out meanwhile
    if drains:
        txn.set_phase("draining")
        reloaded, err = drain.drain_on(DRAIN_DIR, a.served, a.retry_after)
        say(f"draining {a.served!r}: new requests get 503 + Retry-After {a.retry_after} s" if reloaded else
            f"draining {a.served!r}: nginx did not reload ({err}); waiting for running requests anyway")
        idle, drain_s, busy = drain.wait_idle(a.port, a.drain_timeout, a.interval, say)
        say(f"drained in {drain_s:.0f} s" if idle else
            f"drain timeout ({a.drain_timeout:.0f} s, DRAIN_TIMEOUT_S): {busy:.0f} request(s) still running are cut")
    tp_unit = peer.tp_unit_of(read(p.env_next)) if getattr(a, "peer_status_cmd", "") else ""
    if tp_unit:  # tensor-parallel worker: the head drains and goes first; a head that never gets there changes nothing
        txn.set_phase("awaiting-head")
        say(f"tensor-parallel unit {tp_unit[:12]}: waiting for the head's transaction to install its candidate")
        head, why = peer.wait_for(a, tp_unit, (peer.GO, peer.COMMITTED), a.peer_timeout, say)
        if head not in (peer.GO, peer.COMMITTED):
            if head == peer.FAILED:
                remember_failure(p, cand, model, why, "", a.keep_failed)
            if txn.state.get("resumed"):  # the live files may be an un-gated candidate of the earlier run
                return rollback(why)
            txn.close()
            return finish(HEAD_FAILED, "head-failed" if head == peer.FAILED else "head-absent",
                          f"rollout: {p.unit_name} not changed ({why}); it keeps its previous configuration",
                          why=why)
        say(f"tensor-parallel: {why}; restarting the worker")
    txn.set_phase("installed")
    txn.install_candidate()
    txn.set_phase("started")
    ok, why, took, restart_s = sd.restart_and_gate(p.unit_name, f"{p.unit_name} ({model})", a, say)
    if ok and tp_unit:  # the worker's gate is the head's gate
        t_gate = time.monotonic()
        head, why = peer.wait_for(a, tp_unit, (peer.COMMITTED,), a.peer_timeout, say,
                                  alive=peer.worker_alive(p.unit_name))
        ok, took = head == peer.COMMITTED, took + time.monotonic() - t_gate
        say(f"tensor-parallel: {why}")
    if ok and getattr(a, "verdict_timeout", 0) > 0:  # issue 12: kept only after the acceptance verdict
        ok, why = verdict.wait(txn, a, say, DRAIN_DIR, closed=drains)
    if ok:
        txn.set_phase("committed")
        write_atomic(p.stamp, f"{cand}\n".encode(), 0o644)
        if os.path.exists(p.legacy_prev):
            os.unlink(p.legacy_prev)
        drain.drain_off(DRAIN_DIR, a.served)
        txn.close()
        return finish(OK, "ready", f"rollout: {p.unit_name} serves {model} (ready {took:.0f} s after the restart)",
                      drain_s=round(drain_s, 1), restart_s=round(restart_s, 1), load_s=round(took, 1))
    txn.set_phase("rolling-back", why=why)
    journal_text = sd.journal(p.unit_name, a.journal)
    remember_failure(p, cand, model, why, journal_text, a.keep_failed)
    say(f"rollout: {p.unit_name} serving {model} is not healthy: {why}")
    say(f"--- last {a.journal} journal lines of {p.unit_name} ---\n{journal_text}")
    result.update(drain_s=round(drain_s, 1), restart_s=round(restart_s, 1))
    return rollback(why)
