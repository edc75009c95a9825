#!/usr/bin/env python3
"""On the box (stdlib only; imported by rollout_txn.py): a tensor-parallel worker's transaction follows the head's.

Head and worker are one unit. The deploy writes the same SPARKCTL_TP_UNIT=<id> (a hash of both boxes' rendered unit
and env files) into both env files, so a change to either box changes both candidates and both roll out. The
worker's transaction reads the head's `rollout.py status` over the link (`--peer-status-cmd`: ssh with a key whose
forced command is that read-only status call) and:

  awaiting-head  changes nothing until the head's transaction of the same unit has drained its served model and
                 installed its candidate (a head refused before it stopped anything leaves both boxes as they were);
  started        restarts the worker; its gate is the head's gate: commit when the head committed the same unit,
                 roll back to the snapshot when the head failed or rolled back, or when the head says nothing in time.

The head's own transaction is unchanged: its gate is a real request, which only succeeds when both ranks serve.
"""

from __future__ import annotations

import json
import shlex
import time

import contract as c
import rollout_gate as sd

TP_UNIT = "SPARKCTL_TP_UNIT"

WAITING, GO, COMMITTED, FAILED = "waiting", "go", "committed", "failed"


def tp_unit_of(env: bytes) -> str:
    """The SPARKCTL_TP_UNIT of an env file ('' when it has none: not tensor-parallel)."""
    for line in env.decode("utf-8", "replace").splitlines():
        if line.startswith(f"{TP_UNIT}="):
            return line.split("=", 1)[1].strip().strip('"')
    return ""


def head_status(command: str, service: str, call_timeout: float) -> tuple[dict | None, str]:
    """The head's status of `service` ({..} from `rollout.py status`), or None and why it could not be read."""
    r = sd.run(*shlex.split(command), timeout=call_timeout)
    lines = [x for x in (r.stdout or "").splitlines() if x.startswith("{")]
    if r.returncode != 0 or not lines:
        return None, f"the head's status could not be read (rc {r.returncode}: {(r.stderr or '').strip()[-300:]})"
    try:
        return json.loads(lines[-1]).get(service) or {}, ""
    except ValueError:
        return None, "the head's status is not JSON"


def judge(head: dict | None, unit: str) -> tuple[str, str]:
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


def wait_for(a, unit: str, wanted: tuple[str, ...], timeout: float, say, alive=None) -> tuple[str, str]:
    """Poll the head until judge() says one of `wanted` or FAILED, or `timeout` s pass (-> WAITING, why).
    alive(): the worker's own check each round; a non-empty answer ends the wait as FAILED with that reason."""
    start, last_why = time.monotonic(), ""
    while time.monotonic() - start < timeout:
        if alive:
            problem = alive()
            if problem:
                return FAILED, problem
        head, err = head_status(a.peer_status_cmd, a.service, a.peer_call_timeout)
        verdict, why = judge(head, unit) if head is not None else (WAITING, err)
        if verdict in wanted or verdict == FAILED:
            return verdict, why
        if why != last_why:
            say(f"tensor-parallel: waiting for the head: {why}")
            last_why = why
        time.sleep(a.interval)
    return WAITING, f"the head did not decide within {timeout:.0f} s ({last_why})"


def worker_alive(unit_name: str):
    """A check for wait_for: the worker's unit must stay active without systemd restarting it."""
    first = sd.unit_state(unit_name)

    def check() -> str:
        st = sd.unit_state(unit_name)
        if st.get("ActiveState") != "active" or st.get("NRestarts") != first.get("NRestarts"):
            return f"{unit_name} is {st.get('ActiveState')}/{st.get('SubState')} (NRestarts={st.get('NRestarts')})"
        return ""
    return check
