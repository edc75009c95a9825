"""The table the deploy prints after its health check, and the planned-vs-measured KV comparison."""

from __future__ import annotations

import io
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from sparkctl.config.settings import Settings


@dataclass
class Row:
    service: object  # sparkctl.render.units.Service
    status: str  # "healthy" or "FAILED: ..."
    kv_log: str | None  # vLLM's own "GPU KV cache size" / "Maximum concurrency" journal lines
    load_s: float | None  # seconds from start to "Application startup complete"


def compare(settings: Settings, svc, kv_log: str | None):
    """vLLM's reported KV capacity beside the capacity plan (coder only; embedders are not planned per token)."""
    if svc.role != "coder":
        return None
    from sparkctl.capacity import planner, vllm_reported

    plan = planner.check_fits(settings.cfg, settings.catalog, svc.model.key)
    return vllm_reported.compare_with_plan(plan, kv_log or None, settings.cfg.PLAN_MEASURED_TOLERANCE)


def render(rows: list[Row], settings: Settings, base_url: str) -> tuple[str, list[str]]:
    table = Table(title=f"{settings.host_name}: {base_url}")
    for col in ("service", "served as", "model", "revision", "status", "load s", "KV tokens planned",
                "KV tokens (vLLM)"):
        table.add_column(col)
    warnings = []
    for r in rows:
        svc = r.service
        cmp = compare(settings, svc, r.kv_log)
        planned = cmp.planned_tokens if cmp else None
        measured = cmp.measured_tokens if cmp else None
        if cmp and cmp.warning:
            warnings.append(f"{svc.unit}: {cmp.warning}")
        table.add_row(svc.name, svc.served_name, svc.model.key, svc.checkpoint.sha[:12], r.status,
                      "-" if r.load_s is None else f"{r.load_s:.1f}", "-" if planned is None else f"{planned:,}",
                      "-" if measured is None else f"{measured:,}")
    buf = io.StringIO()
    Console(file=buf, width=160, force_terminal=False).print(table)
    return buf.getvalue(), warnings
