"""Monitoring: the real node exporter on loopback, GPU and box facts through its textfile collector,
and the liveness watchdog (the proxy's scrape paths and their token are written by tasks/proxy.py). Changes only
what changed: a converged box reports nothing to do."""

from __future__ import annotations

from io import StringIO

from pyinfra.api import deploy
from pyinfra.operations import apt, files, systemd
from pyinfra.operations.util import any_changed

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from sparkctl.config.settings import Settings
from sparkctl.config.topology import cx7_address
from sparkctl.errors import Refused, SparkctlError
from sparkctl.render import monitoring as mon
from sparkctl.render.box_files import TLS_DIR

NODE_EXPORTER_UNIT = "prometheus-node-exporter.service"  # the distribution's unit (Debian/Ubuntu package)


def peer_address(settings: Settings) -> str:
    """Tensor-parallel: the other box's link address (the watchdog reads its rollout status there), else ""."""
    role = settings.role
    if not role.tensor_parallel:
        return ""
    if role.name == "worker":
        return role.head_address
    worker = next(h for h in role.pair if h != settings.host_name)
    return cx7_address(settings.cfg, worker)


def _put(name: str, text: str, dest: str, mode: str = "0644", **kw):
    return files.put(name=name, src=StringIO(text), dest=dest, user="root", group="root", mode=mode, **kw)


@deploy("Monitoring")
def monitoring(settings: Settings, shared_scripts: list) -> None:
    """shared_scripts: the vLLM step's uploads of the box modules these scripts import too (tasks/vllm.py
    SHARED_SCRIPTS): the watchdog restarts when they change."""
    cfg = settings.cfg
    services = settings.services
    try:  # everything this step needs is checked while pyinfra prepares: before any command reaches the box
        watchdog_json = mon.watchdog_config(cfg, services, settings.role, peer_address(settings))
    except SparkctlError as exc:
        raise Refused(f"{settings.host_name}: {exc}") from None
    # the package's unit reads this file: written first, so node exporter never listens beyond loopback
    args = _put("node exporter: loopback, meminfo + pressure + textfile collectors", mon.node_exporter_defaults(cfg),
                cfg.NODE_EXPORTER_DEFAULTS_FILE)
    apt.packages(name=f"Install {', '.join(cfg.MONITORING_PACKAGES)}", packages=cfg.MONITORING_PACKAGES,
                 update=True, cache_time=cfg.APT_CACHE_TIME_S,
                 no_recommends=True)  # not prometheus-node-exporter-collectors: its timers add unrelated metrics
    systemd.service(name="node exporter enabled and running", service=NODE_EXPORTER_UNIT, running=True,
                    enabled=True)
    systemd.service(name="Restart node exporter (its arguments changed)", service=NODE_EXPORTER_UNIT,
                    restarted=True, _if=args.did_change)

    scripts = [files.put(name=f"Upload {script}", src=str(REPO_ROOT / "sparkctl" / "box" / script),
                         dest=f"{mon.bin_dir(cfg)}/{script}", user="root", group="root", mode="0755")
               for script in mon.BOX_SCRIPTS]
    watchdog_dir = contract.watchdog_dir(cfg.STATE_DIR)
    files.directory(name=f"Create {watchdog_dir} (root)", path=watchdog_dir,
                    user="root", group="root", mode="0755")
    units = [
        _put(f"Unit {mon.FACTS_UNIT}", mon.facts_service(cfg, f"{TLS_DIR}/server.pem"),
             f"/etc/systemd/system/{mon.FACTS_UNIT}"),
        _put(f"Unit {mon.FACTS_TIMER}", mon.facts_timer(cfg), f"/etc/systemd/system/{mon.FACTS_TIMER}"),
        _put(f"Unit {mon.WATCHDOG_UNIT}", mon.watchdog_service(cfg), f"/etc/systemd/system/{mon.WATCHDOG_UNIT}"),
    ]
    watchdog_cfg = _put("Watchdog configuration (root-only)", watchdog_json,
                        mon.watchdog_config_path(cfg), mode="0600", _temp_dir=cfg.ENV_DIR)
    systemd.daemon_reload(name="Reload systemd (a monitoring unit changed)", _if=any_changed(*units))
    systemd.service(name=f"{mon.FACTS_TIMER} enabled and running", service=mon.FACTS_TIMER, running=True,
                    enabled=True)
    systemd.service(name=f"{mon.WATCHDOG_UNIT} enabled and running", service=mon.WATCHDOG_UNIT, running=True,
                    enabled=True)
    systemd.service(name=f"Restart {mon.WATCHDOG_UNIT} (its script, unit or configuration changed)",
                    service=mon.WATCHDOG_UNIT, restarted=True,
                    _if=any_changed(watchdog_cfg, *units, *scripts, *shared_scripts))
    # a box retired by retire.py serves again (the services step restarted it): its alerts are no longer held back
    for path in (contract.retired_marker(cfg.STATE_DIR), f"{cfg.TEXTFILE_DIR}/{contract.RETIRED_TEXTFILE}"):
        files.file(name=f"Not retired: no {path}", path=path, present=False)
