"""The plan's report: the stable JSON (schema sparkctl.plan/1) and the table `python -m sparkctl plan` prints (the
message that refuses a configuration whose memory does not add up is PlanError's own, in plan.py).

JSON (`plan_json`, printed by `python -m sparkctl plan --json`; stable, additions only)
----------------------------------------------------------------------------------------
{
  "schema": "sparkctl.plan/1",
  "box": {"usable_gib", "os_reserve_gib", "embedders": [{"name", "resident_gib", "kv_gib", "total_gib",
          "resident_source" ("calibrated": set so the write-up's figures add up)}], "embedders_gib",
          "available_gib" (for the coder, after OS reserve and embedders), "bandwidth_gbps", "sparks", "topology"},
  "models": [{
    "name"                    catalog key ("qwen3.8-27b")
    "title"
    "topology", "sparks"      as planned; "engines": vLLM engines serving this model (replicas: sparks, else 1)
    "boxes"                   boxes this model occupies
    "resident_gib"            per box, excluding KV; "resident_source": "measured" | "estimate" | "calibrated" |
                              "derived" (weights + MODEL_RUNTIME_OVERHEAD_GIB) | "unknown"
    "free_gib"                per box, after OS reserve and embedders, before KV
    "kv_gib"                  KV budget per box (--kv-cache-memory-bytes); "kv_setting": where it came from
    "headroom_gib"            free_gib - kv_gib; "footprint_gib": resident_gib + kv_gib
    "max_kv_gib"              largest KV budget that fits (= free_gib)
    "fits"                    bool: headroom >= 0 and the KV holds at least one max-context request
    "problems"                list of strings (why it does not fit, estimate/measurement disagreements)
    "notes"                   list of strings (what the figures leave out)
    "max_context"             tokens per request (--max-model-len)
    "kv_bytes_per_token"      full-attention KV per token (the model's own layers, one engine, all boxes)
    "kv_tokens"               cached tokens, all engines together (measured when known, else estimate)
    "concurrent_requests"     concurrent max_context requests, all engines together (ditto); with --sparks 2 the
                              pair's total
    "source"                  "measured" | "estimate": where concurrent_requests comes from
    "kv_tokens_source"        "measured" | "estimate": where kv_tokens comes from (a source may give only the
                              concurrency: Laguna's "1.2 full-context requests")
    "kv_tokens_estimate", "kv_tokens_measured" (null when unknown), and the same for concurrent_requests
    "measured_source"         where the measured figures were published (null when none)
    "estimate_agreement"      "calibrated": a layer fact was set so the estimate meets the measurement (not
                              independent evidence); "independent": none was; null: nothing measured
    "calibrated"              {layer fact: why} calibrated to the measurement ({} when none)
    "draft_layers"            speculative (MTP / DFlash draft) layers whose KV shares the pool, per engine
    "engine_concurrent_requests_without_draft_estimate"  the estimate without the draft layers' KV (null: none)
    "engine_kv_tokens_estimate"        what one vLLM engine should log as "GPU KV cache size: N tokens"
    "engine_concurrent_requests_estimate"  ... and as "Maximum concurrency for L tokens per request: X"
    "engine_kv_token_slots_estimate"   num_gpu_blocks x block_size (vllm:cache_config_info labels)
    "block_size", "num_blocks", "blocks_per_request"   per engine, estimate (null when layer facts are missing)
    "min_kv_gib"              smallest KV budget that holds one max-context request (null when unknown)
    "layout_source"           "catalog" or "config.json:<path>"
    "roofline_tokens_per_s", "roofline_full_context_tokens_per_s"  estimates (tokens/s, one stream)
    "measured_decode_tokens_per_s"     bench probe, single stream (null when not measured)
    "provenance"              {"resident", "weights", "layers", "kv", "roofline"}: where each figure came from:
                              measured (with its source), calibrated, derived from the checkpoint's files (config.json
                              at <sha>, the lock's safetensors, or typed from its Hub page), hand-typed, or estimated
    "placement"               {"verdict": "one box" | "two boxes (tensor-parallel) only" | "does not fit" | "unknown",
                              "one_box",
                              "two_boxes"}: where one max-context request fits beside the embedders, with the
                              arithmetic of each
  }]
}
"""

from __future__ import annotations

from typing import TYPE_CHECKING



if TYPE_CHECKING:  # the plan's types, for reading only
    from sparkctl.capacity.plan import Box, BoxPlan, ModelPlan

SCHEMA = "sparkctl.plan/1"


def _r(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value + 0.0, digits)


# --- JSON -----------------------------------------------------------------------------------------------------------


def plan_json(plan: BoxPlan) -> dict:
    return {"schema": SCHEMA, "box": {**box_json(plan.box), "sparks": plan.sparks, "topology": plan.topology},
            "models": [model_json(m) for m in plan.models]}


def box_json(box: Box) -> dict:
    return {"usable_gib": _r(box.usable_gib), "os_reserve_gib": _r(box.os_reserve_gib),
            "embedders": [{"name": e.name, "resident_gib": _r(e.resident_gib), "kv_gib": _r(e.kv_gib),
                           "total_gib": _r(e.total_gib), "resident_source": e.resident_source}
                          for e in box.embedders],
            "embedders_gib": _r(box.embedders_gib), "available_gib": _r(box.available_gib),
            "bandwidth_gbps": box.bandwidth_gbps}


def model_json(m: ModelPlan) -> dict:
    cap = m.capacity
    return {
        "name": m.name, "title": m.title, "topology": m.topology, "sparks": m.sparks,
        "engines": m.engines, "boxes": m.boxes,
        "resident_gib": _r(m.resident_gib), "resident_source": m.resident_source,
        "free_gib": _r(m.free_gib), "kv_gib": _r(m.kv_gib), "kv_setting": m.kv_setting,
        "headroom_gib": _r(m.headroom_gib), "footprint_gib": _r(m.footprint_gib),
        "max_kv_gib": _r(m.max_kv_gib), "fits": m.fits,
        "problems": list(m.problems), "notes": list(m.notes),
        "max_context": m.max_context, "kv_bytes_per_token": m.kv_bytes_per_token,
        "kv_tokens": m.kv_tokens, "concurrent_requests": _r(m.concurrent_requests, 2),
        "source": m.source,
        "kv_tokens_estimate": m.kv_tokens_estimate, "kv_tokens_measured": m.kv_tokens_measured,
        "concurrent_requests_estimate": _r(m.concurrent_requests_estimate, 2),
        "concurrent_requests_measured": _r(m.concurrent_requests_measured, 2),
        "engine_kv_tokens_estimate": cap.tokens if cap else None,
        "engine_concurrent_requests_estimate": _r(cap.concurrency, 2) if cap else None,
        "engine_kv_token_slots_estimate": cap.token_slots if cap else None,
        "block_size": cap.block_size if cap else None, "num_blocks": cap.num_blocks if cap else None,
        "blocks_per_request": cap.blocks_per_request if cap else None,
        "min_kv_gib": _r(m.min_kv_gib),
        "layout_source": m.layout.source if m.layout else None,
        "roofline_tokens_per_s": _r(m.roofline_tokens_per_s, 1),
        "roofline_full_context_tokens_per_s": _r(m.roofline_full_context_tokens_per_s, 1),
        "measured_decode_tokens_per_s": m.measured_decode_tokens_per_s,
        "kv_tokens_source": m.kv_tokens_source, "measured_source": m.measured.source,
        "estimate_agreement": m.estimate_agreement, "calibrated": dict(m.measured.calibrated),
        "draft_layers": m.layout.draft_layers if m.layout else None,
        "engine_concurrent_requests_without_draft_estimate": _r(m.engine_concurrency_without_draft, 2),
        "provenance": dict(m.provenance),
        "placement": ({"verdict": m.placement.verdict.partition(":")[0], "one_box": m.placement.one_box,
                       "two_boxes": m.placement.two_boxes} if m.placement else None),
    }


# --- the table --------------------------------------------------------------------------------------------------------


def _gib(value: float) -> str:
    return f"{value:,.1f}" if abs(value) >= 0.1 or value == 0 else f"{value:.4g}"


def _est_meas(est: str | None, meas: str | None, calibrated: bool) -> str:
    """An estimate with the production measurement under it when one is known, and whether the two agree by
    calibration."""
    if est is None and meas is None:
        return "unknown"
    text = f"{est} est" if est is not None else ""
    if meas is not None:
        text += f"\n{meas} measured" + ("\n[dim](est calibrated)[/dim]" if calibrated and est is not None else "")
    return text


def _tokens(m: ModelPlan) -> str:
    est, meas = m.kv_tokens_estimate, m.kv_tokens_measured
    return _est_meas(None if est is None else f"{est:,}", None if meas is None else f"{meas:,}",
                     m.estimate_agreement == "calibrated")


def _concurrency(m: ModelPlan) -> str:
    est, meas = m.concurrent_requests_estimate, m.concurrent_requests_measured
    # from a token count: two decimals, as vLLM logs it; from a source that gave only the concurrency: as it gave it
    meas_text = None if meas is None else (f"{meas:.2f}" if m.kv_tokens_measured else f"{meas:g}")
    return _est_meas(None if est is None else f"{est:.2f}", meas_text, m.estimate_agreement == "calibrated")


def _decode(m: ModelPlan) -> str:
    parts = []
    if m.roofline_tokens_per_s is not None:
        parts.append(f"{m.roofline_tokens_per_s:,.1f} roofline")
    if m.roofline_full_context_tokens_per_s is not None:
        parts.append(f"{m.roofline_full_context_tokens_per_s:,.1f} at full ctx")
    if m.measured_decode_tokens_per_s is not None:
        parts.append(f"{m.measured_decode_tokens_per_s:,.1f} measured")
    return "\n".join(parts) or "-"


def _kv_label(setting: str) -> str:
    if setting.startswith("CODER_KV_CACHE_GIB"):
        return "group data"
    if setting.startswith("no CODER_KV_CACHE_GIB"):
        return "all free (no budget)"
    return "all free (split)" if setting.startswith("split") else setting


def print_table(plan: BoxPlan, configured_model: str) -> None:
    """The plan as a table on the terminal (190 columns when not one), its problems and notes under it;
    configured_model: CODING_MODEL, marked in the table."""
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=190)
    console.print(_box_line(plan))
    console.print(_table(plan, configured_model))
    for m in plan.models:
        for p in m.problems:
            console.print(f"[red]{m.name}:[/red] {p}", highlight=False)
        for n in m.notes:
            console.print(f"[dim]{m.name}: {n}[/dim]", highlight=False)
        if m.placement and m.placement.verdict != "one box":
            for line in (m.placement.one_box, m.placement.two_boxes):
                if not any(line in p for p in m.problems):
                    console.print(f"[dim]{m.name}: {line}[/dim]", highlight=False)
        for line in provenance_lines(m):
            console.print(f"[dim]{m.name}: provenance: {line}[/dim]", highlight=False)
    console.print("[dim]est = estimate from the layer facts (vLLM's hybrid KV allocator); measured = what production "
                  "reported (source in the notes); calibrated = a fact set so that a production figure comes out, so "
                  "its agreement is not independent evidence. Roofline = bandwidth / weight bytes per step x tokens "
                  "per step (upper bound).[/dim]", highlight=False)


def _box_line(plan: BoxPlan) -> str:
    box = plan.box
    emb = ", ".join(f"{e.name} {_gib(e.resident_gib)}{' calibrated' if e.resident_source == 'calibrated' else ''} + "
                    f"{_gib(e.kv_gib)} KV" for e in box.embedders) or "none"
    where = "each box" if plan.sparks > 1 else "the box"
    return (f"[bold]Box[/bold] ({plan.sparks} Spark{'s' if plan.sparks > 1 else ''}, {plan.topology}; figures "
            f"per box unless marked total): {_gib(box.usable_gib)} GiB usable - {_gib(box.os_reserve_gib)} OS "
            f"reserve - embedders {_gib(box.embedders_gib)} ({emb}) = {_gib(box.available_gib)} GiB for the "
            f"coding model on {where}; {box.bandwidth_gbps:g} GB/s")


def _table(plan: BoxPlan, configured_model: str):
    from rich.table import Table

    table = Table(show_lines=True)
    for col, justify in (("model", "left"), ("resident GiB", "right"), ("free after\nembedders", "right"),
                         ("KV budget", "right"), ("headroom", "right"), ("KV tokens\n(total)", "right"),
                         ("max ctx", "right"), ("concurrent\nmax-ctx reqs\n(total)", "right"),
                         ("decode tok/s\n(1 stream)", "right"), ("fits\n(where)", "center"),
                         ("provenance", "left")):
        table.add_column(col, justify=justify)
    for m in plan.models:
        configured = " [dim](configured)[/dim]" if m.name == configured_model else ""
        table.add_row(
            f"{m.name}{configured}",
            f"{_gib(m.resident_gib)}\n[dim]{m.resident_source}[/dim]",
            _gib(m.free_gib),
            f"{_gib(m.kv_gib)}\n[dim]{_kv_label(m.kv_setting)}[/dim]",
            _gib(m.headroom_gib),
            _tokens(m),
            f"{m.max_context:,}",
            _concurrency(m),
            _decode(m),
            ("[green]yes[/green]" if m.fits else "[red]NO[/red]") + f"\n[dim]{_where(m)}[/dim]",
            _provenance_cell(m),
        )
    return table


def _where(m: ModelPlan) -> str:
    verdict = m.placement.verdict if m.placement else ""
    if verdict.startswith("unknown"):
        return "unknown"
    return {"one box": "1 box", "does not fit": "nowhere"}.get(verdict, "2 boxes TP\nonly" if verdict else "")


def _short(text: str) -> str:
    """A provenance in a few words: its kind, and the commit it was read at."""
    kind, _, rest = text.partition(": ")
    at = rest.split("the lock at ", 1)[1][:12] if "the lock at " in rest else ""
    typed = "Hub page" if "typed from the Hub page" in rest else ""
    return f"{kind} ({'@' + at if at else typed})" if (at or typed) else kind


def _provenance_cell(m: ModelPlan) -> str:
    """resident, layers and KV: where each came from (the whole text is a note under the table)."""
    p = m.provenance
    layers = p.get("layers", "")
    layers = ("hand-typed" if layers == "catalog" else
              "config.json @" + layers.split("the lock at ", 1)[1][:12] if "the lock at " in layers else
              "config.json (Hub page)" if "Hub page" in layers else layers)
    return "\n".join((f"resident: {_short(p.get('resident', ''))}", f"layers: {layers}",
                      f"KV: {p.get('kv', '').partition(':')[0].partition(' from')[0]}"))


def provenance_lines(m: ModelPlan) -> list[str]:
    """Every figure's provenance in full, for the notes under the table."""
    return [f"{figure}: {text}" for figure, text in m.provenance.items()]


def admission_json(starts: dict) -> dict:
    """{box: [{service, start, running, free_gib, required_gib, footprint_gib, slack_gib, utilization, admitted,
    refusal}] or the reason}."""
    return {box: walked if isinstance(walked, str) else
            [{"service": s.service, "start": s.start, "running": list(s.running), "free_gib": round(s.free_gib, 3),
              "required_gib": round(s.required_gib, 3), "footprint_gib": round(s.footprint_gib, 3),
              "slack_gib": round(s.slack_gib, 3), "utilization": s.utilization, "admitted": s.admitted,
              "refusal": s.refusal} for s in walked] for box, walked in starts.items()}


def print_admission(starts: dict, cfg) -> None:
    """vLLM's start-up admission for each start the deploy can make: free then against required."""
    from rich.console import Console
    from rich.table import Table

    console = Console() if Console().is_terminal else Console(width=190)
    for box, walked in starts.items():
        if isinstance(walked, str):
            console.print(f"[red]admission ({box}): cannot be walked: {walked}[/red]", highlight=False)
            continue
        table = Table(title=f"vLLM's start-up admission on the {box} (free at vLLM's snapshot, the starting service "
                            f"holding {cfg.VLLM_STARTING_ENGINE_GIB:g} GiB itself, vs ceil("
                            f"{cfg.BOX_USABLE_MEMORY_GIB:g} GiB x --gpu-memory-utilization) = planned footprint + "
                            f"{cfg.VLLM_ADMISSION_MARGIN_GIB:g} GiB margin; slack = free - footprint)",
                      title_justify="left")
        for col in ("service", "start", "running beside it (GiB)", "free GiB", "required GiB", "slack GiB",
                    "utilization", ""):
            table.add_column(col)
        for s in walked:
            table.add_row(s.service, s.start, ", ".join(s.running) or "-", f"{s.free_gib:.2f}",
                          f"{s.required_gib:.2f}", f"{s.slack_gib:.2f}", f"{s.utilization:g}",
                          "admitted" if s.admitted else "[red]REFUSED[/red]")
        console.print(table)
        for s in walked:
            if not s.admitted:
                console.print(f"[red]{s.service} ({s.start}): {s.refusal}[/red]", highlight=False)
