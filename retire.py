"""CARouter Cloud GX10: retire a box.   pyinfra inventory.py retire.py --limit <box>

The out-of-service part of retiring a box (docs/retire.md), in one command the box itself
carries out (tasks/retire.py, sparkctl/box/retire_services.py): its served models leave the gateway's routers while its API
still serves, drain, and its vLLM units and watchdog stop and are disabled; checkpoints, venvs and nginx stay, so
`pyinfra inventory.py deploy.py` brings it back while it is still in the inventory. Refused before anything is
touched: no --limit, half of a tensor-parallel pair, the last box serving a served model (RETIRE_LAST_OF_POOL).
A retired box is left as it is. Then take it out of its pool and GX10_HOSTS and run the deploy.
"""

from pyinfra import host

from sparkctl.errors import Refused
from tasks.preflight import settings_for_host
from tasks.retire import retire

if "gx10" in host.groups:
    retire(settings_for_host())  # pure validation first: no command has run yet
else:
    raise Refused(f"{host.name} is not a box (group gx10): retire.py retires boxes; --limit only boxes")
