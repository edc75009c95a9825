"""`python -m sparkctl status [--json] [--host NAME]`: every box and service at a glance
(docs/operating.md "Monitoring")."""

from __future__ import annotations

import argparse
import datetime as _dt
import io
import json

from rich.console import Console
from rich.table import Table

from sparkctl.check.load import load
from sparkctl.config import hosts
from sparkctl.errors import SparkctlError
from sparkctl.status import fleet

COLUMNS = [("service", "service"), ("served", "served as"), ("model", "model"), ("revision", "revision"),
           ("vllm_version", "vLLM"), ("up_since", "up since"), ("healthy", "healthy"), ("running", "run"),
           ("waiting", "wait"), ("kv_usage_pct", "KV %"), ("watchdog_restarts", "watchdog")]


def cell(key: str, row: dict) -> str:
    value = row.get(key)
    if key == "revision" and value:
        return value[:12]
    if key == "healthy":
        return "healthy" if value else f"NO ({row.get('active') or 'unknown'})"
    if key == "watchdog_restarts":
        return f"{value} restarts" + (", GAVE UP" if row.get("watchdog_gave_up") else "")
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return "-" if value is None else str(value)


def render(result: dict, width: int = 200) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, no_color=True)
    for box, info in result["boxes"].items():
        if info["error"]:
            console.print(f"{box}: UNREACHABLE: {info['error']}")
            continue
        first = info["services"][0] if info["services"] else {}
        title = (f"{box}: MemAvailable {cell('mem_available_gib', first)} GiB, certificate expires in "
                 f"{cell('cert_expires_in_days', first)} days (read in {info['probe_s']} s)")
        table = Table(title=title)
        for _key, header in COLUMNS:
            table.add_column(header)
        for row in info["services"]:
            table.add_row(*[cell(key, row) for key, _h in COLUMNS])
        console.print(table)
        if info.get("retired"):
            console.print(retired_line(box, info["retired"]), highlight=False, markup=False, soft_wrap=True)
        for line in rollout_lines(box, info):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
    return buf.getvalue()


def retired_line(box: str, marker: dict) -> str:
    """A retired box's services are down on purpose: say so, and how it comes back."""
    return (f"{box}: RETIRED at {marker.get('at', '?')} (transaction {marker.get('txn', '?')}): its services are "
            f"stopped on purpose; `pyinfra inventory.py deploy.py --limit {box}` brings it back")


def unwell(box: dict) -> bool:
    """Something wrong on a box: unreachable, or a service down or given up on, unless the box was retired."""
    if box["error"]:
        return True
    return not box.get("retired") and not all(r["healthy"] and not r["watchdog_gave_up"] for r in box["services"])


def rollout_lines(box: str, info: dict) -> list[str]:
    """One line per service: a rollout running now, and the last one's result (outcome, transaction, first line
    of its message; `--json` has the whole result file)."""
    lines = [f"{box}: a rollout or restart of {r['service']} is running now" for r in info["services"]
             if r.get("rollout_running")]
    for service, ro in info["last_rollouts"].items():
        data = ro.get("data") or {}
        when = _dt.datetime.fromtimestamp(ro["mtime"], _dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC") \
            if ro.get("mtime") else "?"
        by = f", asked by {data['by']}" if data.get("by") else ""
        message = (str(data.get("message") or data.get("unreadable") or "").splitlines() or [""])[0]
        lines.append(f"{box}: last rollout of {service} ({ro['file']}, {when}): {data.get('outcome', '?')} "
                     f"(transaction {data.get('txn', '?')}{by}): {message}")
    if not info["last_rollouts"]:
        lines.append(f"{box}: last rollout: no result recorded")
    return lines


def run(args) -> int:
    configured = hosts.configured_hosts()
    if args.host:
        configured = [hosts.find(args.host)]
    if not configured:
        raise SparkctlError("no host configured: set GX10_HOSTS=<box>[,<box>] or run `python -m sparkctl sim up`")
    result = fleet.status(configured, load().cfg)  # the configured box's group data, validated
    print(json.dumps(result, indent=2) if args.json else render(result), end="" if not args.json else "\n")
    return 1 if any(unwell(b) for b in result["boxes"].values()) else 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="every box and service at a glance (one ssh round trip per box)")
    p.add_argument("--json", action="store_true", help="machine-readable (schema sparkctl.status/2)")
    p.add_argument("--host", help="only this inventory host")
    p.set_defaults(func=run)
