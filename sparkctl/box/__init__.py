"""Scripts the deploy uploads to the box and runs there: the rollout transaction (with its acceptance verdict
wait, a tensor-parallel worker's following of its head, and the watchdog's restart), the checkpoint download and
verification, vLLM's own argument check, the watchdog and the metrics textfiles; the box's retire (retire_services.py,
which `pyinfra inventory.py retire.py` uploads and runs); and the pair's link probe (link_probe.py: an all-reduce
across a tensor-parallel pair, run by a rehearsal and before a pair's swap, with torch from the box's vLLM venv).

Standard library only (plus, where named, the box's vLLM venv): they run with the box's python3, and nothing here
imports the rest of sparkctl. The control side refers to them by path, except contract.py, the box boundary written
once (phases, outcomes and exit codes, the JSON documents, every rollout.py argument and the setting it comes
from), and boxio.py, the one atomic write (the control side's hand-off, PKI and lock files too), which both sides
import, and check_vllm_args.py, which `python -m sparkctl check` also runs on the control
machine (how systemd reads an env file back; vLLM's own parser where vLLM is installed there).

May import: nothing of sparkctl beyond this folder (the standard library, and where named the box's vLLM venv).
"""
