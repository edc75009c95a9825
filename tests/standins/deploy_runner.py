"""Run the whole deploy in-process against pyinfra's @fake connector; print what it would do as JSON.

    python tests/standins/deploy_runner.py INVENTORY [--data K=V ...]     (FAKE_DEPLOY_FILE: another deploy file,
                                                                           e.g. retire.py; default deploy.py)

Used by the @fake tests in a subprocess (pyinfra's CLI keeps global state, one run per process). Commands are
recorded per host.
"""

import json
import os
import sys

import click
import pyinfra
from pyinfra_cli.main import cli


# the vLLM step builds the control machine's wheelhouse from the index when it has none (sparkctl/check/wheelhouse.py):
# a fake deploy never downloads it. An index that does not answer (the discard port), unless the test names one.
NO_INDEX = "http://127.0.0.1:9/simple/"


def main(argv):
    pyinfra.is_cli = True
    os.environ.setdefault("PIP_INDEX_URL", NO_INDEX)
    args = ["-y", *argv[1:], argv[0], os.environ.get("FAKE_DEPLOY_FILE", "deploy.py")]
    result = {"error": None, "commands": [], "ops": [], "by_host": {}, "ops_by_host": {}}
    try:
        cli.main(args=args, standalone_mode=False)
    except click.ClickException as exc:
        try:
            result["error"] = exc.format_message()
        except AttributeError:  # pyinfra's UnexpectedExternalError has no message: say what it wraps
            result["error"] = f"{type(exc).__name__}: {exc.__cause__ or exc.__context__!r}"
    except SystemExit as exc:
        result["error"] = f"exit {exc.code}"
    except Exception as exc:  # noqa: BLE001 - report anything, the test asserts on it
        result["error"] = f"{type(exc).__name__}: {exc}"
    state = pyinfra.state
    if state is not None and getattr(state, "inventory", None) is not None:  # none when config.py refused
        for host in state.inventory:
            cmds = [str(c) for c in getattr(host.connector, "executed_commands", [])]
            result["by_host"][host.name] = cmds
            result["commands"] += cmds
            result["ops_by_host"][host.name] = [
                sorted(state.op_meta[h].names)[0] for h in state.get_op_order()
                if h in state.ops.get(host, {})]
            result.setdefault("op_orders", {})[host.name] = [  # what pyinfra ordered each operation by
                [op_hash, list(state.op_meta[op_hash].op_order)] for op_hash in host.op_hash_order]
        for op_hash in state.get_op_order():
            meta = state.op_meta[op_hash]
            result["ops"].append(sorted(meta.names)[0] if meta.names else op_hash)
            result.setdefault("op_names", []).append(sorted(meta.names))
        result["failed_hosts"] = [h.name for h in state.failed_hosts]
    print("FAKE-DRIVER-JSON " + json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
