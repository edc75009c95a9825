"""Acceptance, after health: a coder rollout is kept only if the quick acceptance passes.

The box owns the change (its rollout transaction): after its health gate passed, the box-side rollout keeps its
snapshot and waits up to ACCEPTANCE_VERDICT_TIMEOUT_S for a verdict; with none in time it decides alone (rolls
back; keeps when ACCEPTANCE_MODE is warn). This step is the control side: it finds a transaction waiting, runs
the quick acceptance through the proxy (sparkctl/measure/quick.py), sends `commit` or `rollback <reason>`, and
after a passed commit appends the run to the box's history. It runs inside the coder's serial rollout op as soon
as that box waits (judge_waiting; the proxy step runs before the services, so a first install is judged at once
too), so with two boxes the second is touched only after the first one's verdict and one box always serves; the
Acceptance step after Health judges any transaction found waiting otherwise (a deploy that died before sending the
verdict, rerun before the box's deadline). A deploy that changed nothing finds nothing waiting and does nothing.
Nothing here undoes anything itself: a lost connection only means no verdict, and the box decides. Every failure
this side can see is a verdict sent at once: a history that cannot be read (no yardstick can be trusted), a probe
that cannot measure, even a crash of the judge, each is a failed verdict (rollback; commit in warn mode) naming why.
After sending the verdict it follows the box's transaction to its result (the commit, or the whole rollback: drain, snapshot
restored, restart, gate), prints it, marks the box ready in the gateway hand-off again (the
rollout left it not ready while the candidate waited) and fails the host on a rollback, naming the failed figure.

Box-side commands this assumes (rollout.py, the box's transaction; see sparkctl.render.units.apply_verdict_args,
awaiting_verdict, verdict_command):
    rollout.py apply SERVICE ... --verdict-timeout S --verdict-default rollback|commit
                                      -> after the health gate, keep the snapshot and wait S s for a verdict
    rollout.py status SERVICE         -> JSON with "phase": "awaiting-verdict" and "tx": <transaction id> while one
                                         waits (and "verdict_deadline": unix seconds)
    rollout.py verdict SERVICE --tx TX commit
    rollout.py verdict SERVICE --tx TX rollback --reason TEXT
"""

from __future__ import annotations

from functools import partial

from gevent.lock import BoundedSemaphore
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, deploy, operation

from sparkctl.box import contract
from sparkctl.config import box_paths, hosts
from sparkctl.config.schema import GroupData
from sparkctl.config.settings import Settings
from sparkctl.errors import SparkctlError
from sparkctl.measure import acceptance, history, quick
from sparkctl.render.units import rollout_env
from tasks.common import box_command, connector_args, follow_transaction, mark_ready, ready_target
from tasks.facts import RolloutStatus

__all__ = ["acceptance_gate", "acceptance_step", "awaiting_verdict", "judge_waiting", "verdict_command"]
REASON_CHARS = 900  # the rollback reason kept in the box's record of the failed candidate, characters


def awaiting_verdict(status: dict) -> str | None:
    """The id of the box's rollout transaction of this service that passed health and waits for the acceptance
    verdict, or None (nothing changed, or the rollout did not wait).
    This is how the step knows the coder's configuration changed: the box only waits when its rollout changed
    something the service reads (env, unit, vLLM install), which it knows from its stamp."""
    if status.get("phase") != contract.AWAITING_VERDICT:
        return None
    tx = status.get("tx")
    return str(tx) if tx else None


def rollout_py(cfg: GroupData):
    """rollout_py(args) -> the box command running rollout.py with those arguments (contract.argv(...))."""
    return partial(box_command, rollout_env(cfg), box_paths.rollout_script(cfg.SPARKCTL_HOME))


def verdict_command(cfg: GroupData, service: str, tx: str, verdict: str, reason: str = "") -> StringCommand:
    """The box-side verdict: `rollout.py verdict SERVICE --tx TX commit|rollback [--reason TEXT]`; a rollback's
    reason is what the box remembers the candidate failed for."""
    return rollout_py(cfg)(contract.argv("verdict", {}, service=service, tx=tx, decision=verdict,
                                         reason=" ".join(reason.split())[:REASON_CHARS] or None))


def _decide(state, host_, cfg: GroupData, service: str, unit: str, tx: str, decision: str, reason: str,
            handoff: dict | None, verdict: acceptance.Verdict | None, conn) -> bool:
    """FunctionCommand body: send the verdict, follow the box until its result, then say what it did."""
    kw = connector_args(host_)
    if decision == "rollback":
        mark_ready(host_, handoff, False)  # the box drains again for the rollback
    ok, out = host_.run_shell_command(verdict_command(cfg, service, tx, decision, reason), **kw)
    if not ok:  # e.g. the box decided alone a moment ago: what it did is in its result
        host_.log_styled(f"{unit}: the box did not take the verdict {decision}: "
                         f"{' '.join(out.stderr_lines)[-1000:]}", fg="yellow", log_func=logger.warning)
    result = follow_transaction(host_, kw, service, tx, rollout_py(cfg), cfg.HEALTH_POLL_INTERVAL_S)
    if result is None:  # lost track: the box finishes alone
        return False
    if result.get("outcome") == contract.AWAITING:
        host_.log_styled(f"{unit}: still waits for its acceptance verdict on the box (until {result.get('deadline')},"
                         f" then it decides alone)", fg="red", log_func=logger.error)
        return False
    if contract.serving(result):  # committed, or rolled back and serving its previous configuration
        mark_ready(host_, handoff, True)
    return _report(state, host_, cfg, unit, result, decision, reason, verdict, conn)


def _report(state, host_, cfg: GroupData, unit: str, result: dict, decision: str, reason: str,
            verdict: acceptance.Verdict | None, conn) -> bool:
    """What the box did with the verdict, said; a commit this run decided is recorded in the box's history."""
    outcome, message = result.get("outcome"), str(result.get("message", ""))[:4000]
    by = (result.get("verdict") or {}).get("by")
    if contract.succeeded(result):
        host_.log(f"{unit}: {outcome}: {message}")
        if decision == "commit" and by == "control" and verdict is not None:
            return _record(state, host_, conn, cfg, verdict)
        if by == "box":
            host_.log_styled(f"{unit}: kept by the box's own decision, not by this acceptance run ({reason})",
                             fg="yellow", log_func=logger.warning)
        return True
    why = reason if by == "control" else (result.get("verdict") or {}).get("reason") or result.get("why") or reason
    what = "rolled back" if outcome == contract.ROLLED_BACK else outcome
    host_.log_styled(f"{unit}: {what}: {why}\n{message}", fg="red", log_func=logger.error)
    return False


def _record(state, host_, conn, cfg: GroupData, verdict: acceptance.Verdict) -> bool:
    """FunctionCommand body, after the box confirmed the commit: the run joins the box's history, with the box's
    clock and this machine's (history.append refuses the line when they disagree by more than
    ACCEPTANCE_CLOCK_SKEW_S, or when the record is no evidence: sparkctl/measure/evidence.py)."""
    try:
        line = quick.record_accepted(conn, cfg, verdict)
    except SparkctlError as exc:  # the rollout stands; only the history missed a line: say so, do not fail
        logger.warning(f"{host_.name}: accepted, but the history was not written: {exc}")
        return True
    if line:
        kind = "the baseline" if line["history"]["baseline"] else "history"
        clocks = line["history"].get("clocks") or {}
        logger.info(f"{host_.name}: acceptance run {line['history']['id']} recorded as {kind} (box clock "
                    f"{clocks.get('box')}, control clock {clocks.get('control')})")
    return True


@operation()
def acceptance_gate(settings: Settings, service, handoff: dict | None = None):
    """Judge a coder rollout that waits for its verdict; send commit or rollback; fail the host on a rollback."""
    if not host.state.is_executing:
        host.noop("checked after health")
        return
    cfg = settings.cfg
    if not cfg.ACCEPTANCE_ENABLED:
        host.noop("acceptance is off (ACCEPTANCE_ENABLED)")
        return
    status = host.get_fact(RolloutStatus, script=box_paths.rollout_script(cfg.SPARKCTL_HOME), services=[service.name],
                           env_prefix=rollout_env(cfg)).get(service.name, {})
    tx = awaiting_verdict(status)
    if tx is None:
        host.noop(f"{service.unit}: no rollout waits for an acceptance verdict")
        return
    yield FunctionCommand(judge_waiting(settings, service, handoff), (tx, status.get("probe_key") or ""), {})


# The quick probe runs its own asyncio loop, and pyinfra runs every box's greenlet in one thread, where only one loop
# may run at a time: the boxes of a wave roll out together, and are measured one after another.
ONE_PROBE_AT_A_TIME = BoundedSemaphore(1)


def judge_waiting(settings: Settings, service, handoff: dict | None):
    """FunctionCommand body (state, host, tx, probe_key) -> bool: measure the waiting candidate through the proxy
    (probe_key: the box's drain exemption for this probe, when it keeps clients out meanwhile), send the verdict,
    follow the box to its result. The coder's rollout calls it as soon as its box waits (so the next wave starts only
    after this wave's verdicts); acceptance_gate, for one found waiting later. The boxes of one wave are measured
    one after another (ONE_PROBE_AT_A_TIME), their verdicts waiting on their boxes meanwhile."""
    cfg = settings.cfg

    def judge(state, host, tx: str, probe_key: str = "") -> bool:  # pyinfra passes state and host by these names
        try:
            conn = hosts.find(host.name)
            with ONE_PROBE_AT_A_TIME:
                verdict = quick.acceptance_of(conn, settings, unit=service.unit, probe_key=probe_key)
        except history.HistoryError as exc:  # no yardstick can be trusted: the verdict fails now, not at the deadline
            return _no_verdict(state, host, settings, service, tx, handoff,
                               f"acceptance failed: the box's history cannot be read: {exc}")
        except SparkctlError as exc:  # could not measure at all: that is the candidate's failure too
            return _no_verdict(state, host, settings, service, tx, handoff, f"acceptance could not measure: {exc}")
        except Exception as exc:  # noqa: BLE001 - a crash sends no verdict and the box would wait for its deadline
            logger.exception(f"{host.name}: the acceptance verdict crashed")
            return _no_verdict(state, host, settings, service, tx, handoff,
                               f"acceptance failed: the verdict crashed: {type(exc).__name__}: {exc}")
        logger.info(f"{host.name}: acceptance of {service.unit}\n" + "\n".join(c.line() for c in verdict.checks)
                    + ("\n" + "\n".join(verdict.notes) if verdict.notes else ""))
        (logger.info if verdict.passed else logger.warning)(f"{host.name}: {verdict.reason()}")
        return _decide(state, host, cfg, service.name, service.unit, tx, verdict.decision, verdict.reason(), handoff,
                       verdict, conn)
    return judge


def _no_verdict(state, host_, settings: Settings, service, tx: str, handoff: dict | None, reason: str) -> bool:
    """The verdict failed before any figure was judged (the history unreadable, nothing measured, a crash): sent to
    the box at once as a failed verdict, never left to its deadline (warn mode keeps the flip, as for any failure)."""
    cfg = settings.cfg
    decision = contract.decision(False, cfg.ACCEPTANCE_MODE)
    logger.warning(f"{host_.name}: {reason} -> {decision}")
    return _decide(state, host_, cfg, service.name, service.unit, tx, decision, reason, handoff, None, None)


@deploy("Acceptance")
def acceptance_step(settings: Settings) -> None:
    """The coder only: embedders have no speed or retrieval floor of their own."""
    if settings.coder.headless or settings.coder not in settings.services:
        return
    handoff = ready_target(settings.cfg, settings.coder.served_name) if settings.role.serves_api else None
    # _serial: one box at a time (one quick run must not load the other box's measurement, and the probe's asyncio
    # loop cannot run twice in pyinfra's one gevent thread)
    acceptance_gate(name="Acceptance: a changed coder is as fast and as right as its baseline and floors",
                    settings=settings, service=settings.coder, handoff=handoff, _serial=True)
