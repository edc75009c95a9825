"""The fleet: N GX10s as one service. Pools of boxes, each serving one coding model (or made of tensor-parallel
pairs), read from group data or from today's SPARK_TOPOLOGY (pools.py); their placement over the inventory, each
box's memory and each pool's capacity (placement.py); the waves a coder rollout takes and the gate the deploy drives
while it runs them (waves.py, wave_gate.py); the refusals (validate.py: `validate_fleet`); a rollout's wall-time estimate
(estimate.py); whether boxes may be retired (retirable.py: no served model left on no box, no pair split); who fetches each
checkpoint from the Hub and who copies it from whom, in which round (fanout.py); the fleet
section of `python -m sparkctl plan` and its JSON, schema sparkctl.fleet/1 (report.py; the command is sparkctl/plan/).

Pure logic: no pyinfra, no network, no printing outside report.py.
May import: sparkctl.config, sparkctl.capacity, sparkctl.errors.
"""
