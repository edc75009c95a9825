#!/usr/bin/env python3
"""On the box (stdlib only; imported by watchdog.py): the watchdog's view of a tensor-parallel pair, which it treats
as one unit, exactly as the rollout does (rollout_peer.py).

On the head, the coder's entry in the watchdog's configuration has a "pair": how to read the worker's
`rollout.py status` over the link (the pair's ssh key; on the worker its forced command is that read-only call,
accepted only from the head's link address). Every check of the head's coder reads it first:
- it cannot be read (the link or the worker box is gone): "unknown", nothing judged. A restart could not bring the
  worker along; once the worker is back, its engine is a new one and the rule below restarts the pair.
- the worker's transaction is running or open (a deploy, its rollback, its part of a pair restart): "rollout",
  nothing judged, and the head is judged afresh afterwards (a CI run once saw the head restarted alone while the
  worker was still restoring its snapshot).
- the boxes run different tensor-parallel units: "unknown"; a deploy must bring them together.
- once the pair has served (the head's counters moved, or its probe answered) with a worker engine, that engine
  being gone (unit not active) or replaced (another systemd InvocationID: systemd restarted it) is positive
  evidence: the head's group has lost its rank 1 and cannot serve again without both restarting. "wedged".
Then the head's own evidence, as on any box (its counters frozen with work pending, or, idle, a probe that gets no
token): a dead or SIGSTOPped worker shows there too, as the head's collective never returns.

A wedged pair is restarted through the head's transaction (`rollout.py restart coder ... {peer}`: the pair's options,
rollout_restart.py), which announces the restart in the head's status and restarts the head only once the worker's
part has started. On the worker, the watchdog has no API to judge; it follows (follow_head()): every interval it
reads the head's status (the worker's own key, the same read-only call the worker's deploy transaction uses), and
when the head announces a pair restart of this pair it starts the worker's part (`rollout.py restart coder --kind
none ...`) once. Neither box ever makes the other do anything.
"""

from __future__ import annotations

import shlex
import subprocess

try:
    from sparkctl.box import contract as c
except ImportError:  # on the box: the scripts sit side by side
    import contract as c


def read_peer(command: str, service: str, timeout: float) -> tuple[dict | None, str]:
    """The other box's `rollout.py status` of `service`, or None and why not (rc, its stderr's tail)."""
    try:
        r = subprocess.run(shlex.split(command), capture_output=True, text=True, timeout=timeout,
                           stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"{type(exc).__name__}: {exc}"
    status = c.read_status(r.stdout, service) if r.returncode == 0 else None
    if status is None:
        return None, f"exit {r.returncode}: {(r.stderr or r.stdout or '').strip()[-200:]}"
    return status, ""


def before_judging(worker: dict | None, err: str, head_unit: str) -> tuple[str, str] | None:
    """Pure: (verdict, why) when the head must not be judged now, None when it may be."""
    if worker is None:
        return "unknown", f"the worker's status cannot be read over the link ({err}); the pair is not judged"
    if worker.get("running") or worker.get("phase"):
        return "rollout", (f"the worker's transaction {worker.get('current') or '?'} owns the pair (phase "
                           f"{worker.get('phase') or 'none'}, running {bool(worker.get('running'))})")
    if worker.get("tp_unit_live") != head_unit:
        return "unknown", (f"the boxes run different tensor-parallel units (head {head_unit[:12] or 'none'}, worker "
                           f"{(worker.get('tp_unit_live') or 'none')[:12]}): a deploy must bring them together")
    return None


def worker_lost(worker: dict, served_with: str | None) -> str:
    """Pure: why the pair lost the worker engine it last served with ('' when it did not, or has not served yet)."""
    if not served_with:
        return ""
    if not worker.get("active"):
        return (f"the worker's engine is gone (its unit is not active; the pair last served with invocation "
                f"{served_with[:12]}): the head's group has lost its rank 1")
    if worker.get("invocation") != served_with:
        return (f"the worker's engine was restarted by systemd (invocation {served_with[:12]} -> "
                f"{(worker.get('invocation') or '?')[:12]}) after the pair served: the head's group has lost its "
                f"rank 1")
    return ""


def head_unit(pair: dict) -> str:
    """The tensor-parallel unit the head runs (its live env file, root-only: the watchdog runs as root)."""
    try:
        with open(pair["env_file"], "rb") as f:
            return c.tp_unit_of(f.read())
    except OSError:
        return ""


def follow_head(dog, follow: dict, log) -> str:
    """The worker's watchdog, every interval: start this box's part of a pair restart the head announces, once per
    restart. Returns what it found: "rollout", "unknown", "idle" or "followed"."""
    svc = {"name": follow["service"], "unit": follow["unit"]}
    if dog.rollout_running(svc):
        return "rollout"
    head, err = read_peer(follow["peer_status_command"], follow["service"], follow["call_timeout_s"])
    if head is None:
        return "unknown"
    pair = head.get("restarting") if head.get("running") else ""
    rec = dog.record(follow["service"])
    if not pair or pair == rec.get("followed"):
        return "idle"
    rec["followed"] = pair
    rec["followed_total"] = rec.get("followed_total", 0) + 1
    dog.save()  # counted before it runs: a pair restart is followed once, even across the watchdog's restarts
    log(dog.WARNING, f"{follow['unit']}: the head restarts the pair (transaction {pair}): restarting this worker "
                     f"with it")
    ok = dog.run_argv(follow["restart_command"])
    log(dog.NOTICE if ok else dog.WARNING, f"{follow['unit']}: its part of the pair restart {pair} "
                                           f"{'ended restarted' if ok else 'FAILED (see above)'}")
    return "followed"
