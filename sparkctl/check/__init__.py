"""The checks of the settings: how every entry point reads a host's settings (load.py: the schema's types, the
cross-field rules, the catalog), the cross-field rules of the settings (rules.py), the deploy's whole
validation of a host (validate.py: what tasks/preflight.py runs before the first operation), every file the deploy
writes rendered and run through the real validators (render.py, tools.py), a refused line blamed on its setting
(blame.py), the gateway's whole validation (gateway.py: its boxes, a tensor-parallel worker refused, its ports
apart, its accounts apart from a box's), every file the gateway writes through the real validators (gateway_files.py:
nginx -t, systemd-analyze verify, nft -c, keepalived -t), what pip installs into the box's vLLM venv resolved here
(resolve.py) and the control machine's wheelhouse of it, downloaded once and pinned with its hashes (wheelhouse.py),
and `python -m sparkctl check` (cli.py).

Where a refusal lives (each a SettingError naming the setting, the value and what is valid, raised before the first
operation changes a box): one setting's type, unit and range in config/schema.py and schema_types.py, a catalog
entry's fields in config/catalog.py; two or more settings against each other in rules.py; what only the memory plan,
the fleet's pools or the gateway can tell in capacity/, fleet/validate.py and gateway.py; a file the operator
supplies (group data, a secret, the lock) where config/ reads it; a rendered file in render.py, by its real
validator; and three refusals where the value is used: render/units.py (a vLLM argument that is not one line),
render/router.py (a gateway with no box to route to) and tasks/oom_guard.py (a size systemd would read otherwise).

May import: sparkctl.config, sparkctl.capacity, sparkctl.fleet, sparkctl.render, sparkctl.box.check_vllm_args (vLLM's own argument
check and how systemd reads an env file back), sparkctl.errors. No pyinfra, nothing on a box.
"""
