"""Which boxes to deploy to.

Real GX10s: GX10_HOSTS=spark-1[,spark-2] (plus GX10_SSH_USER, GX10_SSH_KEY, GX10_SSH_PORT, GX10_KNOWN_HOSTS).
Per-box coding model (split topology): SPARK_CODING_MODELS=spark-1=laguna-s-2.1,spark-2=qwen3.8-27b.
The front door (vLLM's router): GATEWAY_HOSTS=<host> (group `gateway`; a box named there is in both groups).
Without GX10_HOSTS: the simulated Spark(s) booted by `python -m sparkctl sim up` (group `sim` as well, whose
group data holds every difference from a real box); an instance booted with `--gateway NAME` is the `gateway`
group's host instead of a box.
"""

from sparkctl.config.hosts import gateway_hosts, real_hosts, sim_gateway_hosts, sim_hosts, with_models

_real = with_models(real_hosts())
_sim = [] if _real else with_models(sim_hosts())

if not _real and not _sim:
    raise SystemExit("inventory.py: no hosts. Set GX10_HOSTS=<box>[,<box>] for real GX10s, "
                     "or boot the simulated Spark: python -m sparkctl sim up")

gx10 = [(h.name, h.pyinfra_data()) for h in (_real or _sim)]
_gateway = gateway_hosts() if _real else sim_gateway_hosts()
if _sim:  # defined after gx10: group_data/sim.py wins over group_data/gx10.py (a simulated gateway takes it too)
    sim = [h.name for h in _sim] + [h.name for h in _gateway]
if _gateway:  # a box also named as the gateway keeps its box data; the group only adds the gateway step
    gateway = [h.name if h.name in dict(gx10) else (h.name, h.pyinfra_data()) for h in _gateway]
