#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout_txn.py and rollout_restart.py): the two boxes of a tensor-parallel
pair change and restart as one unit.

Head and worker are one unit. The deploy writes the same SPARKCTL_TP_UNIT=<id> (a hash of both boxes' rendered unit
and env files) into both env files, so a change to either box changes both candidates and both roll out. Each box
reads the other's `rollout.py status` over the link (`--peer-status-cmd`: ssh with the pair's key, whose forced
command on the other box is that read-only status call, accepted only from this box's link address). Neither box
ever makes the other do anything: each runs its own transaction, and the worker's follows the head's.

The deploy's transaction. The worker's:
  awaiting-head  changes nothing until the head's transaction of the same unit has drained its served model and
                 installed its candidate (a head refused before it stopped anything leaves both boxes as they were);
  started        restarts the worker; its gate is the head's gate: commit when the head committed the same unit,
                 roll back to the snapshot when the head failed or rolled back, or when the head says nothing in time.
The head's own transaction is unchanged: its gate is a real request, which only succeeds when both ranks serve.

A pair restart (the watchdog's restart of a wedged pair, or `rollout.py restart` on the head by hand), in the same
transient unit as each box's deploy transaction:
  head    refuses (`refused`) while either box's transaction is open or running, or the boxes run different units;
          `peer-absent` when it cannot read the worker. Otherwise it announces the restart in its status
          (`restarting` = its transaction id) and waits until the worker's status says the worker's part follows it
          (`peer-absent` when it does not within --peer-timeout: the head is never restarted alone). Then it drains,
          restarts and gates like any restart: a real request, which only succeeds when both ranks serve again.
  worker  started by the worker's watchdog when it reads the head's announcement (watchdog_pair.py): restarts the
          worker's engine at once (a wedged or lost rank is replaced before the head starts again), stays up
          ROLLOUT_WORKER_SETTLE_S, and ends with the head's result: `restarted` when the head's restart passed its
          gate, `restart-failed` when it failed, `head-absent` (nothing touched) when the head runs no such restart.
"""

from __future__ import annotations

import os
import shlex
import time

import contract as c
import readiness_gate
from boxio import read_json, write_json

TP_UNIT = c.TP_UNIT
tp_unit_of = c.tp_unit_of

WAITING, GO, COMMITTED, FAILED = "waiting", "go", "committed", "failed"


def peer_status(command: str, service: str, call_timeout: float) -> tuple[dict | None, str]:
    """The other box's status of `service` (contract.STATUS_FIELDS), or None and why it could not be read."""
    r = readiness_gate.run(*shlex.split(command), timeout=call_timeout)
    status = c.read_status(r.stdout, service) if r.returncode == 0 else None
    if status is None:
        return None, f"the other box's status could not be read (rc {r.returncode}: {(r.stderr or '').strip()[-300:]})"
    return status, ""


head_status = peer_status  # the worker's transaction reads its head's


def head_progress(head: dict | None, unit: str) -> tuple[str, str]:
    """Pure: where the head's transaction of tensor-parallel unit `unit` stands -> (WAITING|GO|COMMITTED|FAILED,
    why). GO: its candidate is installed (the worker may restart); COMMITTED: it passed its gate and kept it."""
    if head is None:
        return WAITING, "the head does not answer"
    staged, live, phase = head.get("tp_unit", ""), head.get("tp_unit_live", ""), head.get("phase", "")
    if staged == unit and head.get("failed"):
        return FAILED, f"the head's candidate failed: {head['failed'].get('why')}"
    if staged == unit and phase == c.ROLLING_BACK:
        return FAILED, "the head is rolling back its candidate"
    if live == unit and committed(head):
        return COMMITTED, f"the head committed it (transaction {(head.get('last') or {}).get('txn')})"
    if live == unit and phase in c.HEAD_STARTED:
        return GO, f"the head installed its candidate (phase {phase})"
    return WAITING, f"the head's phase is {phase or 'idle'!r}, its staged unit {staged[:12] or 'none'}"


def committed(head: dict) -> bool:
    """The head's status says: no transaction open or running, active, on its stamp = what it has staged."""
    idle = not head.get("phase") and not head.get("running")
    return idle and bool(head.get("active")) and bool(head.get("applied")) and head.get("applied") == head.get("wanted")


# --- a pair restart: pure judgements of the other box's status --------------------------------------------------
def pair_problem(peer: dict, unit: str) -> str:
    """Pure: why the pair must not be restarted now, from the other box's status ('' when it may)."""
    if peer.get("running"):
        return f"the other box's transaction {peer.get('current') or '?'} is running (it owns the pair)"
    if peer.get("phase"):
        return f"the other box's transaction is open (phase {peer['phase']}): the deploy's next run resumes it"
    if peer.get("tp_unit_live") != unit:
        return (f"the boxes run different tensor-parallel units ({unit[:12] or 'none'} here, "
                f"{(peer.get('tp_unit_live') or 'none')[:12]} there): a deploy must bring them together")
    return ""


def worker_follows(worker: dict | None, txn: str) -> tuple[str, str]:
    """Pure, for the head's restart: has the worker's part of pair restart `txn` started? (GO|WAITING, why)"""
    if worker is None:
        return WAITING, "the worker does not answer"
    if worker.get("restarting") == txn and worker.get("running"):
        return GO, f"the worker's restart {worker.get('current')} follows it"
    return WAITING, f"the worker's restart has not started yet (running: {bool(worker.get('running'))})"


def head_restart(head: dict | None, unit: str) -> tuple[str, str]:
    """Pure, for the worker's part: the pair restart the head announces for `unit` -> (its txn id or '', why)."""
    if head is None:
        return "", "the head's status could not be read"
    txn = head.get("restarting") or ""
    if not txn or not head.get("running"):
        return "", "the head runs no pair restart"
    if head.get("tp_unit_live") != unit:
        return "", f"the head's pair restart {txn} is of another tensor-parallel unit"
    return txn, f"the head restarts the pair (transaction {txn})"


def restart_result(head: dict | None, txn: str) -> tuple[str, str]:
    """Pure, for the worker's part: how the head's pair restart `txn` ended (WAITING|COMMITTED|FAILED, why)."""
    if head is None:
        return WAITING, "the head does not answer"
    last = head.get("last") or {}
    if last.get("txn") == txn:
        first = (last.get("message") or "").splitlines()[:1]
        verdict = COMMITTED if last.get("outcome") == c.RESTARTED else FAILED
        return verdict, f"the head's restart {txn} ended {last.get('outcome')}: {first[0] if first else ''}"
    if head.get("running") and head.get("restarting") == txn:
        return WAITING, f"the head's restart {txn} is still running"
    return FAILED, f"the head's restart {txn} ended without a result"


# --- the restarting mark: what `status` says while a restart-only transaction takes part in a pair restart ---------
def mark(p, own: str, pair: str) -> None:
    """p: the service's contract.Paths."""
    write_json(p.restarting, {"own": own, "pair": pair}, 0o644)


def unmark(p) -> None:
    try:
        os.unlink(p.restarting)
    except FileNotFoundError:
        pass


def restarting(p, running: bool, current: str) -> str:
    """The status field: the pair restart this box's RUNNING transaction takes part in ('' for a stale mark)."""
    m = read_json(p.restarting)
    return m.get("pair", "") if running and m.get("own") == current else ""


# --- polling the other box ---------------------------------------------------------------------------------------
def poll(a, decide, wanted: tuple[str, ...], timeout: float, say, alive=None, who: str = "the head") \
        -> tuple[str, str]:
    """Read the other box's status every a.interval until decide(status) says one of `wanted` or FAILED, or
    `timeout` s pass (-> WAITING, why). alive(): this box's own check each round; a non-empty answer ends the wait
    as FAILED with that reason."""
    start, last_why = time.monotonic(), ""
    while time.monotonic() - start < timeout:
        problem = alive() if alive else ""
        if problem:
            return FAILED, problem
        peer, err = peer_status(a.peer_status_cmd, a.service, a.peer_call_timeout)
        verdict, why = decide(peer) if peer is not None else (WAITING, err)
        if verdict in wanted or verdict == FAILED:
            return verdict, why
        if why != last_why:
            say(f"tensor-parallel: waiting for {who}: {why}")
            last_why = why
        time.sleep(a.interval)
    return WAITING, f"{who} did not decide within {timeout:.0f} s ({last_why})"


def wait_for(a, unit: str, wanted: tuple[str, ...], timeout: float, say, alive=None) -> tuple[str, str]:
    """The worker's transaction: poll the head until head_progress() says one of `wanted` or FAILED, or `timeout`
    s pass."""
    return poll(a, lambda head: head_progress(head, unit), wanted, timeout, say, alive)


def worker_alive(unit_name: str):
    """A check for poll(): the worker's unit must stay active without systemd restarting it."""
    first = readiness_gate.unit_state(unit_name)

    def check() -> str:
        st = readiness_gate.unit_state(unit_name)
        if st.get("ActiveState") != "active" or st.get("NRestarts") != first.get("NRestarts"):
            return f"{unit_name} is {st.get('ActiveState')}/{st.get('SubState')} (NRestarts={st.get('NRestarts')})"
        return ""
    return check
