#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout.py): one vLLM service change as a transaction, a state machine.

The candidate is what the deploy staged: <ENV_DIR>/vllm-S.env.next and <ENV_DIR>/vllm-S.service.next (the unit
names the venv in ExecStart, so the vLLM install is part of it). Its phases (contract.py: PHASES, TRANSITIONS),
recorded in STATE_DIR/rollout/vllm-S.txn/state.json, each by one step below, which records its phase before it acts:

  prepared          snapshot of exactly what the candidate replaces (live env file and unit file, or their
                    absence); recorded once the snapshot is whole: a snapshot without state.json is no snapshot.
                    Then the served model's router health path fails (drain.unready_on) and, when it
                    served, the run waits --unready-wait s for the gateway's routers to take the box out
  draining          the proxy answers 503 for this served model; in-flight requests finish
  awaiting-head     tensor-parallel worker only: nothing changes until the head's candidate is in place
                    (rollout_peer.py); the worker's gate is then the head's gate
  installed         candidate renamed into place, daemon-reload
  started           restarted, gating (one real request)
  awaiting-verdict  only with --verdict-timeout: waiting for the acceptance verdict (rollout_verdict.py);
                    commit -> committed, rollback -> rolling-back as after a failed gate
  committed         stamp = candidate; snapshot dropped; proxy reopened (drain and router health failure lifted)
  rolling-back      snapshot restored, daemon-reload, restart, gated like a forward step

Before the first phase, checks that change nothing decide whether there is anything to do (nothing staged, a
candidate that failed before, already running it, its committed configuration only stopped, refused up front).
A run that finds an unfinished transaction resumes from its phase: before `rolling-back` the snapshot stays the
last known-good state and the staged candidate is tried again; `awaiting-verdict` waits on until its recorded
deadline; `rolling-back` and `committed` are finished (each lifts the router health failure once it serves
again, before the transaction's record goes). A run that finds no open transaction removes a router health failure
left behind. A failed candidate is remembered (hash, when, why, journal) and not retried unless asked.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time

import contract as c
import drain
import readiness_gate
import rollout_peer as peer
import rollout_verdict as verdict
from boxio import read, read_json, write_atomic, write_json

ENV_DIR = os.environ.get("SPARKCTL_ENV_DIR", "/etc/sparkctl")
STATE_DIR = os.environ.get("SPARKCTL_STATE_DIR", "/var/lib/sparkctl")
UNIT_DIR = os.environ.get("SPARKCTL_UNIT_DIR", c.UNIT_DIR)
DRAIN_DIR = os.environ.get("SPARKCTL_DRAIN_DIR", "/etc/nginx/sparkctl-drain")


class Paths(c.Paths):
    """One service's files (contract.Paths) under the directories this run was given (the deploy's settings)."""

    def __init__(self, service: str):
        super().__init__(service, ENV_DIR, c.rollout_dir(STATE_DIR), UNIT_DIR)


def candidate(p: Paths) -> str:
    """Hash of everything the service will read: staged unit (incl. the venv path) + staged env file."""
    h = hashlib.sha256()
    for part in (read(p.unit_next), read(p.env_next)):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()


def stamp_of(p: Paths) -> str:
    """The candidate the service last committed ("" when none)."""
    return read(p.stamp).decode().strip()


def model_of(data: bytes) -> str:
    for line in data.decode("utf-8", "replace").splitlines():
        if line.startswith("SPARKCTL_MODEL="):
            return line.split("=", 1)[1]
    return "?"


def headless(env_text: bytes) -> bool:
    """The env file runs a tensor-parallel worker's headless engine (no API: no client ever reached it)."""
    for line in env_text.decode("utf-8", "replace").splitlines():
        if line.startswith("VLLM_ARGS="):
            return "--headless" in line.split("=", 1)[1].strip('"').split()
    return False


def exec_binary(unit_text: bytes) -> str:
    for line in unit_text.decode("utf-8", "replace").splitlines():
        if line.startswith("ExecStart="):
            return line.split("=", 1)[1].split()[0].lstrip("@-:+!")
    return ""


def start_key(unit_text: bytes, env_text: bytes) -> str:
    """What a start's kernel caches are keyed by: its build (the venv its ExecStart runs) and its model (vLLM's
    compile cache and FlashInfer's JIT modules follow the model's shapes), as one file name."""
    venv = os.path.dirname(os.path.dirname(exec_binary(unit_text)))
    return hashlib.sha256(f"{venv}\0{model_of(env_text)}".encode()).hexdigest()[:32]


def warm_record(p: Paths) -> str:
    """The record that the live unit's build and model started ready on this box before (then its start is warm)."""
    return f"{p.warm}/{start_key(read(p.unit), read(p.env))}.json"


def cold_start(p: Paths) -> bool:
    """The live configuration's build and model never started ready on this box: its JIT caches are empty."""
    return not os.path.exists(warm_record(p))


def mark_warm(p: Paths, took: float) -> None:
    os.makedirs(p.warm, mode=0o755, exist_ok=True)
    write_json(warm_record(p), {"venv": os.path.dirname(os.path.dirname(exec_binary(read(p.unit)))),
                                "model": model_of(read(p.env)), "service": p.service, "at": now(),
                                "ready_s": round(took, 1)}, 0o644)


def gated_restart(p: Paths, label: str, a, say, record: bool = True) -> tuple[bool, str, float, float, bool]:
    """Restart the live configuration and gate it, a cold start (cold_start) with the cold deadline; a start that
    passes is recorded warm (unless record is False: a worker's gate is its head's). Returns restart_and_gate's
    (ready, why not, seconds to ready, seconds the restart took) and whether it was cold."""
    cold = cold_start(p)
    ok, why, took, restart_s = readiness_gate.restart_and_gate(p.unit_name, label, a, say, cold)
    if ok and record:
        mark_warm(p, took)
    return ok, why, took, restart_s, cold


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
    """The recorded transaction of one service. set_phase is the one phase writer: it refuses a transition the
    contract does not allow, and every phase is written before it is acted on."""

    def __init__(self, p: Paths, say):
        self.p, self.say = p, say
        self.state = read_json(p.state)

    @property
    def phase(self) -> str:
        return self.state.get("phase") or c.IDLE

    @property
    def open(self) -> bool:
        return self.phase != c.IDLE

    def set_phase(self, phase: str, **extra) -> None:
        c.check_transition(self.phase, phase)
        self.state.update(phase=phase, **extra)
        write_json(self.p.state, self.state, 0o600)  # it holds the acceptance probe key: root's only

    def begin(self, txn_id: str, cand: str) -> None:
        """Snapshot exactly what the candidate replaces, unless an unfinished transaction already holds the last
        known-good state (then keep that snapshot: the live files may be an un-gated candidate)."""
        p = self.p
        if self.phase in c.FORWARD:
            self.say(f"resuming the unfinished transaction {self.state.get('id')} (phase {self.phase}); "
                     f"its snapshot is the last known-good state")
            self.set_phase(c.PREPARED, id=txn_id, candidate=cand, resumed=self.state.get("id"))
            return
        shutil.rmtree(p.txn, ignore_errors=True)  # a half-written snapshot (no state.json) is no snapshot
        os.makedirs(p.txn, mode=0o700)
        for name, path in (("env", p.env), ("unit", p.unit)):
            if os.path.exists(path):
                write_atomic(p.snapshot[name], read(path), 0o600)
        self.state = {}
        self.set_phase(c.PREPARED, id=txn_id, candidate=cand, started=now(),
                       had_env=os.path.exists(p.env), had_unit=os.path.exists(p.unit),
                       stamp_before=stamp_of(p), model_before=model_of(read(p.env)))

    @property
    def has_previous(self) -> bool:
        return bool(self.state.get("had_env") and self.state.get("had_unit"))

    def install_candidate(self) -> None:
        p = self.p
        write_atomic(p.unit, read(p.unit_next), 0o644)
        write_atomic(p.env, read(p.env_next), 0o600)
        readiness_gate.systemctl("daemon-reload")

    def restore_snapshot(self) -> None:
        p = self.p
        for name, path, mode, had in (("unit", p.unit, 0o644, "had_unit"), ("env", p.env, 0o600, "had_env")):
            if self.state.get(had):
                write_atomic(path, read(p.snapshot[name]), mode)
            elif os.path.exists(path):
                os.unlink(path)
        readiness_gate.systemctl("daemon-reload")

    def close(self) -> None:
        """The transaction is over: its record goes (what it decided stays in memory for the result)."""
        c.check_transition(self.phase, c.IDLE)
        shutil.rmtree(self.p.txn, ignore_errors=True)
        self.state["phase"] = c.IDLE


class Run:
    """One run of `rollout.py run`: its arguments, the service's files and transaction, what it found and
    measured, and the result it records."""

    def __init__(self, a, say):
        self.a, self.say, self.p = a, say, Paths(a.service)
        self.txn = Txn(self.p, say)
        self.t0 = time.monotonic()
        self.result = {"txn": a.txn, "service": a.service, "unit": self.p.unit_name, "started": now()}
        self.cand, self.model, self.active = "", "", False
        self.drains, self.tp_unit = False, ""  # decided when the transaction begins
        self.why = ""  # why it rolls back
        self.gated = False  # the candidate ran and failed (gate, head or verdict): remembered with its journal
        self.resumed = False  # it goes on from a recorded phase past the gate (an earlier run died there)
        self.drain_s, self.restart_s, self.took = 0.0, 0.0, None  # took: ready after the restart, s (None: no gate)

    def look(self) -> None:
        """What is staged and whether the service runs (nothing is changed)."""
        p = self.p
        self.cand, self.model = candidate(p), model_of(read(p.env_next))
        self.result.update(candidate=self.cand, model=self.model)
        self.active = readiness_gate.unit_state(p.unit_name).get("ActiveState") == "active"

    def finish(self, outcome: str, message: str, **extra) -> int:
        """Record the result (its outcome's exit code from the contract), say it, return the exit code."""
        decided = self.txn.state.get("verdict")
        if decided:  # the acceptance verdict: who decided after the health gate, and why
            self.result["verdict"], message = decided, verdict.annotate(message, decided)
        self.result.update(rc=c.code(outcome), outcome=outcome, message=message, finished=now(),
                           total_s=round(time.monotonic() - self.t0, 1), **extra)
        write_json(self.p.result, self.result, 0o644)
        self.say(message)
        return self.result["rc"]

    def roll_back_because(self, why: str, gated: bool = False) -> str:
        self.why, self.gated = why, gated
        return c.ROLLING_BACK


# --- before the first phase: checks that change nothing (a step returns the next phase, or an exit code) ----------
def nothing_staged(run: Run) -> str | int | None:
    p = run.p
    if os.path.exists(p.env_next) and os.path.exists(p.unit_next):
        return None
    if run.txn.open:
        return run.roll_back_because("the staged candidate disappeared")
    return run.finish(c.NOTHING_STAGED, f"rollout: {p.env_next} or {p.unit_next} does not exist; nothing staged, "
                      f"nothing restarted")


def known_failure(run: Run) -> str | int | None:
    known = failed_record(run.p, run.cand)
    if not known:
        return None
    if run.a.retry_failed:
        run.say(f"rollout: retrying candidate {run.cand[:12]} on purpose (it failed at {known.get('at')})")
        forget_failure(run.p, run.cand)
        return None
    if run.txn.open:  # an interrupted forward step of a candidate that already failed: back to known-good
        return run.roll_back_because(known.get("why", "failed before"))
    return run.finish(c.KNOWN_FAILED, f"rollout: {run.p.unit_name}: this configuration ({run.model}, candidate "
                      f"{run.cand[:12]}) failed at {known.get('at')} ({known.get('why')}); nothing restarted. To try "
                      f"it again on purpose: --data ROLLOUT_RETRY_FAILED=True", failed_at=known.get("at"),
                      why=known.get("why"))


def already_running(run: Run) -> int | None:
    if run.txn.open or not run.active or stamp_of(run.p) != run.cand:
        return None
    return run.finish(c.UNCHANGED, f"rollout: {run.p.unit_name} already runs candidate {run.cand[:12]}")


def committed_but_stopped(run: Run) -> int | None:
    """Committed before, not running now: restart it (never remembered as a failed candidate)."""
    p = run.p
    if run.txn.open or stamp_of(p) != run.cand:
        return None
    ok, why, took, _, cold = gated_restart(p, p.unit_name, run.a, run.say)
    run.result["cold_start"] = cold
    if ok:
        return run.finish(c.RESTARTED, f"rollout: {p.unit_name} was not running its committed configuration; "
                          f"restarted, ready in {took:.0f} s", load_s=round(took, 1))
    return run.finish(c.RESTART_FAILED, f"rollout: {p.unit_name} does not come up with its committed configuration "
                      f"({why}); nothing was changed.\n{readiness_gate.journal(p.unit_name, run.a.journal)}", why=why)


def staged_problem(p: Paths, kind: str) -> str:
    """Why the staged candidate cannot run, found before anything stops: its vLLM is missing, or vLLM's own
    parser (check_vllm_args.py, with the candidate venv's python) rejects its arguments ("" when neither)."""
    binary = exec_binary(read(p.unit_next))
    if binary and not os.path.exists(binary):
        return f"{binary} (ExecStart of the staged unit) is missing"
    checker = os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_vllm_args.py")
    python = os.path.join(os.path.dirname(binary), "python") if binary else ""
    if kind == "none" or not python or not os.path.exists(checker) or not os.path.exists(python):
        return ""
    r = readiness_gate.run(python, checker, p.env_next)
    return f"vLLM rejects the staged arguments:\n{r.stderr.strip()}" if r.returncode != 0 else ""


def rejected(run: Run) -> str | int | None:
    problem = staged_problem(run.p, run.a.kind)
    if not problem:
        return None
    remember_failure(run.p, run.cand, run.model, problem, "", run.a.keep_failed)
    if run.txn.open:
        return run.roll_back_because(problem)
    return run.finish(c.REJECTED, f"rollout: {run.p.unit_name}: {problem}; nothing was restarted", why=problem)


CHECKS = (known_failure, already_running, committed_but_stopped, rejected)  # in this order, after nothing_staged
RESUMED = (c.AWAITING_VERDICT, c.COMMITTED, c.ROLLING_BACK)  # recorded phases a run goes on from, not forward


def resume(run: Run) -> str:
    """A run that finds its transaction past the candidate's gate goes on from the recorded phase."""
    state = run.txn.state
    run.resumed = True
    run.cand, run.model = state.get("candidate") or "", model_of(read(run.p.env))
    run.result["candidate"] = state.get("candidate")
    if run.txn.phase == c.ROLLING_BACK:
        run.say(f"rollout: resuming the interrupted rollback of transaction {state.get('id')}")
        run.why = state.get("why", "interrupted")
    else:
        run.result["model"] = run.model
    return run.txn.phase


def first_step(run: Run) -> str | int:
    """Where this run starts: a recorded phase to go on from, an exit code (nothing to change), or PREPARED."""
    if run.txn.phase in RESUMED:
        return resume(run)
    if not run.txn.open:  # no transaction owns the service: a router health failure still there is left over
        drain.reopen(DRAIN_DIR, run.a.served)
    step = nothing_staged(run)
    if step is not None:
        return step
    run.look()
    for check in CHECKS:
        step = check(run)
        if step is not None:
            return step
    return c.PREPARED


# --- the phases: each records its phase first (prepared: once the snapshot is whole), then acts --------------------
def prepare(run: Run) -> str:
    a = run.a
    run.txn.begin(a.txn, run.cand)
    serves = run.active and not headless(read(run.p.env))  # clients reach it now (a replica becoming a worker too)
    run.drains = (serves or (a.kind != "none" and run.active)) and a.drain_timeout > 0  # keep new requests out
    run.tp_unit = peer.tp_unit_of(read(run.p.env_next)) if a.peer_status_cmd else ""
    if a.kind != "none" or serves:  # out of the routers until the commit, before anything it served changes
        leave_routers(run)
    return c.DRAINING if run.drains else c.AWAITING_HEAD if run.tp_unit else c.INSTALLED


def leave_routers(run: Run) -> None:
    """Fail the served model's router health path (its API still serves); when it served, wait for the routers'
    health window so none sends it a request that the drain would answer 503 (a first install is in no router)."""
    a, say = run.a, run.say
    reloaded, err = drain.unready_on(DRAIN_DIR, a.served)
    if not reloaded:
        say(f"leaving the routers: nginx did not reload ({err}); going on")
    if run.active and a.unready_wait > 0:
        say(f"{a.served!r} fails its router health path; waiting {a.unready_wait:g} s (ROUTER_OUT_WAIT_S) for the "
            f"routers to take this box out before draining")
        time.sleep(a.unready_wait)


def drain_requests(run: Run) -> str:
    a, say = run.a, run.say
    run.txn.set_phase(c.DRAINING)
    reloaded, err = drain.drain_on(DRAIN_DIR, a.served, a.retry_after)
    say(f"draining {a.served!r}: new requests get 503 + Retry-After {a.retry_after} s" if reloaded else
        f"draining {a.served!r}: nginx did not reload ({err}); waiting for running requests anyway")
    idle, drain_s, busy = drain.wait_idle(a.port, a.drain_timeout, a.interval, say)
    run.drain_s = drain_s
    say(f"drained in {drain_s:.0f} s" if idle else
        f"drain timeout ({a.drain_timeout:.0f} s, DRAIN_TIMEOUT_S): {busy:.0f} request(s) still running are cut")
    return c.AWAITING_HEAD if run.tp_unit else c.INSTALLED


def await_head(run: Run) -> str | int:
    """Tensor-parallel worker: the head drains and goes first; a head that never gets there changes nothing."""
    a, txn = run.a, run.txn
    txn.set_phase(c.AWAITING_HEAD)
    run.say(f"tensor-parallel unit {run.tp_unit[:12]}: waiting for the head's transaction to install its candidate")
    head, why = peer.wait_for(a, run.tp_unit, (peer.GO, peer.COMMITTED), a.peer_timeout, run.say)
    if head in (peer.GO, peer.COMMITTED):
        run.say(f"tensor-parallel: {why}; restarting the worker")
        return c.INSTALLED
    if head == peer.FAILED:
        remember_failure(run.p, run.cand, run.model, why, "", a.keep_failed)
    if txn.state.get("resumed"):  # the live files may be an un-gated candidate of the earlier run
        return run.roll_back_because(why)
    drain.reopen(DRAIN_DIR, a.served)
    txn.close()
    return run.finish(c.HEAD_FAILED if head == peer.FAILED else c.HEAD_ABSENT,
                      f"rollout: {run.p.unit_name} not changed ({why}); it keeps its previous configuration", why=why)


def install(run: Run) -> str:
    run.txn.set_phase(c.INSTALLED)
    run.txn.install_candidate()
    return c.STARTED


def wait_head_committed(run: Run) -> tuple[bool, str, float]:
    """A worker's gate is its head's: (the head committed the same unit, why, seconds waited)."""
    t0 = time.monotonic()
    head, why = peer.wait_for(run.a, run.tp_unit, (peer.COMMITTED,), run.a.peer_timeout, run.say,
                              alive=peer.worker_alive(run.p.unit_name))
    run.say(f"tensor-parallel: {why}")
    return head == peer.COMMITTED, why, time.monotonic() - t0


def start_and_gate(run: Run) -> str:
    p = run.p
    run.txn.set_phase(c.STARTED)
    ok, why, took, run.restart_s, cold = gated_restart(p, f"{p.unit_name} ({run.model})", run.a, run.say,
                                                       record=not run.tp_unit)
    run.result["cold_start"] = cold
    if ok and run.tp_unit:
        ok, why, waited = wait_head_committed(run)
        took += waited
        if ok:
            mark_warm(p, took)
    run.took = took
    if not ok:
        return run.roll_back_because(why, gated=True)
    return c.AWAITING_VERDICT if (run.a.verdict_timeout or 0) > 0 else c.COMMITTED


def await_verdict(run: Run) -> str:
    """Kept only after the acceptance verdict (rollout_verdict.wait records the phase, and goes on with
    the recorded wait when this run resumed it)."""
    ok, why = verdict.wait(run.txn, run.a, run.say, DRAIN_DIR, closed=run.drains)
    return c.COMMITTED if ok else run.roll_back_because(why, gated=True)


def commit(run: Run) -> int:
    txn, p = run.txn, run.p
    txn.set_phase(c.COMMITTED)
    write_atomic(p.stamp, f"{txn.state.get('candidate')}\n", 0o644)
    drain.reopen(DRAIN_DIR, run.a.served, reload=run.resumed)
    txn.close()
    if run.took is None:  # a resumed run: the gate passed in the run it resumed
        return run.finish(c.READY, f"rollout: {p.unit_name} was committed by transaction {txn.state.get('id')}; "
                          f"cleanup finished")
    return run.finish(c.READY, f"rollout: {p.unit_name} serves {run.model} (ready {run.took:.0f} s after the "
                      f"restart)", drain_s=round(run.drain_s, 1), restart_s=round(run.restart_s, 1),
                      load_s=round(run.took, 1))


def roll_back(run: Run) -> int:
    p, a, txn = run.p, run.a, run.txn
    txn.set_phase(c.ROLLING_BACK, why=run.why)
    if run.gated:  # recorded first: a run killed from here on finishes this rollback
        journal_text = readiness_gate.journal(p.unit_name, a.journal)
        remember_failure(p, run.cand, run.model, run.why, journal_text, a.keep_failed)
        run.say(f"rollout: {p.unit_name} serving {run.model} is not healthy: {run.why}")
        run.say(f"--- last {a.journal} journal lines of {p.unit_name} ---\n{journal_text}")
        run.result.update(drain_s=round(run.drain_s, 1), restart_s=round(run.restart_s, 1))
    if not txn.has_previous:
        return remove_first_install(run)
    return restore_previous(run)


def remove_first_install(run: Run) -> int:
    """Back to "not installed", exactly what was there before."""
    p, txn = run.p, run.txn
    failed_model = model_of(read(p.env))
    readiness_gate.systemctl("stop", p.unit_name)
    txn.restore_snapshot()
    readiness_gate.systemctl("reset-failed", p.unit_name)
    drain.reopen(DRAIN_DIR, run.a.served, reload=run.resumed)
    txn.close()
    return run.finish(c.NO_PREVIOUS, f"rollout: {p.unit_name} ({failed_model}) failed ({run.why}) and there is no "
                      f"previous configuration to roll back to; the unit is removed again, nothing serves "
                      f"{run.a.served!r} on this box")


def restore_previous(run: Run) -> int:
    p, a, txn = run.p, run.a, run.txn
    failed_model = model_of(read(p.env))
    run.say(f"rollout: rolling {p.unit_name} back to the snapshot of transaction {txn.state.get('id')} "
            f"({txn.state.get('model_before')})")
    txn.restore_snapshot()
    ok, why, took, _, _ = gated_restart(p, f"{p.unit_name} (snapshot)", a, run.say)
    back = model_of(read(p.env))
    drain.reopen(DRAIN_DIR, a.served, reload=run.resumed)
    if ok and txn.state.get("stamp_before"):
        write_atomic(p.stamp, f"{txn.state['stamp_before']}\n", 0o644)
    txn.close()
    if ok:
        return run.finish(c.ROLLED_BACK, f"rollout: ROLLED BACK {p.unit_name} to {back} (ready in {took:.0f} s); the "
                          f"box serves {back} as {a.served!r}. The failed candidate ({failed_model}) is remembered and "
                          f"not retried unless asked (ROLLOUT_RETRY_FAILED=True)", why=run.why, load_s=round(took, 1))
    return run.finish(c.ROLLBACK_FAILED, f"rollout: rollback of {p.unit_name} to {back} ALSO FAILED: {why}; the box "
                      f"has no healthy {a.served!r}.\n{readiness_gate.journal(p.unit_name, a.journal)}", why=run.why)


STEPS = {c.PREPARED: prepare, c.DRAINING: drain_requests, c.AWAITING_HEAD: await_head, c.INSTALLED: install,
         c.STARTED: start_and_gate, c.AWAITING_VERDICT: await_verdict, c.COMMITTED: commit,
         c.ROLLING_BACK: roll_back}  # phase -> the step that records it and acts


def execute(a, say) -> int:
    """Run (or resume) the transaction for a.service; record the result; return the exit code."""
    run = Run(a, say)
    os.makedirs(run.p.dir, mode=0o755, exist_ok=True)
    step = first_step(run)
    while isinstance(step, str):  # a phase: its step records it, acts, and names what follows (or ends)
        step = STEPS[step](run)
    return step
