"""CARouter Cloud GX10: from stock OS to serving.   pyinfra inventory.py deploy.py

The steps are the calls below, in their order (each one module in tasks/; what each does: docs/layout.md,
"The steps"). What a step needs from an earlier one is returned by it and handed on here. Bad settings are refused
before any command reaches the host; see README.md for the flip and the two-Spark topologies, docs/ for secrets,
settings and the rest.
"""

from pyinfra import host

from tasks import pyinfra_fast
from tasks.acceptance import acceptance_step, judge_waiting
from tasks.checkpoints import checkpoints
from tasks.gateway import after_the_boxes, gateway
from tasks.handoff import handoff
from tasks.health import health
from tasks.link import link, ray_retire
from tasks.monitoring import monitoring
from tasks.nvidia import nvidia
from tasks.oom_guard import oom_guard
from tasks.preflight import preflight, settings_for_host
from tasks.proxy import proxy
from tasks.rollout import run_ledger
from tasks.services import services
from tasks.stale import stale
from tasks.tp_worker import tp_worker_result
from tasks.vllm import vllm

pyinfra_fast.install()  # pyinfra's operation order and global arguments, the same results for less CPU
if "gx10" in host.groups:
    settings = settings_for_host()  # pure validation: no command has run yet
    facts = preflight(settings)
    nvidia(settings, is_dgx=facts["is_dgx"], gpu=facts["gpu"])
    shared_scripts = vllm(settings)  # box modules the monitoring step's scripts import too
    link(settings)
    checkpoints(settings)
    oom_guard(settings)
    stale(settings)  # before the proxy drops their locations and the services' rollouts need their memory
    proxy(settings)  # before the services: a coder is judged through it as soon as its box waits for a verdict
    # the run's rollout ledger, shared by every host's deploy.py: what the rollouts learn as they execute
    rollouts = services(settings, judge=judge_waiting, ledger=run_ledger(host.state))
    monitoring(settings, shared_scripts)
    health(settings, rollouts.ledger.known_failed)
    acceptance_step(settings)
    tp_worker_result(settings, rollouts.worker_starts, rollouts.ledger)
    ray_retire(settings)  # Ray units a configuration no longer runs, once its services run without them
    handoff(settings)
after_the_boxes()  # every host: the one operation boxes and gateway share orders the gateway's after the boxes'
if "gateway" in host.groups:
    gateway()  # the front door: vLLM's router behind the same TLS and token, after the boxes it routes to
