"""Stale services: the vLLM services installed on the box (their unit or env file, live or staged: contract.Paths)
that this host's configuration (settings.services) no longer runs are taken out of service the way retire.py takes
a whole box out, by the box's own retire script in its --stale mode (sparkctl/box/retire_services.py, the transient unit
contract.STALE_UNIT): out of the routers, drained, stopped, disabled, then their files removed. The box keeps
serving everything else; the watchdog is only paused meanwhile. Before the proxy step (which drops their nginx
locations) and the services step (whose rollouts need the memory they hold). Nothing stale: the fact only."""

from __future__ import annotations

import posixpath
import shlex
from fnmatch import fnmatchcase
from functools import partial

from pyinfra import host, logger
from pyinfra.api import FactBase, FunctionCommand, StringCommand, deploy, operation

from sparkctl.box import contract
from sparkctl.config import box_paths
from sparkctl.config.settings import Settings
from sparkctl.render import monitoring as mon
from sparkctl.render.units import rollout_env
from tasks.common import box_command, mark_ready, ready_target
from tasks.retire import box_run


class InstalledFiles(FactBase):
    """The paths on the box matching the globs (a shell loop: it needs no script of ours on the box yet)."""

    def command(self, globs):
        # each glob's directory quoted, its file pattern left for the shell to expand
        quoted = " ".join(f"{shlex.quote(posixpath.dirname(g))}/{posixpath.basename(g)}" for g in globs)
        return StringCommand(f'for f in {quoted}; do [ -e "$f" ] && echo "$f"; done; true')

    def default(self):
        return []

    def process(self, output):
        return [line.strip() for line in output if line.strip()]


def service_globs(settings: Settings) -> list[str]:
    """Where any vLLM service's unit and env file would be, live or staged (contract.Paths of service "*")."""
    cfg = settings.cfg
    every = contract.Paths("*", cfg.ENV_DIR, contract.rollout_dir(cfg.STATE_DIR))
    return [every.unit, every.env, every.unit_next, every.env_next]


def stale_services(paths: list[str], globs: list[str], keep: set[str]) -> list[str]:
    """The services these paths belong to that `keep` does not name."""
    found = {contract.service_of(p, g) for p in paths for g in globs if fnmatchcase(p, g)}
    return sorted(s for s in found if s and "/" not in s and s not in keep)


def box_args(settings: Settings) -> list[str]:
    """`retire_services.py apply --stale`'s arguments: the services to keep, the watchdog to pause, the limits."""
    cfg = settings.cfg
    return ["--stale", *(x for s in settings.services for x in ("--keep", s.name)), "--quiet", mon.WATCHDOG_UNIT,
            "--unready-wait", str(cfg.ROUTER_OUT_WAIT_S), "--drain-timeout", str(cfg.DRAIN_TIMEOUT_S),
            "--retry-after", str(cfg.DRAIN_RETRY_AFTER_S), "--interval", str(cfg.HEALTH_POLL_INTERVAL_S),
            "--textfile-dir", cfg.TEXTFILE_DIR]


def _remove(state, host, retire_py, apply_args: list[str], interval: float, handoff: dict) -> bool:
    """The box's --stale run, followed to its result; the hand-off then records the box not ready for what they
    served (the hand-off step drops them at the end of the deploy)."""
    done = box_run(host, retire_py, apply_args, interval, (contract.REMOVED, contract.NOTHING_STALE))
    if done is None:
        return False
    for served in done.get("served") or []:
        mark_ready(host, {**handoff, "served": served}, False)
    return True


@operation()
def remove_stale(globs: list[str], keep: list[str], script: str, env_prefix: str, apply_args: list[str],
                 interval: float, handoff: dict):
    """Run the box's --stale removal when a vLLM service is installed that `keep` does not name; else nothing."""
    stale = stale_services(host.get_fact(InstalledFiles, globs=globs), globs, set(keep))
    if not stale:
        host.noop("every vLLM service installed here is configured")
        return
    if host.state.is_executing:
        logger.info(f"{host.name}: no longer configured here, to be removed: {', '.join(stale)}")
    retire_py = partial(box_command, env_prefix, script)
    yield FunctionCommand(_remove, (retire_py, apply_args, interval, handoff), {})


@deploy("Stale services")
def stale(settings: Settings) -> None:
    """Services this box no longer runs: out of the routers, drained, stopped, disabled, removed (docs/retire.md)."""
    cfg = settings.cfg
    remove_stale(name="Services no longer configured here: out of the routers, drained, stopped, removed",
                 globs=service_globs(settings), keep=[s.name for s in settings.services],
                 script=f"{box_paths.bin_dir(cfg.SPARKCTL_HOME)}/retire_services.py", env_prefix=rollout_env(cfg),
                 apply_args=box_args(settings), interval=cfg.HEALTH_POLL_INTERVAL_S,
                 handoff=ready_target(cfg, ""))
