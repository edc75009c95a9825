"""pyinfra glue: one importable @deploy function per step, called in order by deploy.py.

The steps run in the order of deploy.py's calls; docs/layout.md ("The steps") lists them with what each does.
Each takes the host's Settings, built once by the check layer (preflight.settings_for_host: check/validate.py's
validate_host) and read as `settings.cfg.SETTING`; what one step needs from another is returned by it and handed on
in deploy.py. The logic they apply lives in the sparkctl
package; these modules only turn it into operations.

Not steps: facts.py (the facts the steps read), common.py (pyinfra helpers several steps share: failing a host,
following the box's transaction, marking the gateway hand-off ready, the proxy's TLS material), rollout.py (the
services step's rollout operations and the ledger they fill while they execute), retire.py (the glue of the other
deploy file, retire.py at the repo root: `pyinfra inventory.py retire.py --limit <box>` takes a box out of service)
and pyinfra_fast.py (two of pyinfra's own functions made cheap, with the same results: deploy.py installs them
first). A step imports none of another step's private names; errors (sparkctl.errors.Refused) and box paths
(sparkctl.render, the box boundary's sparkctl/box/contract.py, sparkctl/config/box_paths.py) live in the package.

May import: sparkctl.config, sparkctl.check, sparkctl.render, sparkctl.measure, sparkctl.fleet, sparkctl.box.contract
(the box boundary), sparkctl.capacity.admission (the preflight walks this deploy's vLLM starts beside what the box
runs now), sparkctl.errors, and pyinfra.
"""
