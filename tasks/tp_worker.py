"""Tensor-parallel unit (native backend): after the head's rollout and its verdict, the worker's transaction, which
the services step started to follow its head, has kept or undone its candidate with the head's; this step waits on
the worker for that result (on the head it is a no-op)."""

from __future__ import annotations

from pyinfra.api import deploy

from sparkctl.config import box_paths
from sparkctl.config.settings import Settings
from sparkctl.render.link import native_pair
from sparkctl.render.units import rollout_env
from tasks.rollout import RolloutLedger, rollout_join


@deploy("Tensor-parallel unit")
def tp_worker_result(settings: Settings, worker_starts: dict[str, object], ledger: RolloutLedger) -> None:
    """One op on both boxes, after the head's rollout and its verdict: the worker's transaction has by then kept
    or undone its candidate with the head's; the worker waits for that result (the head's op is a no-op). ledger:
    this deploy run's, where the worker's started transaction is recorded."""
    if not native_pair(settings.cfg, settings.role):
        return
    cfg, name = settings.cfg, settings.coder.name
    started = worker_starts.get(name)
    extra = {"_if": started.did_change} if started is not None else {}
    rollout_join(name=f"Tensor-parallel: the worker's vllm-{name} ends with the head's result", service=name,
                 script=box_paths.rollout_script(cfg.SPARKCTL_HOME), interval=cfg.HEALTH_POLL_INTERVAL_S,
                 ledger=ledger, env_prefix=rollout_env(cfg), follow=started is not None, **extra)
