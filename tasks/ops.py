"""Custom pyinfra operations: each reads a fact, then either does nothing (and says why) or yields the command.

That makes steps that are shell commands underneath idempotent: a converged box reports no change.
"""

from __future__ import annotations

import json
import re
import time
from functools import partial

import gevent
from pyinfra import host, logger
from pyinfra.api import FunctionCommand, StringCommand, operation
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.command import QuoteString
from pyinfra.facts.files import File

from sparkctl.box import contract
from sparkctl.config import rules
from sparkctl.errors import SettingError
from tasks.facts import DistVersion, GpuInfo, RolloutStatus, RunningOomGuard, VenvsInUse
from tasks.handoff import mark_ready


def _fail(state, host, message: str) -> bool:
    """FunctionCommand body: log why, and fail this host's operation (pyinfra stops the host cleanly)."""
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


def fail(message: str) -> FunctionCommand:
    return FunctionCommand(_fail, (message,), {})


def _base(version: str | None) -> str:
    return (version or "").split("+", 1)[0]


@operation()
def pip_dist(venv: str, dist: str, version: str, requirement: str, pip_args: list[str] | None = None):
    """Install `requirement` into `venv` unless distribution `dist` is already at `version` (local tags ignored).

    pyinfra's own pip.packages cannot see local versions such as 0.32.0+cu130 in `pip freeze`, so it would
    reinstall vLLM on every run.
    """
    python = f"{venv}/bin/python"
    have = host.get_fact(DistVersion, python=python, dist=dist)
    if _base(have) == version:
        host.noop(f"{dist} {have} is installed in {venv}")
        return
    yield StringCommand(QuoteString(python), "-m pip install --no-input --progress-bar off",
                        *[QuoteString(a) for a in (pip_args or [])], QuoteString(requirement))
    after = "import importlib.metadata as m; v = m.version(%r); assert v.split('+')[0] == %r, v" % (dist, version)
    yield StringCommand(QuoteString(python), "-c", QuoteString(after))


@operation()
def fetch_checkpoint(repo: str, sha: str, listing: str, cache_dir: str, marker: str, python: str, script: str,
                     workers: int = 8):
    """Download and verify one locked checkpoint unless its verified marker exists."""
    if host.get_fact(File, path=marker):
        host.noop(f"{repo}@{sha[:12]} is on disk and verified")
        return
    yield StringCommand(QuoteString(python), QuoteString(script), "--listing", QuoteString(listing),
                        "--cache-dir", QuoteString(cache_dir), "--marker", QuoteString(marker),
                        "--workers", str(int(workers)))


@operation()
def sync_checkpoint(repo: str, sha: str, listing: str, cache_dir: str, folder: str, snapshot: str, marker: str,
                    python: str, script: str, source: str, ssh_argv: list[str], workers: int = 8):
    """Tensor-parallel worker: copy a verified checkpoint from the head over the CX7 link (never a second Hub
    download), then verify it against the lock by content like a download, unless its marker exists.

    source: user@head, whose forced rrsync serves the head's MODEL_STORE/hub; ssh_argv: rsync's -e command."""
    if host.get_fact(File, path=marker):
        host.noop(f"{repo}@{sha[:12]} is on disk and verified")
        return
    ssh = " ".join(ssh_argv)
    yield StringCommand("mkdir -p", QuoteString(f"{cache_dir}/{folder}"), "&& rsync -a --partial --delete -e",
                        QuoteString(ssh), QuoteString(f"{source}:{folder}/"), QuoteString(f"{cache_dir}/{folder}/"))
    yield StringCommand(QuoteString(python), QuoteString(script), "--verify-only", "--listing", QuoteString(listing),
                        "--snapshot", QuoteString(snapshot), "--marker", QuoteString(marker),
                        "--workers", str(int(workers)))


# --- rollout of a vLLM service (the transaction itself runs on the box: sparkctl/box/rollout.py) ---------------
# every call is rendered from the box boundary's contract (sparkctl/box/contract.py), every outcome read by name

ROLLING: dict[str, str] = {}  # service -> the box whose rollout of it started and has not passed its gate yet
KNOWN_FAILED: dict[str, list[str]] = {}  # box -> one line per service left on its previous configuration
_STATUS: dict[tuple, dict] = {}  # (box, executing) -> rollout.py status of every service: one call per phase


def box_command(env_prefix: str, script: str, args: list[str]) -> StringCommand:
    """`python3 rollout.py ARGS` on the box with the deploy's environment prefix (args: contract.argv(...))."""
    return StringCommand(env_prefix, "python3", QuoteString(script), *[QuoteString(a) for a in args])


def rollout_status(script: str, services: tuple, env_prefix: str) -> dict:
    key = (host.name, bool(host.state.is_executing), script, services)
    if key not in _STATUS:
        _STATUS[key] = host.get_fact(RolloutStatus, script=script, services=list(services), env_prefix=env_prefix)
    return _STATUS[key]


def _connector_args(host) -> dict:
    given = host.current_op_global_arguments or {}
    return {k: given[k] for k in CONNECTOR_ARGUMENT_KEYS if k in given and k not in ("_retries", "_retry_delay",
                                                                                       "_retry_until", "_timeout")}


def _guard(state, host, service: str) -> bool:
    """Execution time, one box after another: never touch a box after an earlier one failed this rollout."""
    earlier = ROLLING.get(service)
    if earlier and earlier != host.name:
        host.log_styled(f"not rolling out vllm-{service} here: it failed on {earlier} (rolled back there), so this "
                        f"box stays on its previous configuration; fix the candidate and rerun", fg="red",
                        log_func=logger.error)
        return False
    ROLLING[service] = host.name
    return True


def _ready(host, handoff: dict | None, ready: bool) -> None:
    """Mark this box's endpoint (not) ready in the gateway hand-off; a hand-off problem never stops a rollout."""
    if not handoff:
        return
    try:
        mark_ready(handoff, host.name, ready)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        host.log_styled(f"gateway hand-off not updated: {exc}", fg="yellow", log_func=logger.warning)


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
    kw = _connector_args(host)
    for _round in range(2):
        started = _apply(host, kw, service, apply_cmd)
        if not started:
            return False
        if started.get("attached"):
            host.log(f"vllm-{service}: attaching to rollout {started['txn']}, already running on the box")
        _ready(host, handoff, False)
        result = _wait(host, kw, service, started["txn"], rollout_py, interval)
        if result is None:
            return False
        done = _ended(state, host, service, started, result, wanted, handoff, on_awaiting)
        if done is not None:
            if done:
                ROLLING.pop(service, None)
            return done
    ROLLING.pop(service, None)
    return True


def _ended(state, host, service: str, started: dict, result: dict, wanted: str, handoff: dict | None,
           on_awaiting) -> bool | None:
    """What a followed transaction's result means for the op: True or False, or None to apply once more (it was
    another deploy's)."""
    if contract.serving(result):  # committed, or rolled back: it serves a known-good configuration
        _ready(host, handoff, True)
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
    if on_awaiting is not None:  # judged here, inside the serial rollout: one box at a time
        host.log(f"vllm-{service}: passed its health gate; the box keeps its snapshot and waits for the "
                 f"acceptance verdict until {result.get('deadline')}")
        return bool(on_awaiting(state, host, started["txn"], result.get("probe_key", "")))
    host.log(f"vllm-{service}: passed its health gate; the box keeps its snapshot and waits for the "
             f"acceptance verdict until {result.get('deadline')} (the Acceptance step sends it)")
    return None if started.get("attached") else True


DETACHED: dict[tuple[str, str], str] = {}  # (box, service) -> transaction started by rollout(wait=False)


def _start(state, host, service: str, apply_cmd: StringCommand) -> bool:
    """Start (or attach to) the box's transaction and return: a tensor-parallel worker's waits for its head."""
    started = _apply(host, _connector_args(host), service, apply_cmd)
    if not started:
        return False
    DETACHED[(host.name, service)] = started["txn"]
    host.log(f"vllm-{service}: transaction {started['txn']} started; it changes nothing until the head's candidate "
             f"is installed, and keeps its own only if the head commits")
    return True


def _join(state, host, service: str, rollout_py, interval: float) -> bool:
    """Follow a transaction rollout(wait=False) started until it records its result."""
    txn = DETACHED.pop((host.name, service), None)
    if txn is None:
        host.log_styled(f"vllm-{service}: no transaction was started here to follow", fg="red", log_func=logger.error)
        return False
    result = _wait(host, _connector_args(host), service, txn, rollout_py, interval)
    if result is None:
        return False
    if not contract.succeeded(result):
        host.log_styled(f"vllm-{service}: rollout {result.get('outcome')}: {result.get('message', '')[:4000]}",
                        fg="red", log_func=logger.error)
        return False
    return True


def _wait(host, kw: dict, service: str, txn: str, rollout_py, interval: float) -> dict | None:
    """Poll `rollout.py follow` (one short ssh call each time; rollout_py(args) -> the command), print new log
    lines; the recorded result, or {"rc": 0, "outcome": contract.AWAITING, ...} when the transaction passed its
    health gate and waits for the acceptance verdict that nobody sent yet (the box decides alone at its deadline:
    nothing to wait for here)."""
    offset, misses = 0, 0
    while True:
        ok, out = host.run_shell_command(rollout_py(contract.argv("follow", {}, service=service, txn=txn,
                                                                  offset=offset)), **kw)
        lines = out.stdout_lines if ok else []
        st = json.loads(lines[-1][3:]) if lines and lines[-1].startswith("@@ ") else None
        if st is None:
            misses += 1
            if misses > 5:
                host.log_styled(f"lost track of rollout {txn} of vllm-{service}; it goes on on the box: rerun the "
                                f"deploy to attach to it or read its result", fg="red", log_func=logger.error)
                return None
            gevent.sleep(interval)
            continue
        misses, offset = 0, st["offset"]
        for line in lines[:-1]:
            host.log(f"vllm-{service}: {line}")
        if st["done"] or st.get("awaiting"):
            return (st["result"] or {}) if st["done"] else _awaiting_result(txn, st)
        gevent.sleep(interval)


def _awaiting_result(txn: str, st: dict) -> dict:
    """The pseudo-result of a transaction that waits for its acceptance verdict (follow's "@@" line)."""
    deadline = st.get("verdict_deadline")
    return {"rc": contract.code(contract.AWAITING), "outcome": contract.AWAITING, "txn": txn,
            "candidate": st.get("candidate"), "probe_key": st.get("probe_key") or "",
            "deadline": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(deadline))) if deadline else "?"}


def _unchanged(service: str, status: dict, retry_failed: bool) -> str:
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
        KNOWN_FAILED.setdefault(host.name, []).append(line)
        host.log_styled(line, fg="yellow", log_func=logger.warning)
    return line


@operation()
def rollout(service: str, services: tuple, script: str, settings: dict, interval: float, port: int, served: str,
            kind: str, env_prefix: str = "", handoff: dict | None = None, peer: dict | None = None,
            wait: bool = True, verdict_args: dict | None = None, on_awaiting=None):
    """Run the box's transaction for a service (drain, switch, gate, commit or roll back), unless it already
    runs exactly its staged configuration, or that configuration failed before and no retry was asked for.
    settings: the validated values of contract.SETTINGS (tasks/services.rollout_settings); verdict_args
    (tasks/acceptance.apply_verdict_args): after its health gate the box waits for the acceptance verdict;
    on_awaiting(state, host, txn, probe_key) -> bool (tasks/acceptance.judge_waiting) then measures and sends it
    within this op, so a serial rollout touches the next box only after this one's verdict, and a first install is
    judged while its verdict deadline is fresh (the proxy step runs before the services).

    "Exactly that" = the stamp rollout.py recorded after its last healthy start equals the hash of the staged unit
    and env file now, so a restart happens only when something the service reads changed.

    peer: rollout.py's --peer-* facts (a tensor-parallel worker following its head); wait=False only starts the
    transaction (rollout_join follows it to its result, after the head's rollout).
    """
    status = rollout_status(script, services, env_prefix).get(service, {})
    unchanged = _unchanged(service, status, settings["ROLLOUT_RETRY_FAILED"])
    if unchanged:
        host.noop(unchanged)
        return
    rollout_py = partial(box_command, env_prefix, script)
    apply_cmd = rollout_py(contract.argv("apply", settings, service=service, port=port, served=served, kind=kind,
                                         **(peer or {}), **(verdict_args or {})))
    if not wait:  # no one-box-at-a-time guard: head and worker are one unit, the head's rollout decides for both
        yield FunctionCommand(_start, (service, apply_cmd), {})
        return
    yield FunctionCommand(_guard, (service,), {})
    yield FunctionCommand(_follow, (service, apply_cmd, rollout_py, interval),
                          {"wanted": status.get("wanted", ""), "handoff": handoff, "on_awaiting": on_awaiting})


@operation()
def rollout_join(service: str, script: str, interval: float, env_prefix: str = "", follow: bool = True):
    """Wait for the transaction rollout(wait=False) started on this box (pair it with `_if=<that op>.did_change`);
    follow=False: this box started none (the tensor-parallel head: its own rollout already decided)."""
    if not follow:
        host.noop(f"vllm-{service}: nothing to follow on this box")
        return
    yield FunctionCommand(_join, (service, partial(box_command, env_prefix, script), interval), {})


@operation()
def venv_build(venv: str, pip_version: str, dist: str, version: str, requirement: str, pip_args: list[str],
               remove: list[str], alias: str):
    """Build a vLLM venv unless its built marker exists: venv, pip, vLLM, removals, the metadata alias (for
    builds published under another name), then import it and check its version; only then write the marker.
    A failed step leaves no marker: the next run starts that venv again from scratch."""
    marker = f"{venv}/.sparkctl-built"
    if host.get_fact(File, path=marker):
        host.noop(f"{dist} {version} is built and import-checked in {venv}")
        return
    python, pip = QuoteString(f"{venv}/bin/python"), [QuoteString(a) for a in pip_args]
    yield StringCommand("rm -rf", QuoteString(venv), "&& python3 -m venv", QuoteString(venv))
    install = [python, "-m pip install --no-input --progress-bar off", *pip]
    yield StringCommand(*install, QuoteString(f"pip=={pip_version}"))
    yield StringCommand(*install, QuoteString(requirement))
    if remove:
        yield StringCommand(python, "-m pip uninstall -y", *[QuoteString(r) for r in remove])
    if alias:  # the `vllm` CLI reads importlib.metadata.version("vllm")
        code = ("import pathlib, sysconfig; d = pathlib.Path(sysconfig.get_paths()['purelib']) / %r; "
                "d.mkdir(exist_ok=True); (d / 'METADATA').write_text(%r); (d / 'RECORD').write_text('')"
                % (f"vllm-{alias}.dist-info", f"Metadata-Version: 2.1\nName: vllm\nVersion: {alias}\n"))
        yield StringCommand(python, "-c", QuoteString(code))
    check = ("import importlib.metadata as m, vllm; v = m.version(%r); assert v.split('+')[0] == %r, v"
             % (dist, version))
    yield StringCommand(python, "-c", QuoteString(check))
    yield StringCommand("touch", QuoteString(marker))


@operation()
def prune_venvs(root: str, keep: int, referenced_by: list[str]):
    """Remove vLLM venvs under `root` beyond the newest `keep` that no unit (live, staged or in a rollout
    snapshot) names in its ExecStart."""
    found = host.get_fact(VenvsInUse, root=root, unit_globs=referenced_by)
    used = {u.split("/bin/")[0] for u in found["used"]}
    extra = [v for v in found["venvs"][keep:] if f"{root}/{v}" not in used]
    if not extra:
        host.noop(f"{len(found['venvs'])} venv(s) under {root}, none to prune")
        return
    yield StringCommand("rm -rf", *[QuoteString(f"{root}/{v}") for v in extra])


@operation()
def require_driver(required_gpu: str, min_driver: int):
    """At execute time, after the packages: the new driver must answer, else stop and say to reboot."""
    if not host.state.is_executing:
        host.noop("checked after the driver packages are installed")
        return
    gpu = host.get_fact(GpuInfo)
    ok = gpu and "error" not in gpu and required_gpu.lower() in gpu["name"].lower()
    if ok and int(gpu["driver_version"].split(".")[0]) >= min_driver:
        host.noop(f"{gpu['name']} answers with driver {gpu['driver_version']}")
        return
    yield fail(f"the NVIDIA driver is installed but the GPU does not answer yet ({gpu}); reboot the box "
               f"(sudo reboot: a new kernel module loads at boot) and rerun the deploy")


def systemd_bytes(setting: str, value) -> int:
    """A systemd size (MemoryMin=64M) in bytes, as systemd parses it; refuse the forms we cannot compare."""
    text = str(value)
    if not re.fullmatch(r"[1-9][0-9]*[KMGT]?", text):
        raise SettingError(setting, value, "a size in bytes with an optional K, M, G or T suffix, e.g. '64M'")
    return rules.systemd_bytes(text)


@operation()
def running_oom_guard(unit: str, oom_score_adj: int, memory_min: str, memory_min_setting: str):
    """Give the running daemon of `unit` the OOMScoreAdjust=/MemoryMin= its drop-in sets, without a restart.

    systemd applies OOMScoreAdjust= only when it starts a process, so a drop-in added to a running sshd would wait
    for the next sshd start. Restarting sshd would apply it, but a restart whose new sshd fails to start leaves
    the box without logins; so write /proc/<pid>/oom_score_adj of the listener (later connections inherit it)
    and, best effort, of its per-connection children, and set MemoryMin on the unit's cgroup for this boot
    (`systemctl set-property --runtime`; the drop-in carries both across restarts and reboots). A score already
    lower (better protected) than the setting is left alone.
    """
    adj, want_min = int(oom_score_adj), systemd_bytes(memory_min_setting, memory_min)
    now = host.get_fact(RunningOomGuard, unit=unit)
    if not now["pid"]:
        host.noop(f"{unit} is not running: its drop-in applies when it starts")
        return
    score_ok = now["adj"] is not None and now["adj"] <= adj
    if not score_ok and not now["can_lower"]:
        host.noop(f"running {unit} keeps oom_score_adj {now['adj']}: root here lacks CAP_SYS_RESOURCE (a container), "
                  f"so no OOM score can be lowered; systemd ignores OOMScoreAdjust= there as well")
        score_ok = True
    floor_ok = now["memory_min"] is None or now["memory_min"] == want_min
    if score_ok and floor_ok:
        floor = "no memory controller here" if now["memory_min"] is None else f"memory.min {want_min}"
        host.noop(f"running {unit} (pid {now['pid']}) has oom_score_adj {now['adj']} ({floor})")
        return
    if not score_ok:
        main = str(int(now["pid"]))
        yield StringCommand(f"for p in {main} $(pgrep -P {main}); do echo {adj} > /proc/$p/oom_score_adj",
                            f'2>/dev/null || true; done; test "$(cat /proc/{main}/oom_score_adj)" = {adj}')
    if not floor_ok:
        yield StringCommand("systemctl set-property --runtime", QuoteString(unit),
                            QuoteString(f"MemoryMin={memory_min}"))
