"""The retire deploy's glue (`pyinfra inventory.py retire.py --limit <box>`; not a step of deploy.py): refuse what
would leave a served model on no box (sparkctl/fleet/retirable.py) while pyinfra prepares, then upload the box's
retire script and run it as the box's own transient unit (sparkctl/box/retire_services.py: out of the routers, drained,
stopped and disabled), following its log here until it records its result. Losing this connection changes nothing
on the box: a rerun attaches to the same run or reads its result; a retired box is left as it is."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

import gevent
from pyinfra import host, inventory, logger
from pyinfra.api import FunctionCommand, deploy, operation
from pyinfra.operations import files

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from sparkctl.check.load import host_config
from sparkctl.check.validate import derive_host
from sparkctl.config import box_paths
from sparkctl.config.hosts import per_host_models
from sparkctl.config.settings import Settings
from sparkctl.errors import Refused, SparkctlError
from sparkctl.fleet.placement import Fleet, place
from sparkctl.fleet.pools import from_settings
from sparkctl.fleet.retirable import check_retire
from sparkctl.render import monitoring as mon
from sparkctl.render import ray
from sparkctl.render.units import rollout_env
from tasks.common import box_command, connector_args, fail, handoff_dir, mark_ready, ready_target
from tasks.facts import BoxScriptStatus

# the box module and what it imports (uploaded beside the deploy's own copies: the same files of this checkout)
RETIRE_SCRIPTS = ("retire_services.py", "drain.py", "readiness_gate.py", "contract.py", "boxio.py", "textfile.py")
LOST_AFTER = 5  # follow calls in a row without an answer before the control side gives up (the box goes on)
_SERVED: dict[str, tuple[str, ...]] = {}  # box -> what it serves, derived once per run from its own host data


def served_by(name: str, names: list[str]) -> tuple[str, ...]:
    """The served names of an inventory box, from its own data (a tensor-parallel worker serves none)."""
    if name not in _SERVED:
        try:
            other = derive_host(inventory.get_host(name).data.dict(), name, names, per_host_models())
        except SparkctlError as exc:
            raise Refused(f"{name}: {exc}") from None
        _SERVED[name] = tuple(s.served_name for s in other.services if not s.headless)
    return _SERVED[name]


def hand_off_ready(settings: Settings) -> dict[str, set[str]] | None:
    """served name -> the boxes the gateway hand-off records serving it ready (None: no hand-off yet)."""
    path = Path(handoff_dir(settings.cfg)) / "endpoints.json"
    if not path.exists():
        return None
    models = json.loads(path.read_text()).get("models") or {}
    return {served: {e["box"] for e in items if e.get("ready", True)} for served, items in models.items()}


def refuse_unsafe(settings: Settings) -> None:
    """Prepare time, before any command: a retire needs --limit, and must leave every served model a box."""
    limit = host.state.limit_hosts
    if not isinstance(limit, list):
        raise Refused("retire.py retires the boxes --limit names, and no --limit was given (it would retire every "
                      "box of the inventory): pyinfra inventory.py retire.py --limit <box>")
    names = [h.name for h in inventory.get_group("gx10")]
    retiring = [h.name for h in limit if h.name in names]
    try:
        own = host_config(host.data.dict(), host.name).cfg  # the group data's pools, not this box's part in them
        fleet: Fleet = place(from_settings(own, names, per_host_models()), names)
    except SparkctlError as exc:
        raise Refused(f"{settings.host_name}: {exc}") from None
    served = {name: served_by(name, names) for name in names}
    check = check_retire(fleet, retiring, served, hand_off_ready(settings), settings.cfg.RETIRE_LAST_OF_POOL)
    if check.refusals:
        raise Refused(f"{settings.host_name}: not retired, nothing touched: " + "; ".join(check.refusals))
    for note in check.notes:
        logger.info(f"{settings.host_name}: retire: {note}")


def box_args(settings: Settings) -> tuple[list[str], list[str]]:
    """(what the box retires, the limits it is given), as retire_services.py takes them."""
    cfg, role = settings.cfg, settings.role
    what = [x for s in settings.services if not s.headless for x in ("--serve", f"{s.served_name}={s.port}")]
    what += [x for s in settings.services for x in ("--service", s.name)]
    if ray.runs_ray(role, cfg):
        what += ["--unit", ray.unit_name(role)]
    what += ["--quiet", mon.WATCHDOG_UNIT]
    limits = ["--unready-wait", str(cfg.ROUTER_OUT_WAIT_S), "--drain-timeout", str(cfg.DRAIN_TIMEOUT_S),
              "--retry-after", str(cfg.DRAIN_RETRY_AFTER_S), "--interval", str(cfg.HEALTH_POLL_INTERVAL_S),
              "--textfile-dir", cfg.TEXTFILE_DIR]
    return what, limits


def _follow(host, kw: dict, retire_py, txn: str, interval: float, mode: list[str]) -> dict | None:
    """Print the box's retire log as it grows; its recorded result (None: lost track of it)."""
    offset, misses = 0, 0
    while misses <= LOST_AFTER:
        ok, out = host.run_shell_command(retire_py(["follow", *mode, "--txn", txn, "--offset", str(offset)]), **kw)
        lines = out.stdout_lines if ok else []
        if not lines or not lines[-1].startswith("@@ "):
            misses += 1
            gevent.sleep(interval)
            continue
        st, misses = json.loads(lines[-1][3:]), 0
        offset = st["offset"]
        for line in lines[:-1]:
            host.log(f"retire: {line}")
        if st["done"]:
            return st["result"]
        gevent.sleep(interval)
    return None


def box_run(host, retire_py, apply_args: list[str], interval: float, succeeded: tuple[str, ...]) -> dict | None:
    """Start (or attach to) the box's run (retire_services.py apply; a --stale run when apply_args say so), follow it to its
    result and report it: the result when its outcome is one of `succeeded`, else None (said in red)."""
    kw = connector_args(host)
    ok, out = host.run_shell_command(retire_py(["apply", *apply_args]), **kw)
    started = next((json.loads(x) for x in reversed(out.stdout_lines) if x.startswith("{")), None) if ok else None
    if not started:
        host.log_styled(f"retire_services.py apply failed: {' '.join(out.stderr_lines)[-2000:]}", fg="red",
                        log_func=logger.error)
        return None
    if started.get("attached"):
        host.log(f"attaching to run {started['txn']}, already running on the box")
    result = _follow(host, kw, retire_py, started["txn"], interval, ["--stale"] if "--stale" in apply_args else [])
    if result is None:
        host.log_styled(f"lost track of run {started['txn']}; it goes on on the box: rerun the deploy to attach to "
                        f"it or read its result", fg="red", log_func=logger.error)
        return None
    if result.get("outcome") not in succeeded:
        host.log_styled(f"{result.get('outcome')}: {result.get('message')}", fg="red", log_func=logger.error)
        return None
    logger.info(f"{host.name}: {result.get('message')}")
    return result


def _retire(state, host, retire_py, apply_args: list[str], interval: float, handoffs: list[dict]) -> bool:
    """The box's retire, followed to its result; the hand-off then records the box not ready."""
    if box_run(host, retire_py, apply_args, interval, (contract.RETIRED, contract.ALREADY_RETIRED)) is None:
        return False
    for target in handoffs:  # the hand-off then records it not ready: a later retire counts it out
        mark_ready(host, target, False)
    return True


@operation()
def retire_box(script: str, env_prefix: str, what: list[str], limits: list[str], interval: float,
               handoffs: list[dict]):
    """Run the box's retire, unless it is retired already (then nothing changes, and the op says so), or a
    rollout owns one of its services (refused: nothing touched)."""
    st = host.get_fact(BoxScriptStatus, script=script, args=what, env_prefix=env_prefix)
    units = st.get("units") or {}
    if st.get("retired") and not st.get("running") and not any(u["active"] or u["enabled"] for u in units.values()):
        rec = st["retired"]
        said = (f"already retired ({rec.get('at')}: {', '.join(rec.get('units') or [])} stopped and disabled); "
                f"nothing changed")
        if host.state.is_executing:  # (pyinfra shows a noop's text only when verbose)
            logger.info(f"{host.name}: {said}")
        host.noop(said)
        return
    if st.get("owned"):
        yield fail(f"not retired, nothing touched: a rollout or restart owns {', '.join(st['owned'])} now; let it "
                   f"finish (rollout.py status), then retire again")
        return
    retire_py = partial(box_command, env_prefix, script)
    yield FunctionCommand(_retire, (retire_py, [*what, *limits], interval, handoffs), {})


@deploy("Retire")
def retire(settings: Settings) -> None:
    """Out of the routers, drained, stopped and disabled: the box's part of retiring it (docs/retire.md)."""
    refuse_unsafe(settings)
    cfg = settings.cfg
    bin_dir = box_paths.bin_dir(cfg.SPARKCTL_HOME)
    for script in RETIRE_SCRIPTS:
        files.put(name=f"Upload {script}", src=str(REPO_ROOT / "sparkctl" / "box" / script),
                  dest=f"{bin_dir}/{script}", user="root", group="root", mode="0755")
    what, limits = box_args(settings)
    call = dict(script=f"{bin_dir}/retire_services.py", env_prefix=rollout_env(cfg), what=what, limits=limits,
                interval=cfg.HEALTH_POLL_INTERVAL_S)
    if settings.role.serves_api:
        retire_box(name="Retire: out of the routers, drained, stopped and disabled", **call,
                   handoffs=[ready_target(cfg, s.served_name) for s in settings.services if not s.headless])
    else:  # a tensor-parallel worker: after its head drained (pyinfra runs each operation on every host in turn)
        retire_box(name="Retire: a tensor-parallel worker's units stopped and disabled (after its head)", **call,
                   handoffs=[])
