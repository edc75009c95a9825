"""pyinfra helpers several steps share (not a step): failing a host, following the box's rollout transaction,
marking a box (not) ready in the gateway hand-off, and the control machine's TLS material for the proxy."""

from __future__ import annotations

import json
import time
from pathlib import Path

import gevent
from pyinfra import logger
from pyinfra.api import FunctionCommand, StringCommand
from pyinfra.api.arguments import CONNECTOR_ARGUMENT_KEYS
from pyinfra.api.command import QuoteString

from sparkctl import REPO_ROOT
from sparkctl.box import contract
from sparkctl.config import pki
from sparkctl.config.schema import GroupData
from sparkctl.config.secrets import secrets_dir, tls_file
from sparkctl.config.settings import HostConfig
from sparkctl.render import gateway

# connector arguments a FunctionCommand's own ssh calls must not inherit from the op (they bound the op, not a call)
_OP_ONLY_ARGS = ("_retries", "_retry_delay", "_retry_until", "_timeout")


def _fail(state, host, message: str) -> bool:
    """FunctionCommand body: log why, and fail this host's operation (pyinfra stops the host cleanly)."""
    host.log_styled(message, fg="red", log_func=logger.error)
    return False


def fail(message: str) -> FunctionCommand:
    return FunctionCommand(_fail, (message,), {})


def connector_args(host) -> dict:
    """The op's connector arguments (sudo, ...), for the ssh calls a FunctionCommand body makes itself."""
    given = host.current_op_global_arguments or {}
    return {k: given[k] for k in CONNECTOR_ARGUMENT_KEYS if k in given and k not in _OP_ONLY_ARGS}


def box_command(env_prefix: str, script: str, args: list[str]) -> StringCommand:
    """`python3 rollout.py ARGS` on the box with the deploy's environment prefix (args: contract.argv(...))."""
    return StringCommand(env_prefix, "python3", QuoteString(script), *[QuoteString(a) for a in args])


# --- the gateway hand-off on the control machine --------------------------------------------------------------

def handoff_dir(cfg: GroupData) -> Path:
    return Path(cfg.GATEWAY_HANDOFF_DIR) if Path(cfg.GATEWAY_HANDOFF_DIR).is_absolute() \
        else REPO_ROOT / cfg.GATEWAY_HANDOFF_DIR


def ready_target(cfg: GroupData, served: str) -> dict:
    """What a rollout needs to mark its box's endpoint for `served` (not) ready in the hand-off."""
    return {"dir": str(handoff_dir(cfg)), "namespace": cfg.GATEWAY_NAMESPACE, "k8s": cfg.GATEWAY_K8S_VERSION,
            "served": served}


def _mark_ready(target: dict, box: str, ready: bool) -> None:
    """Flip `conditions.ready` of this box's endpoint in the existing hand-off (none yet: no-op)."""
    out, served = Path(target["dir"]), target["served"]
    if not (out / "endpoints.json").exists():
        return
    endpoints = gateway.set_ready(json.loads((out / "endpoints.json").read_text()), box, served, ready)
    docs = gateway.manifests(endpoints, target["namespace"])
    gateway.validate_manifests(docs, target["k8s"])
    gateway.write(out, endpoints, docs)
    logger.info(f"{box}: gateway hand-off: {served} on {box} {'ready' if ready else 'NOT ready (draining)'}")


def mark_ready(host, handoff: dict | None, ready: bool) -> None:
    """During a rollout: mark this box's endpoint (not) ready in the gateway hand-off (handoff: ready_target(...),
    None: the box serves no API); a hand-off problem never stops a rollout."""
    if not handoff:
        return
    try:
        _mark_ready(handoff, host.name, ready)
    except Exception as exc:  # noqa: BLE001 - reported, never fatal
        host.log_styled(f"gateway hand-off not updated: {exc}", fg="yellow", log_func=logger.warning)


def tls_material(settings: HostConfig) -> tuple[Path, Path, Path | None]:
    """(certificate chain, key, CA to report) on the control machine: the operator's, or a generated local CA that
    names the box's address."""
    cfg = settings.cfg
    if cfg.TLS_CERT_FILE:
        return tls_file(cfg.TLS_CERT_FILE), tls_file(cfg.TLS_KEY_FILE), None
    names = [settings.address, settings.host_name, *cfg.TLS_SERVER_NAMES]
    return pki.ensure_server_cert(secrets_dir(cfg) / "pki", settings.host_name, names)


# --- following the box's transaction (sparkctl/box/rollout.py) -------------------------------------------------

def follow_transaction(host, kw: dict, service: str, txn: str, rollout_py, interval: float) -> dict | None:
    """Poll `rollout.py follow` (one short ssh call each time; rollout_py(args) -> the command), print new log
    lines; the recorded result, or {"rc": 0, "outcome": contract.AWAITING, ...} when the transaction passed its
    health gate and waits for the acceptance verdict that nobody sent yet (the box decides alone at its deadline:
    nothing to wait for here)."""
    offset, misses = 0, 0
    while True:
        ok, out = host.run_shell_command(rollout_py(contract.argv("follow", {}, service=service, txn=txn,
                                                                  offset=offset)), **kw)
        lines = out.stdout_lines if ok else []
        st = json.loads(lines[-1][3:]) if lines and lines[-1].startswith("@@ ") else None
        if st is None:
            misses += 1
            if misses > 5:
                host.log_styled(f"lost track of rollout {txn} of vllm-{service}; it goes on on the box: rerun the "
                                f"deploy to attach to it or read its result", fg="red", log_func=logger.error)
                return None
            gevent.sleep(interval)
            continue
        misses, offset = 0, st["offset"]
        for line in lines[:-1]:
            host.log(f"vllm-{service}: {line}")
        if st["done"] or st.get("awaiting"):
            return (st["result"] or {}) if st["done"] else _awaiting_result(txn, st)
        gevent.sleep(interval)


def _awaiting_result(txn: str, st: dict) -> dict:
    """The pseudo-result of a transaction that waits for its acceptance verdict (follow's "@@" line)."""
    deadline = st.get("verdict_deadline")
    return {"rc": contract.code(contract.AWAITING), "outcome": contract.AWAITING, "txn": txn,
            "candidate": st.get("candidate"), "probe_key": st.get("probe_key") or "",
            "deadline": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(deadline))) if deadline else "?"}
