"""The table the deploy prints after its health check, and the planned-vs-measured KV comparison."""

from __future__ import annotations

import io
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table


@dataclass
class Row:
    service: object  # sparkctl.services.Service
    status: str  # "healthy" or "FAILED: ..."
    kv_log: str | None  # vLLM's own "GPU KV cache size" / "Maximum concurrency" journal lines
    load_s: float | None  # seconds from start to "Application startup complete"


def planned_tokens(settings, svc) -> int | None:
    """KV tokens the capacity planner expects for this service's budget (None without a planner estimate)."""
    try:
        from sparkctl import catalog, planner
    except ImportError:
        return None
    if svc.role != "coder":
        return None
    cat = catalog.resolve(settings.data.get("CATALOG_OVERRIDES"))
    plan = planner.plan_box(settings.data, cat, coding_model=svc.model.key)
    for m in plan.models:
        if m.name == svc.model.key:
            return int(m.kv_tokens)
    return None


def measured_tokens(kv_log: str | None) -> int | None:
    if not kv_log:
        return None
    try:
        from sparkctl.vllm_report import parse_kv_capacity
    except ImportError:
        return None
    tokens, _conc, _per = parse_kv_capacity(kv_log)
    return tokens


def render(rows: list[Row], settings, base_url: str) -> tuple[str, list[str]]:
    table = Table(title=f"{settings.host_name}: {base_url}")
    for col in ("service", "served as", "model", "revision", "status", "load s", "KV tokens planned",
                "KV tokens (vLLM)"):
        table.add_column(col)
    warnings = []
    for r in rows:
        svc = r.service
        planned = planned_tokens(settings, svc)
        measured = measured_tokens(r.kv_log)
        if planned and measured:
            try:
                from sparkctl.vllm_report import compare_planned_measured
                w = compare_planned_measured(planned, measured, settings.data["PLAN_MEASURED_TOLERANCE"])
            except ImportError:
                w = None
            if w:
                warnings.append(f"{svc.unit}: {w}")
        table.add_row(svc.name, svc.served_name, svc.model.key, svc.checkpoint.sha[:12], r.status,
                      "-" if r.load_s is None else f"{r.load_s:.1f}", "-" if planned is None else f"{planned:,}",
                      "-" if measured is None else f"{measured:,}")
    buf = io.StringIO()
    Console(file=buf, width=160, force_terminal=False).print(table)
    return buf.getvalue(), warnings
