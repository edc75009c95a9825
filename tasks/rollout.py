"""The services step's custom operations (not a step): a vLLM service's rollout, run as the box's own transaction
(sparkctl/box/rollout.py), and following a tensor-parallel worker's to its result. Every call is rendered from the
box boundary's contract (sparkctl/box/contract.py), every outcome read by name."""

from __future__ import annotations

import json
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation

from sparkctl.box import contract
from sparkctl.fleet.wave_gate import Decision, WaveGate, describe_stop, rollout_gate, wait_turn
from sparkctl.fleet.waves import FleetWaves
from sparkctl.render.link import judge_pair, probe_argv, probe_wait
from tasks.common import box_command, connector_args, follow_transaction, mark_ready
from tasks.facts import RolloutStatus

LINK_RESULT_GRACE_S = 60  # past the probe's own timeout, how long one box waits for the other's result (its ssh), s


@dataclass(frozen=True)
class WavePlan:
    """How this run's rollouts take the fleet: the waves over the units that have something to roll out, the
    failure budget per wave, and how often a box waiting for its wave looks again."""

    waves: FleetWaves  # ROLLOUT_WAVES and MAX_UNAVAILABLE over the placed fleet
    max_fail_percentage: float  # MAX_FAIL_PERCENTAGE
    poll_s: float  # HEALTH_POLL_INTERVAL_S: a waiting box's look at the gate


@dataclass(frozen=True)
class BoxScript:
    """How this box's rollout ops call its rollout.py: where it is, the environment it needs, the settings its
    arguments come from (contract.SETTINGS, validated by the schema), how often a transaction is followed, and every
    service the box runs (one status call reads them all)."""

    script: str
    env_prefix: str
    setting_values: dict
    interval: float  # HEALTH_POLL_INTERVAL_S
    services: tuple[str, ...]

    def command(self, args: list[str]) -> StringCommand:
        return box_command(self.env_prefix, self.script, args)


@dataclass(frozen=True)
class Target:
    """One service as its rollout addresses it: its name, its port, the name it serves, and what the box's health
    gate sends it (contract.KINDS)."""

    service: str
    port: int
    served: str
    kind: str


@dataclass(frozen=True)
class Judging:
    """A coder judged inside its own rollout op: the box waits for the acceptance verdict after its health gate
    (verdict_args: sparkctl.render.units.apply_verdict_args), and judge(state, host, txn, probe_key) -> bool
    (tasks/acceptance.judge_waiting) measures and sends it, so the next wave touches its boxes only after this
    one's verdict, and a first install is judged while its verdict deadline is fresh."""

    verdict_args: dict
    judge: Callable


@dataclass(frozen=True)
class LinkCheck:
    """A tensor-parallel pair's link, judged before its swap: this box's rank of the link probe
    (sparkctl.render.link.probe_argv), how long the other box's result may take, and the floor it is judged
    against (LINK_MIN_BUSBW_GBPS)."""

    pair: tuple[str, ...]  # head first
    service: str  # the pair's coder, the one service the two boxes run as one unit
    command: StringCommand
    wait_s: float
    floor_gbps: float


@dataclass
class RolloutLedger:
    """What the rollout operations learn while pyinfra executes, for the ops after them.

    pyinfra runs deploy.py once per host while it prepares (every step has returned by then), and only afterwards
    executes the operations, every host's greenlet at once for one op; what a FunctionCommand learns at execute
    time can therefore not be a step's return value. `expected`, `checked` and `gates` must be shared ACROSS hosts:
    the boxes that prepared a rollout, which of them have one to run, and the wave gate their greenlets pass (each
    waits for its wave, a failed wave stops the rest). The rest is keyed by box.

    One per deploy run: each host's deploy.py runs in a namespace of its own, so the one object every host's run
    shares is pyinfra's State, and run_ledger(host.state) keeps the ledger there. deploy.py takes it from there and
    hands it on explicitly: to services() (which gives it to every rollout op, and they to their commands, and
    returns it), then to health() and tp_worker_result()."""

    plan: WavePlan | None = None  # set by the services step while the first box prepares
    expected: dict[str, set[str]] = field(default_factory=dict)  # service -> boxes that prepared its rollout op
    checked: dict[str, dict[str, bool]] = field(default_factory=dict)  # service -> box -> it has a rollout to run
    first_installs: dict[str, set[str]] = field(default_factory=dict)  # service -> boxes where it never committed
    gates: dict[str, WaveGate] = field(default_factory=dict)  # service -> its gate, built when the op first executes
    known_failed: dict[str, list[str]] = field(default_factory=dict)  # box -> one line per service left as it was
    status: dict[tuple, dict] = field(default_factory=dict)  # (box, executing, ...) -> rollout.py status: one call
    detached: dict[tuple[str, str], str] = field(default_factory=dict)  # (box, service) -> txn of rollout_start
    links: dict[tuple[str, ...], dict[str, dict]] = field(default_factory=dict)  # pair -> box -> its probe's result
    link_refused: dict[tuple, str] = field(default_factory=dict)  # (pair, its coder) -> why its swap was refused


LEDGER_ATTRIBUTE = "sparkctl_rollout_ledger"  # where run_ledger keeps this run's ledger on pyinfra's State


def run_ledger(state) -> RolloutLedger:
    """This deploy run's ledger, made by the first host's deploy.py to ask (no greenlet switch in between)."""
    ledger = getattr(state, LEDGER_ATTRIBUTE, None)
    if ledger is None:
        ledger = RolloutLedger()
        setattr(state, LEDGER_ATTRIBUTE, ledger)
    return ledger


def rollout_status(ledger: RolloutLedger, box: BoxScript) -> dict:
    key = (host.name, bool(host.state.is_executing), box.script, box.services)
    if key not in ledger.status:
        ledger.status[key] = host.get_fact(RolloutStatus, script=box.script, services=list(box.services),
                                           env_prefix=box.env_prefix)
    return ledger.status[key]


def first_install(status: dict) -> bool:
    """The service was never committed on the box (rollout.py status: no stamp, `applied` "") and does not run: it
    serves nothing yet, so its rollout takes no capacity away (sparkctl.fleet.waves)."""
    return not status.get("applied") and not status.get("active")


def check_in(ledger: RolloutLedger, service: str, box: str, has_work: bool | None, new: bool = False) -> None:
    """Execution time, first thing in a box's rollout op: whether it has something to roll out (None: the box does
    not pass the gate, a tensor-parallel worker's start), and whether it is a first install (new: the worker's
    start says so before its head's rollout, as a pair is new only when both boxes are). What the box runs is known
    only now (its candidate was staged by the ops before), so the gate waits for every box's word."""
    if has_work is not None:
        ledger.checked.setdefault(service, {})[box] = has_work
    if new:
        ledger.first_installs.setdefault(service, set()).add(box)


def _wave_gate_of(state, ledger: RolloutLedger, service: str) -> WaveGate:
    """The service's wave gate, built once every active box that prepared this op has checked in (every box's
    greenlet runs this op at once, and checks in after one status read): boxes with nothing to roll out are then
    known, and never waited for."""
    if service not in ledger.gates:
        active = {h.name for h in state.inventory.get_active_hosts()}
        while not (ledger.expected.get(service, set()) & active) <= set(ledger.checked.get(service, {})):
            gevent.sleep(ledger.plan.poll_s)
        if service not in ledger.gates:  # another greenlet may have built it meanwhile
            work = {b for b, has_work in ledger.checked[service].items() if has_work}
            new = ledger.first_installs.get(service, set())
            ledger.gates[service] = rollout_gate(ledger.plan.waves.plan(work, new), work, active,
                                                 ledger.plan.max_fail_percentage)
    return ledger.gates[service]


def _wave_turn(state, host, ledger: RolloutLedger, service: str) -> bool:
    """Execution time: wait for this box's wave; refuse to touch it once an earlier wave spent the failure budget."""
    gate = _wave_gate_of(state, ledger, service)
    if wait_turn(gate, host.name, lambda: gevent.sleep(ledger.plan.poll_s)) is Decision.STOP:
        host.log_styled(f"not rolling out vllm-{service} here: {describe_stop(gate)}; this box stays on its previous "
                        f"configuration; fix the candidate and rerun", fg="red", log_func=logger.error)
        return False
    boxes, number = gate.wave_of(host.name)
    if host.name in ledger.first_installs.get(service, set()):
        host.log(f"vllm-{service}: a first install (it serves nothing yet): no wait for a wave, not counted against "
                 f"MAX_UNAVAILABLE; judged with wave {number} of {len(gate.waves)} ({', '.join(boxes)})")
    elif len(gate.waves) > 1:
        host.log(f"vllm-{service}: wave {number} of {len(gate.waves)} ({', '.join(boxes)})")
    return True


def _follow_in_wave(state, host, ledger: RolloutLedger, service: str, *args, **kwargs) -> bool:
    """_follow, its result recorded in the wave gate whatever happens (a wave waits for every box's result)."""
    ok = False
    try:
        if _link_refused(host, ledger, service):  # the pair serves on, untouched: a unit that did not roll out
            return True
        ok = bool(_follow(state, host, service, *args, **kwargs))
    finally:
        _wave_gate_of(state, ledger, service).record(host.name, ok)
    return ok


def _apply(host, kw: dict, service: str, apply_cmd: StringCommand) -> dict | None:
    """Run `rollout.py apply`: {"txn", "attached"} of the transaction it started or attached to (None: failed)."""
    ok, out = host.run_shell_command(apply_cmd, **kw)
    started = next((json.loads(x) for x in reversed(out.stdout_lines) if x.startswith("{")), None) if ok else None
    if not started:
        host.log_styled(f"rollout.py apply {service} failed: {' '.join(out.stderr_lines)[-2000:]}", fg="red",
                        log_func=logger.error)
    return started


def _follow(state, host, service: str, apply_cmd: StringCommand, rollout_py, interval: float,
            wanted: str = "", handoff: dict | None = None, on_awaiting=None) -> bool:
    """Start (or attach to) the box's transaction and print its log until it records a result. Losing this
    connection changes nothing on the box: a rerun attaches to the same transaction or reads its result. After
    attaching to one that another deploy started, apply once more: what this deploy staged may differ."""
    kw = connector_args(host)
    for _round in range(2):
        started = _apply(host, kw, service, apply_cmd)
        if not started:
            return False
        if started.get("attached"):
            host.log(f"vllm-{service}: attaching to rollout {started['txn']}, already running on the box")
        mark_ready(host, handoff, False)
        result = follow_transaction(host, kw, service, started["txn"], rollout_py, interval)
        if result is None:
            return False
        done = _ended(state, host, service, started, result, wanted, handoff, on_awaiting)
        if done is not None:
            return done
    return True


def _ended(state, host, service: str, started: dict, result: dict, wanted: str, handoff: dict | None,
           on_awaiting) -> bool | None:
    """What a followed transaction's result means for the op: True or False, or None to apply once more (it was
    another deploy's)."""
    if contract.serving(result):  # committed, or rolled back: it serves a known-good configuration
        mark_ready(host, handoff, True)
    ours = not started.get("attached") or result.get("candidate") == wanted
    if result.get("outcome") == contract.AWAITING:
        return _awaiting(state, host, service, started, result, ours, on_awaiting)
    if not ours:
        host.log(f"vllm-{service}: the attached rollout ended {result.get('outcome')}; now this deploy's")
        return None
    if not contract.succeeded(result):
        host.log_styled(f"vllm-{service}: rollout {result.get('outcome')}: {result.get('message', '')[:4000]}",
                        fg="red", log_func=logger.error)
        return False
    return None if started.get("attached") else True


def _awaiting(state, host, service: str, started: dict, result: dict, ours: bool, on_awaiting) -> bool | None:
    """The transaction passed its health gate and waits for its acceptance verdict (the Acceptance step marks the
    box ready after its commit)."""
    if not ours:
        host.log_styled(f"vllm-{service}: another deploy's rollout (candidate {str(result.get('candidate'))[:12]})"
                        f" waits on the box for its acceptance verdict until {result.get('deadline')}, when the "
                        f"box decides alone; rerun then, or decide now: rollout.py verdict {service} --tx "
                        f"{started['txn']} commit|rollback", fg="red", log_func=logger.error)
        return False
    if on_awaiting is not None:  # judged here, inside the box's wave: the next wave waits for this verdict
        host.log(f"vllm-{service}: passed its health gate; the box keeps its snapshot and waits for the "
                 f"acceptance verdict until {result.get('deadline')}")
        return bool(on_awaiting(state, host, started["txn"], result.get("probe_key", "")))
    host.log(f"vllm-{service}: passed its health gate; the box keeps its snapshot and waits for the "
             f"acceptance verdict until {result.get('deadline')} (the Acceptance step sends it)")
    return None if started.get("attached") else True


def _start(state, host, ledger: RolloutLedger, service: str, apply_cmd: StringCommand) -> bool:
    """Start (or attach to) the box's transaction and return: a tensor-parallel worker's waits for its head."""
    if _link_refused(host, ledger, service):
        return True
    started = _apply(host, connector_args(host), service, apply_cmd)
    if not started:
        return False
    ledger.detached[(host.name, service)] = started["txn"]
    host.log(f"vllm-{service}: transaction {started['txn']} started; it changes nothing until the head's candidate "
             f"is installed, and keeps its own only if the head commits")
    return True


def _join(state, host, ledger: RolloutLedger, service: str, rollout_py, interval: float) -> bool:
    """Follow a transaction rollout_start started until it records its result."""
    if (_pair_of(ledger, host.name), service) in ledger.link_refused:
        host.log(f"vllm-{service}: no transaction to follow: the pair's link was refused before its swap")
        return True
    txn = ledger.detached.pop((host.name, service), None)
    if txn is None:
        host.log_styled(f"vllm-{service}: no transaction was started here to follow", fg="red", log_func=logger.error)
        return False
    result = follow_transaction(host, connector_args(host), service, txn, rollout_py, interval)
    if result is None:
        return False
    if not contract.succeeded(result):
        host.log_styled(f"vllm-{service}: rollout {result.get('outcome')}: {result.get('message', '')[:4000]}",
                        fg="red", log_func=logger.error)
        return False
    return True


def _unchanged(ledger: RolloutLedger, service: str, status: dict, retry_failed: bool) -> str:
    """Why the box needs no transaction ("" when it does): it runs exactly its staged configuration, or that
    configuration failed before and no retry was asked for (then listed for the health step's report)."""
    busy = status.get("running") or status.get("phase")
    if not busy and status.get("active") and status.get("applied") and status["applied"] == status.get("wanted"):
        return f"vllm-{service} already runs its configuration"
    failed = status.get("failed")
    if busy or not failed or retry_failed:
        return ""
    why = ([x for x in str(failed.get("why")).splitlines() if x.strip()] or ["?"])[-1][:300]
    line = (f"vllm-{service}: this configuration ({failed.get('model')}) failed at {failed.get('at')} "
            f"({why}); nothing restarted. To try it again on purpose: --data ROLLOUT_RETRY_FAILED=True")
    if host.state.is_executing:
        ledger.known_failed.setdefault(host.name, []).append(line)
        host.log_styled(line, fg="yellow", log_func=logger.warning)
    return line


def _needs_transaction(ledger: RolloutLedger, box: BoxScript, service: str, check_in_here: bool) -> tuple[str, dict]:
    """(why the box needs no transaction, "" when it does; the service's status). check_in_here: a box whose
    rollout passes the wave gate checks in, also when reading its status fails (its wave must not wait for it)."""
    executing = host.state.is_executing
    try:
        status = rollout_status(ledger, box).get(service, {})
        unchanged = _unchanged(ledger, service, status, box.setting_values["ROLLOUT_RETRY_FAILED"])
    except Exception:
        if check_in_here and executing:
            check_in(ledger, service, host.name, False)
        raise
    if executing:
        check_in(ledger, service, host.name, not unchanged if check_in_here else None, first_install(status))
    return unchanged, status


def _apply_command(box: BoxScript, target: Target, extra: dict) -> StringCommand:
    return box.command(contract.argv("apply", box.setting_values, service=target.service, port=target.port,
                                     served=target.served, kind=target.kind, **extra))


@operation()
def rollout(box: BoxScript, target: Target, ledger: RolloutLedger, handoff: dict | None = None,
            judging: Judging | None = None):
    """Run the box's transaction for a service (drain, switch, gate, commit or roll back) in its wave, unless it
    already runs exactly its staged configuration, or that configuration failed before and no retry was asked for.
    handoff: the box's entry in the gateway hand-off (tasks/common.ready_target), marked not ready meanwhile;
    judging: the coder is judged by acceptance within this op (Judging).

    "Exactly that" = the stamp rollout.py recorded after its last healthy start equals the hash of the staged unit
    and env file now, so a restart happens only when something the service reads changed."""
    unchanged, status = _needs_transaction(ledger, box, target.service, check_in_here=True)
    if unchanged:
        host.noop(unchanged)
        return
    apply_cmd = _apply_command(box, target, judging.verdict_args if judging else {})
    yield FunctionCommand(_wave_turn, (ledger, target.service), {})
    yield FunctionCommand(_follow_in_wave, (ledger, target.service, apply_cmd, box.command, box.interval),
                          {"wanted": status.get("wanted", ""), "handoff": handoff,
                           "on_awaiting": judging.judge if judging else None})


@operation()
def rollout_start(box: BoxScript, target: Target, ledger: RolloutLedger, peer: dict):
    """A tensor-parallel worker's transaction, only started (peer: rollout.py's --peer-* facts of its head): it
    changes nothing until the head's candidate is installed and keeps its own only if the head commits. No wave
    guard: head and worker are one unit, the head's rollout decides for both; rollout_join follows it."""
    unchanged, _status = _needs_transaction(ledger, box, target.service, check_in_here=False)
    if unchanged:
        host.noop(unchanged)
        return
    yield FunctionCommand(_start, (ledger, target.service, _apply_command(box, target, peer)), {})


@operation()
def rollout_join(service: str, script: str, interval: float, ledger: RolloutLedger, env_prefix: str = "",
                 follow: bool = True):
    """Wait for the transaction rollout_start started on this box (pair it with `_if=<that op>.did_change`);
    follow=False: this box started none (the tensor-parallel head: its own rollout already decided)."""
    if not follow:
        host.noop(f"vllm-{service}: nothing to follow on this box")
        return
    yield FunctionCommand(_join, (ledger, service, partial(box_command, env_prefix, script), interval), {})


# --- a tensor-parallel pair's link, judged before its swap ---------------------------------------------------------
def _pair_of(ledger: RolloutLedger, box: str) -> tuple[str, ...] | None:
    return next((pair for pair in ledger.links if box in pair), None)


def _link_refused(host, ledger: RolloutLedger, service: str) -> bool:
    """Execution time, first thing in a pair's rollout ops: the link probe refused the swap. Nothing is started on
    this box; the line goes to the health step's report, which fails the box after everything else was applied."""
    why = ledger.link_refused.get((_pair_of(ledger, host.name), service))  # the pair's coder only
    if why is None:
        return False
    line = (f"vllm-{service}: the tensor-parallel pair's link was judged before its swap and refused: {why}; nothing "
            f"was stopped")
    ledger.known_failed.setdefault(host.name, []).append(line)
    host.log_styled(line, fg="red", log_func=logger.error)
    return True


def _probe_result(ok: bool, out) -> dict:
    """link_probe.py's JSON line (the last one on stdout), or why there is none."""
    for line in reversed(list(out.stdout_lines) if out is not None else []):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    err = " ".join(out.stderr_lines)[-500:] if out is not None else ""
    return {"error": f"no result ({'exit 0' if ok else 'failed or timed out'}): {err or 'no output'}"}


def _probe_link(state, host, ledger: RolloutLedger, check: LinkCheck) -> bool:
    """Execution time, on both boxes of the pair at once (one op, every host's greenlet): run this box's rank, record
    its result, wait for the other's, judge both. A refusal changes nothing on either box: the pair's rollout ops
    then skip (_link_refused)."""
    results = ledger.links.setdefault(check.pair, {})
    ok, out = host.run_shell_command(check.command, **connector_args(host))
    results[host.name] = _probe_result(ok, out)
    deadline = time.monotonic() + check.wait_s + LINK_RESULT_GRACE_S
    while any(box not in results for box in check.pair) and time.monotonic() < deadline:
        gevent.sleep(1)
    passed, why = judge_pair(results, check.pair, check.floor_gbps)
    if passed:
        host.log(f"the pair's link before its swap: {why}")
        return True
    ledger.link_refused.setdefault((check.pair, check.service), why)
    host.log_styled(f"the pair's link before its swap: REFUSED: {why}; the pair is not swapped and serves on",
                    fg="red", log_func=logger.error)
    return True


def link_check(cfg, role, box: str, service: str) -> LinkCheck:
    """This box's part of the link probe of its tensor-parallel pair (role: its topology role; service: the pair's
    coder)."""
    return LinkCheck(tuple(role.pair), service, StringCommand(shlex.join(probe_argv(cfg, box, tuple(role.pair)))),
                     probe_wait(cfg), float(cfg.LINK_MIN_BUSBW_GBPS))


@operation()
def link_before_swap(box: BoxScript, check: LinkCheck, ledger: RolloutLedger):
    """A tensor-parallel pair's link probe across both boxes, before its rollout stops anything, when the pair has a
    change to roll out (its coder's staged configuration is not the one it runs, and no transaction runs yet): both
    boxes run this op at once, one rank each. Below LINK_MIN_BUSBW_GBPS (or a rank that fails) the pair's rollout
    ops change nothing and the pair serves on; the health step fails the box, naming the figure and the setting."""
    service = check.service
    status = rollout_status(ledger, box).get(service, {})
    ledger.links.setdefault(check.pair, {})  # the pair is known, probed or not (_pair_of)
    if status.get("running") or status.get("phase"):
        host.noop(f"vllm-{service}: a transaction already runs; its link was judged when it started")
        return
    if status.get("active") and status.get("applied") and status["applied"] == status.get("wanted"):
        host.noop(f"vllm-{service} already runs its configuration: no swap, no link probe")
        return
    failed = status.get("failed")
    if failed and not box.setting_values["ROLLOUT_RETRY_FAILED"]:
        host.noop(f"vllm-{service}: its configuration failed before and is not retried: no swap, no link probe")
        return
    yield FunctionCommand(_probe_link, (ledger, check), {})
