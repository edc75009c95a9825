"""The box boundary, written once (stdlib only): what the deploy and the box-side rollout say to each other.

The box imports it by file name (`import contract`: rollout.py puts its own folder on sys.path; the deploy uploads
it with the other rollout scripts), the control side as `sparkctl.box.contract`. It holds:

- PHASES and TRANSITIONS: the phases a transaction records, and which phase may follow which. The transaction's
  only phase writer (rollout_txn.Txn.set_phase) refuses any other.
- OUTCOMES: how every rollout.py command can end, by name, with its exit code (each failure its own code) and
  whether the service serves a known-good configuration afterwards. The control side compares names, never codes.
- The JSON documents: STATUS_FIELDS (`rollout.py status`, per service; read_status() reads it back, as a peer does
  over the link), FAILED_FIELDS, LAST_FIELDS, RESULT_FIELDS (vllm-<service>.result.json) and FOLLOW_FIELDS
  (`rollout.py follow`'s "@@" line).
- TP_UNIT: the env-file line that makes the two boxes of a tensor-parallel pair one unit (tp_unit_of() reads it).
- Paths: where the box keeps each service's files (live, staged, the transaction's state and snapshot, stamp,
  result, log, failure records), and PROBE_HEADER, the acceptance probe's pass through a drained proxy.
- Retiring: the transient units of retire_services.py (a whole box: RETIRE_UNIT; the services it no longer runs, the
  deploy's --stale run: STALE_UNIT), their outcomes and codes (RETIRE_CODES), and vllm_args_of(), the `vllm serve`
  words of an env file (what a stale service served, and on which port).
- decision(): the acceptance verdict's commit or rollback under ACCEPTANCE_MODE (warn keeps, fail undoes).
- ARGS: every argument of every rollout.py command: its flag, where its value comes from (a group-data setting, a
  fact of the service, of its role, or of the call), its type, and the commands that take it. rollout.py's parser
  (parser()), the argv the deploy sends (argv()), the watchdog's {limits} (setting_argv()) and the transient
  unit's argv (forward()) are all generated from it; FACTS_ARGS likewise box_textfile.py's limits (facts_argv()).

An argument whose value is a setting has no default on the box: it is required, and the deploy always sends it
(argv() refuses to render a command without it). Not a deploy-written file: a run's whole input is then its
command line, which systemd keeps with the transient unit (`systemctl show -p ExecStart`, the journal), so what a
transaction acted on can be read and repeated from there; and a watchdog restart can never read half-rewritten
limits while a deploy runs, nor a resumed transaction limits that no deploy sent it.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

# --- phases of a transaction (recorded in STATE_DIR/rollout/vllm-<service>.txn/state.json) ----------------------
IDLE = ""  # no transaction open (no state.json)
PREPARED = "prepared"  # snapshot of exactly what the candidate replaces
DRAINING = "draining"  # the proxy answers 503 for the served model; in-flight requests finish
AWAITING_HEAD = "awaiting-head"  # tensor-parallel worker: nothing changes until the head's candidate is in place
INSTALLED = "installed"  # candidate renamed into place, daemon-reload
STARTED = "started"  # restarted, gating on a real request
AWAITING_VERDICT = "awaiting-verdict"  # passed the gate; waits for the acceptance verdict (rollout_verdict.py)
COMMITTED = "committed"  # stamp = candidate; cleanup (snapshot dropped, proxy reopened) follows
ROLLING_BACK = "rolling-back"  # snapshot restored, daemon-reload, restart, gated like a forward step
PHASES = (IDLE, PREPARED, DRAINING, AWAITING_HEAD, INSTALLED, STARTED, AWAITING_VERDICT, COMMITTED, ROLLING_BACK)
FORWARD = (PREPARED, DRAINING, AWAITING_HEAD, INSTALLED, STARTED)  # resumed by trying the candidate again
HEAD_STARTED = (INSTALLED, STARTED, AWAITING_VERDICT)  # a head's phases once its candidate is in place
ROLLOUT_UNIT = "sparkctl-rollout-{service}.service"  # the transient unit a transaction (or a restart) runs in
UNIT_RUNNING = ("active", "activating", "reloading")  # that unit's ActiveStates while its command still runs


def rollout_unit(service: str) -> str:
    return ROLLOUT_UNIT.format(service=service)

# phase -> the phases that may be recorded after it. A forward phase may go back to PREPARED (a later run resumes
# it: the snapshot stays the last known-good state) and to ROLLING_BACK from anywhere before the commit; the
# rollback and the commit's cleanup may be resumed too (recorded again); IDLE closes a transaction.
TRANSITIONS: dict[str, tuple[str, ...]] = {
    IDLE: (PREPARED,),
    PREPARED: (PREPARED, DRAINING, AWAITING_HEAD, INSTALLED, ROLLING_BACK),
    DRAINING: (PREPARED, AWAITING_HEAD, INSTALLED, ROLLING_BACK),
    AWAITING_HEAD: (PREPARED, INSTALLED, ROLLING_BACK, IDLE),  # IDLE: the head never came, nothing was changed
    INSTALLED: (PREPARED, STARTED, ROLLING_BACK),
    STARTED: (PREPARED, AWAITING_VERDICT, COMMITTED, ROLLING_BACK),
    AWAITING_VERDICT: (AWAITING_VERDICT, COMMITTED, ROLLING_BACK),
    COMMITTED: (COMMITTED, IDLE),
    ROLLING_BACK: (ROLLING_BACK, IDLE),
}


class TransitionRefused(RuntimeError):
    """A phase change the TRANSITIONS table does not allow: a defect of the transaction, never acted on."""


def check_transition(before: str, after: str) -> None:
    allowed = TRANSITIONS.get(before, ())
    if after not in allowed:
        raise TransitionRefused(f"rollout: the transaction may not go from phase {before or 'idle'!r} to "
                                f"{after or 'idle'!r} (allowed: {', '.join(x or 'idle' for x in allowed)})")


# --- outcomes and exit codes ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    name: str  # "outcome" in the result file and in `rollout.py follow`'s result
    code: int  # the exit code of the command that ends with it
    serving: bool  # recorded: the service serves a known-good configuration afterwards (the candidate, or the one
    #                before it); the deploy marks its endpoint ready again
    recorded: bool  # written to vllm-<service>.result.json (else only the command's own exit)
    meaning: str


READY, UNCHANGED, RESTARTED, AWAITING = "ready", "unchanged", "restarted", AWAITING_VERDICT
NOT_STARTED, NOTHING_STAGED, ROLLED_BACK, ROLLBACK_FAILED = "not-started", "nothing-staged", "rolled-back", \
    "rollback-failed"
REJECTED, RESTART_FAILED, KNOWN_FAILED, NO_RESULT = "rejected", "restart-failed", "known-failed", "no-result"
REFUSED, OWNED, HEAD_FAILED, NO_PREVIOUS = "refused", "owned", "head-failed", "failed-no-previous"
NOTHING_INSTALLED, HEAD_ABSENT, VERDICT_REFUSED, USAGE = "nothing-installed", "head-absent", "verdict-refused", \
    "usage"
PEER_ABSENT = "peer-absent"

OUTCOMES = (
    Outcome(READY, 0, True, True, "the candidate passed its gate (and its acceptance verdict) and is committed"),
    Outcome(UNCHANGED, 0, True, True, "the service already runs the staged candidate; nothing restarted"),
    Outcome(RESTARTED, 0, True, True, "the committed configuration was restarted and is ready (not running before, "
            "or the watchdog's restart)"),
    Outcome(AWAITING, 0, True, False, "follow: passed its health gate, waits for the acceptance verdict (none sent "
            "yet)"),
    Outcome(NOT_STARTED, 1, False, False, "apply/restart: systemd-run could not start the transient unit"),
    Outcome(NOTHING_STAGED, 2, False, True, "no staged unit and env file: nothing to do, nothing restarted"),
    Outcome(ROLLED_BACK, 3, True, True, "the candidate failed (gate or verdict) and the snapshot serves again"),
    Outcome(ROLLBACK_FAILED, 4, False, True, "the candidate failed and the rollback failed too: nothing healthy"),
    Outcome(REJECTED, 5, True, True, "the candidate was refused before anything stopped (missing venv, bad "
            "arguments)"),
    Outcome(RESTART_FAILED, 6, False, True, "the committed configuration does not come up again"),
    Outcome(KNOWN_FAILED, 7, True, True, "this candidate failed before; not retried without --retry-failed"),
    Outcome(NO_RESULT, 8, False, False, "follow --wait: the transient unit ended without recording a result"),
    Outcome(REFUSED, 9, False, True, "restart-only: refused, a transaction of the deploy is open (it owns the "
            "service; tensor-parallel: on either box of the pair), or the pair's boxes run different units"),
    Outcome(OWNED, 10, True, False, "restart: refused, the transient unit is already active (a rollout owns it)"),
    Outcome(HEAD_FAILED, 11, True, True, "tensor-parallel worker: the head's candidate failed; the worker changed "
            "nothing"),
    Outcome(NO_PREVIOUS, 12, False, True, "a first install failed: removed again, nothing to roll back to"),
    Outcome(NOTHING_INSTALLED, 13, False, True, "restart-only: no committed configuration is installed"),
    Outcome(HEAD_ABSENT, 14, True, True, "tensor-parallel worker: the head did not decide in time (or runs no pair "
            "restart to follow); the worker changed nothing"),
    Outcome(VERDICT_REFUSED, 15, True, False, "verdict: not the transaction that waits (or it has another verdict); "
            "nothing written"),
    Outcome(PEER_ABSENT, 16, False, True, "tensor-parallel head's restart: the worker's status could not be read, "
            "or its part of the pair restart did not start in time; nothing was restarted"),
    Outcome(USAGE, 64, True, False, "the command line was refused (a missing or bad argument): nothing was touched"),
)
BY_NAME = {o.name: o for o in OUTCOMES}
SUCCEEDED = frozenset(o.name for o in OUTCOMES if o.code == 0)  # what was asked is what serves
SERVING = frozenset(o.name for o in OUTCOMES if o.serving and o.recorded)  # a result after which it serves


def code(name: str) -> int:
    return BY_NAME[name].code


def succeeded(result: Mapping) -> bool:
    """A recorded result (or follow's pseudo-result) whose service serves what was asked."""
    return result.get("outcome") in SUCCEEDED


def serving(result: Mapping) -> bool:
    """A recorded result after which the service serves a known-good configuration (the candidate, or the
    snapshot it rolled back to): its endpoint may be marked ready again."""
    return result.get("outcome") in SERVING


# --- JSON documents ------------------------------------------------------------------------------------------------
STATUS_FIELDS = ("active", "applied", "wanted", "running", "current", "phase", "tp_unit", "tp_unit_live", "tx",
                 "verdict_deadline", "verdict_default", "probe_key", "failed", "last",  # `status`, per service
                 "invocation",  # the vLLM unit's systemd InvocationID: a new one each time its engine (re)starts
                 "restarting")  # the pair restart a running restart-only transaction takes part in (the head's
#                                 transaction id, on both boxes), "" when none
FAILED_FIELDS = ("at", "why", "model")  # status["failed"]: the staged candidate's failure record, or null
LAST_FIELDS = ("txn", "outcome", "finished", "message", "candidate", "by")  # status["last"]: the last result
RESULT_REQUIRED = ("txn", "service", "unit", "started", "rc", "outcome", "message", "finished", "total_s")
RESULT_OPTIONAL = ("candidate", "model", "why", "load_s", "drain_s", "restart_s", "verdict", "failed_at", "by",
                   "restart_only", "stamp", "cold_start")  # cold_start: the gate was a cold start's (rollout_txn.py)
RESULT_FIELDS = RESULT_REQUIRED + RESULT_OPTIONAL  # vllm-<service>.result.json
FOLLOW_FIELDS = ("offset", "running", "done", "result", "awaiting")  # the "@@ {...}" line of `follow`
FOLLOW_AWAITING_FIELDS = ("candidate", "verdict_deadline", "probe_key")  # added while it awaits a verdict


def read_status(stdout: str, service: str) -> dict | None:
    """One service's entry from `rollout.py status` output (its last JSON line), None when there is none."""
    lines = [x for x in (stdout or "").splitlines() if x.startswith("{")]
    try:
        doc = json.loads(lines[-1]) if lines else None
    except ValueError:
        return None
    entry = doc.get(service) if isinstance(doc, dict) else None
    return entry if isinstance(entry, dict) else None


TP_UNIT = "SPARKCTL_TP_UNIT"  # the deploy writes the same id into both env files of a tensor-parallel pair


def tp_unit_of(env: bytes) -> str:
    """The SPARKCTL_TP_UNIT of an env file ('' when it has none: not tensor-parallel)."""
    for line in env.decode("utf-8", "replace").splitlines():
        if line.startswith(f"{TP_UNIT}="):
            return line.split("=", 1)[1].strip().strip('"')
    return ""


# --- where the box keeps each service's files ----------------------------------------------------------------------
UNIT_DIR = "/etc/systemd/system"  # systemd's own unit directory: the live vLLM units
STAGED = ".next"  # a candidate file beside its live one (the unit's in ENV_DIR: outside systemd's search path)


def rollout_dir(state_dir: str) -> str:
    """STATE_DIR/rollout: each service's stamp, result, log, failure records and open transaction (root's)."""
    return f"{state_dir}/rollout"


def watchdog_dir(state_dir: str) -> str:
    return f"{state_dir}/watchdog"


def watchdog_state(state_dir: str) -> str:
    """The watchdog's record of its restarts (`sparkctl status` reads it)."""
    return f"{watchdog_dir(state_dir)}/state.json"


def unit_of(service: str) -> str:
    """The systemd unit of a vLLM service."""
    return f"vllm-{service}.service"


class Paths:
    """One service's files on the box. Service "*" gives the glob of every service's files (service_of() reads a
    service's name back from a path the glob found)."""

    def __init__(self, service: str, env_dir: str, rollout: str, unit_dir: str = UNIT_DIR):
        """rollout: the rollout directory, rollout_dir(STATE_DIR)."""
        self.service = service
        self.unit_name = unit_of(service)
        self.env = f"{env_dir}/vllm-{service}.env"
        self.env_next = f"{self.env}{STAGED}"
        self.unit = f"{unit_dir}/{self.unit_name}"
        self.unit_next = f"{env_dir}/{self.unit_name}{STAGED}"
        self.dir = rollout
        base = f"{self.dir}/vllm-{service}"
        self.stamp, self.txn, self.result = f"{base}.stamp", f"{base}.txn", f"{base}.result.json"
        self.log, self.failed, self.current = f"{base}.log", f"{base}.failed", f"{base}.current"
        self.restarting = f"{base}.restarting"  # the pair restart a restart-only transaction takes part in
        self.warm = f"{self.dir}/warm"  # one record per build and model that started ready on this box (its JIT
        # caches are filled): a start without one is cold and gets HEALTH_COLD_READY_TIMEOUT_S (rollout_txn.py)
        self.state = f"{self.txn}/state.json"  # the open transaction's phase (root-only: it holds the probe key)
        self.snapshot = {"env": f"{self.txn}/env", "unit": f"{self.txn}/unit"}  # what the candidate replaces


def service_of(path: str, pattern: str) -> str:
    """The service whose file `path` is, found by `pattern` (an attribute of Paths("*", ...), as glob spelled it)."""
    head, tail = pattern.split("*", 1)
    return path[len(head):len(path) - len(tail)]


# --- retiring the box (retire_services.py, run as the transient unit RETIRE_UNIT) ----------------------------------
RETIRE_UNIT = "sparkctl-retire.service"
RETIRED_TEXTFILE = "sparkctl_retired.prom"  # in TEXTFILE_DIR: sparkctl_box_retired 1 (the alerts hold back for it)
RETIRED, ALREADY_RETIRED, RETIRE_REFUSED, RETIRE_FAILED = "retired", "already-retired", "retire-refused", \
    "retire-failed"
RETIRE_CODES = {RETIRED: 0, ALREADY_RETIRED: 0, RETIRE_REFUSED: 9, RETIRE_FAILED: 1}  # outcome -> exit code


def retire_dir(state_dir: str) -> str:
    """STATE_DIR/retire: the retire's current run, log and result, and the marker of a retired box."""
    return f"{state_dir}/retire"


def retired_marker(state_dir: str) -> str:
    """Written once the box is out of service (what stopped, when); a deploy that serves again removes it."""
    return f"{retire_dir(state_dir)}/retired.json"


# --- services the box no longer runs (retire_services.py --stale, run by the deploy as the transient unit STALE_UNIT)
STALE_UNIT = "sparkctl-retire-stale.service"
REMOVED, NOTHING_STALE = "removed", "nothing-stale"
RETIRE_CODES.update({REMOVED: 0, NOTHING_STALE: 0})


def stale_dir(state_dir: str) -> str:
    """STALE_UNIT's current run, log and result (apart from a whole retire's: the two never attach to each other)."""
    return f"{retire_dir(state_dir)}/stale"


def vllm_args_of(env: bytes) -> list[str]:
    """The `vllm serve` words of an env file's VLLM_ARGS, as systemd reads the double-quoted value ([]: none)."""
    raw = next((line.split("=", 1)[1] for line in env.decode("utf-8", "replace").splitlines()
                if line.startswith("VLLM_ARGS=")), "")
    if len(raw) >= 2 and raw[0] == raw[-1] == '"':
        raw = re.sub(r'\\(["\\`$])', r"\1", raw[1:-1])
    try:
        return shlex.split(raw)
    except ValueError:
        return []


# the header whose value lets the acceptance probe through while its box keeps everyone else drained: the box's
# drain file (drain.py) exempts it, the control side's quick acceptance run sends it
PROBE_HEADER = "X-Sparkctl-Acceptance"


# --- arguments of rollout.py ---------------------------------------------------------------------------------------
SERVICE, ROLE, CALL = "service", "role", "call"  # where a value comes from when it is not a setting
KINDS = ("chat", "embed", "none")  # what the gate sends; none: a headless tensor-parallel worker (no API)
COMMIT, ROLLBACK = DECISIONS = ("commit", "rollback")  # the acceptance verdict
COMMANDS = ("status", "apply", "run", "restart", "follow", "verdict")
TXN = ("apply", "run")  # the transaction: `apply` starts it as `run` in the transient unit
GATED = ("apply", "run", "restart")  # everything that restarts and gates a service


@dataclass(frozen=True)
class Arg:
    dest: str  # the argparse attribute, and the keyword a fact is given by
    type: type  # int, float, str; bool: a flag, present when true
    commands: tuple[str, ...]
    source: str  # the group-data SETTING it comes from, or SERVICE / ROLE / CALL (a fact)
    help: str
    choices: tuple[str, ...] = ()
    positional: bool = False
    nargs: str | None = None
    optional: bool = False  # a fact that may be absent (then `default`); a setting never is
    default: Any = None
    needs: str = ""  # another argument that must be given with this one

    @property
    def flag(self) -> str:
        return self.dest if self.positional else "--" + self.dest.replace("_", "-")

    @property
    def setting(self) -> str:
        return "" if self.source in (SERVICE, ROLE, CALL) else self.source

    @property
    def required(self) -> bool:
        return self.type is not bool and not self.optional


ARGS = (
    Arg("services", str, ("status",), CALL, "the services to report", positional=True, nargs="+"),
    Arg("service", str, ("apply", "run", "restart", "follow", "verdict"), CALL, "the vLLM service (coder, ...)",
        positional=True),
    Arg("port", int, GATED, SERVICE, "its loopback port (the gate's and the drain's requests)"),
    Arg("served", str, GATED, SERVICE, "its served model name (the gate's model, the proxy's drain file)"),
    Arg("kind", str, GATED, SERVICE, "what the gate sends (none: a headless tensor-parallel worker; its restart "
        "only follows its head's pair restart, with --peer-status-cmd)", choices=KINDS),
    Arg("timeout", float, GATED, "HEALTH_READY_TIMEOUT_S", "how long the gate waits for ready, s"),
    Arg("cold_timeout", float, GATED, "HEALTH_COLD_READY_TIMEOUT_S", "a cold start's (its build and model never "
        "ready on this box): how long the gate waits while the engine's journal advances, s"),
    Arg("stall", float, GATED, "HEALTH_STALL_S", "past --timeout, a cold start whose journal has no new line for "
        "this long is wedged, s"),
    Arg("interval", float, GATED, "HEALTH_POLL_INTERVAL_S", "between polls, s"),
    Arg("journal", int, GATED, "HEALTH_JOURNAL_LINES", "journal lines shown with a failure"),
    Arg("drain_timeout", float, GATED, "DRAIN_TIMEOUT_S", "longest wait for running requests, s (0: no drain)"),
    Arg("retry_after", int, GATED, "DRAIN_RETRY_AFTER_S", "Retry-After of the drain's 503, s"),
    Arg("unready_wait", float, TXN, "ROUTER_OUT_WAIT_S", "after failing the routers' health path, the wait before "
        "the drain (the routers take the box out meanwhile), s (0: no router in front)"),
    Arg("gate_max_tokens", int, GATED, "ROLLOUT_GATE_MAX_TOKENS", "the gate's completion, tokens"),
    Arg("gate_request_timeout", float, GATED, "ROLLOUT_GATE_REQUEST_TIMEOUT_S", "the gate's request timeout, s"),
    Arg("retry_failed", bool, TXN, "ROLLOUT_RETRY_FAILED", "try a candidate that failed before"),
    Arg("keep_failed", int, TXN, "ROLLOUT_FAILED_KEEP", "failed candidates remembered"),
    Arg("worker_settle", float, GATED, "ROLLOUT_WORKER_SETTLE_S", "a headless worker must stay up this long, s"),
    Arg("peer_call_timeout", float, GATED, "TP_PEER_CALL_TIMEOUT_S", "one read of the other box's status, s"),
    Arg("peer_status_cmd", str, GATED, ROLE, "tensor-parallel: how to read the other box's status (shell-quoted): "
        "the worker's transaction reads its head's, a restart of either box its pair's", optional=True,
        needs="peer_timeout"),
    Arg("peer_timeout", float, GATED, ROLE, "tensor-parallel: how long one box waits for the other at each step, s",
        optional=True, needs="peer_status_cmd"),
    Arg("verdict_timeout", float, TXN, ROLE, "after the gate, wait this long for the acceptance verdict, s",
        optional=True, needs="verdict_default"),
    Arg("verdict_default", str, TXN, ROLE, "what the box decides alone when no verdict came in time",
        choices=DECISIONS, optional=True, needs="verdict_timeout"),
    Arg("txn", str, ("run", "follow"), CALL, "the transaction id"),
    Arg("restart_only", bool, ("run",), CALL, "restart the committed configuration only"),
    Arg("reason", str, ("run", "restart"), CALL, "who or what asked for the restart (recorded as by)",
        optional=True, default="manual"),
    Arg("offset", int, ("follow",), CALL, "the log's byte offset to print from", optional=True, default=0),
    Arg("wait", bool, ("restart", "follow"), CALL, "wait for the result and exit with its code"),
    Arg("tx", str, ("verdict",), CALL, "the waiting transaction the verdict is for"),
    Arg("decision", str, ("verdict",), CALL, "the verdict", choices=DECISIONS, positional=True),
    Arg("reason", str, ("verdict",), CALL, "why (a rollback's reason is remembered with the candidate)",
        optional=True, default=""),
)
SETTINGS = tuple(dict.fromkeys(a.setting for a in ARGS if a.setting))  # every setting the box is told

# box_textfile.py's limits (the facts timer's command line): what a rollout may take, for its alerts' deadline
FACTS = "box_textfile.py"
FACTS_ARGS = (
    Arg("ready_timeout", float, (FACTS,), "HEALTH_COLD_READY_TIMEOUT_S", "a (re)started service's load and gate, "
        "s (a cold start's, the longest)"),
    Arg("drain_timeout", float, (FACTS,), "DRAIN_TIMEOUT_S", "the wait for running requests before a restart, s"),
)


def decision(passed: bool, mode: str) -> str:
    """The acceptance verdict's decision under ACCEPTANCE_MODE `mode`: keep a candidate that passed, and in warn
    mode one that did not (its figures and failures are reported, never acted on); else roll back. What the box
    decides alone when no verdict comes in time (--verdict-default) is decision(False, mode)."""
    return COMMIT if passed or mode == "warn" else ROLLBACK


def args_of(command: str) -> tuple[Arg, ...]:
    return tuple(a for a in ARGS if command in a.commands)


def required_of(command: str, restart_only: bool = False) -> tuple[Arg, ...]:
    """What a call of `command` must give: every setting it takes and its required facts. `run --restart-only` (the
    restart's transient unit) needs only what `restart` takes, plus the call's own (--txn)."""
    return tuple(a for a in args_of(command) if a.required
                 and (not restart_only or "restart" in a.commands or a.source == CALL))


def problems(command: str, values: Mapping[str, Any]) -> list[str]:
    """Why these values (by dest; None = not given) are not a complete call of `command` ([] when they are)."""
    given = {k for k, v in values.items() if v is not None and v is not False}
    out = [f"{a.flag} ({a.setting or a.source}) is missing"
           for a in required_of(command, bool(values.get("restart_only"))) if a.dest not in given]
    out += [f"{a.flag} needs --{a.needs.replace('_', '-')}" for a in args_of(command)
            if a.needs and a.dest in given and a.needs not in given]
    restart = command == "restart" or bool(values.get("restart_only"))
    if restart and values.get("kind") == "none" and "peer_status_cmd" not in given:
        out.append("--kind none needs --peer-status-cmd (a headless worker restarts only with its head)")
    return out


def _text(command: str, a: Arg, value: Any) -> str:
    """One value as rollout.py reads it back (integral numbers without a fraction: "1800", not "1800.0")."""
    where = f"rollout.py {command} {a.flag} (from {a.setting or a.source})"
    if a.type in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))):
        raise ValueError(f"{where}: {value!r} is not a number")
    if a.type is int and value != int(value):
        raise ValueError(f"{where}: {value!r} is not a whole number")
    if a.type is float:
        value = int(value) if float(value).is_integer() else float(value)
    text = str(int(value)) if a.type is int else str(value)
    if a.choices and text not in a.choices:
        raise ValueError(f"{where}: {value!r} is not one of {', '.join(a.choices)}")
    return text


def render(command: str, values: Mapping[str, Any]) -> list[str]:
    """[command, arguments...] in ARGS order, from values by dest (None or a false flag: left out)."""
    unknown = set(values) - {a.dest for a in args_of(command)}
    bad = problems(command, values) + [f"{k} is not an argument of {command}" for k in sorted(unknown)]
    if bad:
        raise ValueError(f"rollout.py {command}: " + "; ".join(bad))
    out = [command]
    for a in args_of(command):
        value = values.get(a.dest)
        if value is None or value is False:
            continue
        if a.type is bool:
            out.append(a.flag)
        elif a.nargs:
            out += [_text(command, a, v) for v in value]
        else:
            out += ([] if a.positional else [a.flag]) + [_text(command, a, value)]
    return out


def argv(command: str, setting_values: Mapping[str, Any], **facts: Any) -> list[str]:
    """The control side's call: rollout.py's arguments for `command`, every setting it takes read from
    `setting_values` (setting name -> validated value), the facts by dest."""
    values = {a.dest: setting_values[a.setting] for a in args_of(command) if a.setting}
    return render(command, {**values, **facts})


def options(command: str, **facts: Any) -> list[str]:
    """Only the given facts of `command`, as flags (the watchdog's {peer}: a tensor-parallel head's pair options)."""
    out = []
    for a in args_of(command):
        if facts.get(a.dest) is not None and not a.positional:
            out += [a.flag] if a.type is bool else [a.flag, _text(command, a, facts[a.dest])]
    unknown = set(facts) - {a.dest for a in args_of(command)}
    if unknown:
        raise ValueError(f"rollout.py {command}: {', '.join(sorted(unknown))} is not an argument of {command}")
    return out


def setting_argv(command: str, setting_values: Mapping[str, Any]) -> list[str]:
    """Only the options `command` takes from settings (the watchdog's {limits} of its restart command)."""
    out = []
    for a in args_of(command):
        if a.setting and a.type is not bool:
            out += [a.flag, _text(command, a, setting_values[a.setting])]
        elif a.setting and setting_values[a.setting] is True:
            out.append(a.flag)
    return out


def facts_argv(setting_values: Mapping[str, Any]) -> list[str]:
    """box_textfile.py's limit options, each from its setting (setting name -> validated value)."""
    return [x for a in FACTS_ARGS for x in (a.flag, _text(FACTS, a, setting_values[a.setting]))]


def forward(source: str, values: Mapping[str, Any], **facts: Any) -> list[str]:
    """The transient unit's command line, ["run", ...], for a parsed `apply` or `restart` (values by dest): every
    argument of `source` that `run` takes too, plus facts (--txn, --restart-only)."""
    run_dests = {a.dest for a in args_of("run")}
    given = {a.dest: values.get(a.dest) for a in args_of(source) if a.dest in run_dests}
    return render("run", {**given, **facts})


# --- rollout.py's parser -------------------------------------------------------------------------------------------
class Parser(argparse.ArgumentParser):
    """A refused command line exits with USAGE (argparse's own 2 is NOTHING_STAGED's)."""

    def error(self, message: str):
        self.print_usage(sys.stderr)
        self.exit(code(USAGE), f"{self.prog}: error: {message}\n")


def _add(p: argparse.ArgumentParser, a: Arg) -> None:
    if a.type is bool:
        p.add_argument(a.flag, dest=a.dest, action="store_true", help=a.help)
        return
    if a.positional:
        p.add_argument(a.dest, type=a.type, nargs=a.nargs, choices=a.choices or None, help=a.help)
        return
    what = f"; from {a.setting}" if a.setting else ""
    p.add_argument(a.flag, dest=a.dest, type=a.type, choices=a.choices or None, default=a.default,
                   help=f"{a.help}{what}{'' if a.optional else ' (required)'}")


def parser(description: str = "") -> Parser:
    """rollout.py's whole parser; parse() also refuses a call lacking a required argument."""
    top = Parser(prog="rollout.py", description=description)
    sub = top.add_subparsers(dest="cmd", required=True)
    for command in COMMANDS:
        p = sub.add_parser(command)
        for a in args_of(command):
            _add(p, a)
    return top


def parse(argv_: list[str] | None, description: str = "") -> argparse.Namespace:
    ap = parser(description)
    ns = ap.parse_args(argv_)
    bad = problems(ns.cmd, vars(ns))
    if bad:
        ap.error(f"{ns.cmd}: " + "; ".join(bad) + " (the deploy sends every setting: see sparkctl/box/contract.py)")
    return ns
