"""Health, after rollout: every service answers on the box, then for real through the TLS proxy with the token.

Runs on every deploy and changes nothing (a converged box reports no change); a failure fails the deploy with
the service's journal. It also reads the KV capacity vLLM itself reported and sets it beside the plan.
"""

from __future__ import annotations

import ssl
import time

import httpx
from pyinfra import host, logger
from pyinfra.api import deploy, operation

from sparkctl.config.catalog import CODER
from sparkctl.config.settings import Settings
from sparkctl.render import health_table
from tasks.common import fail, tls_material
from tasks.facts import JournalText, ListenerReady, LoadSeconds, UnitProperties

KV_LINES = r"GPU KV cache size|Maximum concurrency for"


def _client(settings: Settings) -> httpx.Client:
    _cert, _key, ca = tls_material(settings)
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl.create_default_context()
    return httpx.Client(verify=ctx, timeout=settings.cfg.HEALTH_REQUEST_TIMEOUT_S, trust_env=False,
                        transport=httpx.HTTPTransport(verify=ctx, retries=0))


def probe_through_proxy(client: httpx.Client, base: str, svc, token: str, max_tokens: int) -> str:
    """One real request through nginx; returns "" when it worked, else what went wrong."""
    headers = {"Authorization": f"Bearer {token}"}
    url = f"{base}/{svc.served_name}/v1"
    try:
        if svc.role == CODER:
            r = client.post(f"{url}/chat/completions", headers=headers, json={
                "model": svc.served_name, "messages": [{"role": "user", "content": "Write a Python hello world."}],
                "max_tokens": max_tokens, "temperature": 0})
            ok = r.status_code == 200 and r.json().get("usage", {}).get("completion_tokens", 0) > 0
        else:
            r = client.post(f"{url}/embeddings", headers=headers, json={"model": svc.served_name,
                                                                        "input": ["health check"]})
            ok = r.status_code == 200 and len(r.json()["data"][0]["embedding"]) > 0
        unauth = client.get(f"{url}/models").status_code
        if unauth != 401:
            return f"{url}/models answered {unauth} without the token (expected 401)"
        return "" if ok else f"{r.status_code} {r.text[:200]}"
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        return f"{type(exc).__name__}: {exc}"


def wait_listening(cfg, svc, deadline: float) -> list | None:
    """The model ids the service's own listener answers with, polled until it lists its served name or the
    deadline passes."""
    while True:
        ids = host.get_fact(ListenerReady, port=svc.port, served=svc.served_name,
                            timeout=cfg.HEALTH_LISTENER_TIMEOUT_S)
        if (ids and svc.served_name in ids) or time.monotonic() > deadline:
            return ids
        time.sleep(cfg.HEALTH_POLL_INTERVAL_S)


def check_service(settings: Settings, client: httpx.Client, base: str, svc, deadline: float
                  ) -> tuple[health_table.Row, str]:
    """(the service's table row, its failure with the journal, or "")."""
    cfg = settings.cfg
    if svc.headless:
        props = host.get_fact(UnitProperties, unit=svc.unit)
        return health_table.Row(svc, props.get("ActiveState", "?"), None, None), ""
    ids = wait_listening(cfg, svc, deadline)
    problem = "" if ids and svc.served_name in ids else f"127.0.0.1:{svc.port}/v1/models answered {ids}"
    problem = problem or probe_through_proxy(client, base, svc, settings.api_token, cfg.HEALTH_PROBE_MAX_TOKENS)
    kv_text = host.get_fact(JournalText, unit=svc.unit, lines=4, grep=KV_LINES)
    load_s = host.get_fact(LoadSeconds, unit=svc.unit)
    row = health_table.Row(svc, "healthy" if not problem else f"FAILED: {problem}", kv_text, load_s)
    if not problem:
        return row, ""
    journal = host.get_fact(JournalText, unit=svc.unit, lines=cfg.HEALTH_JOURNAL_LINES)
    return row, f"{svc.unit} ({svc.model.key}): {problem}\n--- last journal lines ---\n{journal}"


@operation()
def health_gate(settings: Settings, service_list: list, known_failed: dict[str, list[str]]):
    """Wait for each service, probe it through the proxy, print the table; fail with the journal otherwise."""
    if not host.state.is_executing:
        host.noop("checked after rollout")
        return
    deadline = time.monotonic() + settings.cfg.HEALTH_READY_TIMEOUT_S
    base = f"https://{settings.address}:{settings.cfg.PROXY_PORT}"
    with _client(settings) as client:
        checked = [check_service(settings, client, base, svc, deadline) for svc in service_list]
    rows, failures = [row for row, _ in checked], [problem for _, problem in checked if problem]
    table, warnings = health_table.render(rows, settings, base)
    logger.info(f"{host.name}: health through {base}\n{table}")
    for w in warnings:
        logger.warning(f"{host.name}: WARNING: {w}")
    # a remembered failed candidate restarted nothing and the box still serves; the deploy did not do what it was
    # asked, so it fails here, after everything else (proxy, other services) was applied
    failures += [f"{line} (the box keeps serving its previous configuration)"
                 for line in known_failed.get(host.name, [])]
    if failures:
        yield fail(f"{host.name}: health check failed:\n" + "\n".join(failures))
    else:
        host.noop(f"{len(rows)} service(s) healthy through {base}")


@deploy("Health")
def health(settings: Settings, known_failed: dict[str, list[str]], service_list: list | None = None) -> None:
    """known_failed: box -> one line per service whose configuration failed before and was not retried, filled
    while the services step's rollouts execute (tasks/rollout.py RolloutLedger.known_failed)."""
    service_list = service_list if service_list is not None else settings.services
    health_gate(name="Health: every service answers through the TLS proxy", settings=settings,
                service_list=service_list, known_failed=known_failed)
