"""Every check of the settings, in one place: how every entry point reads a host's settings (load.py: the schema's
types, the cross-field rules, the catalog), the one home of the cross-field rules (rules.py), the deploy's whole
validation of a host (validate.py: what tasks/preflight.py runs before the first operation), every file the deploy
writes rendered and run through the real validators (render.py, tools.py), a refused line blamed on its setting
(blame.py), the gateway's whole validation (gateway.py: its boxes, a tensor-parallel worker refused, its ports
apart), and `python -m sparkctl check` (cli.py).

May import: sparkctl.config, sparkctl.capacity, sparkctl.fleet, sparkctl.render, sparkctl.box.check_vllm_args (vLLM's own argument
check and how systemd reads an env file back), sparkctl.errors. No pyinfra, nothing on a box.
"""
