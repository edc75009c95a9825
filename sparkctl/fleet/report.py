"""The fleet section of `python -m sparkctl plan`: its JSON (schema sparkctl.fleet/1, under the plan's "fleet" key)
and its tables.

JSON (`fleet_json`; stable, additions only)
-------------------------------------------
{
  "schema": "sparkctl.fleet/1",
  "topology": SPARK_TOPOLOGY's name, or "pools" (FLEET_POOLS),
  "hosts": [inventory names, in order],
  "pools": [{"name", "model", "served_name", "tensor_parallel", "embedders", "boxes": [names], "units": [[names]],
             "capacity": {"engines", "max_context",
                          "concurrent_requests" (max-context requests at once, all engines; null when unknown),
                          "concurrent_source" (measured, with its source, or the estimate's layer facts),
                          "decode_tokens_per_s" ({streams per box: aggregate tok/s, all boxes}; {} when none),
                          "decode_source", "roofline_tokens_per_s" (one engine, one stream, an upper bound)}}],
  "boxes": [{"box", "pool", "model", "role" ("single" | "replica" | "split" | "head" | "worker"),
             "usable_gib", "os_reserve_gib", "embedders_gib", "resident_gib", "kv_gib", "kv_setting",
             "headroom_gib", "largest_kv_gib", "fits"}],
  "rollout": {"ROLLOUT_WAVES", "MAX_UNAVAILABLE", "MAX_FAIL_PERCENTAGE": as set,
              "waves": [[box names]] (a pair's two boxes in the same wave),
              "estimate": {"units", "waves",
                           "phases": [{"name", "setting", "low_s", "high_s"}],
                           "per_unit_s", "serial_s", "waves_s": [low, high],
                           "cold": the first rollout of a new build or model, as "phases" .. "waves_s" (its load
                                   ROLLOUT_ESTIMATE_COLD_LOAD_S),
                           "deadlines": [{"load_setting", "setting", "seconds", "load_high_s", "outlasted"}]
                                        (the gate's deadline each load is judged by)}},
  "notes": [strings]
}
"""

from __future__ import annotations

from sparkctl.fleet import waves as waves_mod
from sparkctl.fleet.estimate import hours
from sparkctl.fleet.overview import FleetPlan

SCHEMA = "sparkctl.fleet/1"


def _r(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value + 0.0, digits)


def fleet_json(plan: FleetPlan) -> dict:
    est = plan.estimate
    capacity = {c.pool: c for c in plan.capacity}
    return {
        "schema": SCHEMA, "topology": plan.fleet.topology, "hosts": list(plan.fleet.hosts),
        "pools": [{"name": p.pool.name, "model": p.pool.model, "served_name": p.pool.served_name,
                   "tensor_parallel": p.pool.tensor_parallel, "embedders": p.pool.embedders,
                   "boxes": list(p.boxes), "units": [list(u) for u in p.units],
                   "capacity": _capacity_json(capacity[p.pool.name])} for p in plan.fleet.pools],
        "boxes": [{"box": m.box, "pool": m.pool, "model": m.model, "role": plan.fleet.role(m.box),
                   "usable_gib": _r(m.usable_gib), "os_reserve_gib": _r(m.os_reserve_gib),
                   "embedders_gib": _r(m.embedders_gib), "resident_gib": _r(m.resident_gib), "kv_gib": _r(m.kv_gib),
                   "kv_setting": m.kv_setting, "headroom_gib": _r(m.headroom_gib),
                   "largest_kv_gib": _r(m.largest_kv_gib), "fits": m.fits} for m in plan.memory],
        "rollout": {**plan.settings, "waves": waves_mod.wave_boxes([list(w) for w in plan.waves]),
                    "estimate": {"units": est.units, "waves": est.waves, **_sums_json(est),
                                 "cold": _sums_json(est.cold),
                                 "deadlines": [{"load_setting": d.load_setting, "setting": d.setting,
                                                "seconds": d.seconds, "load_high_s": d.load_high_s,
                                                "outlasted": d.outlasted} for d in est.deadlines]}},
        "notes": list(plan.notes),
    }


def _sums_json(est) -> dict:
    return {"phases": [{"name": p.name, "setting": p.setting, "low_s": p.low_s, "high_s": p.high_s}
                       for p in est.phases],
            "per_unit_s": list(est.per_unit_s), "serial_s": list(est.serial_s), "waves_s": list(est.waves_s)}


def _capacity_json(c) -> dict:
    return {"engines": c.engines, "max_context": c.max_context, "concurrent_requests": _r(c.concurrent_requests),
            "concurrent_source": c.concurrent_source,
            "decode_tokens_per_s": {str(k): _r(v, 1) for k, v in sorted(c.decode_tokens_per_s.items())},
            "decode_source": c.decode_source, "roofline_tokens_per_s": _r(c.roofline_tokens_per_s, 1)}


# --- the tables ---------------------------------------------------------------------------------------------------------


def print_fleet(plan: FleetPlan, console) -> None:
    """The placement with each box's memory, each pool's capacity, the waves and the estimate (rich console)."""
    console.print(f"[bold]Fleet[/bold] ({len(plan.fleet.hosts)} boxes, {plan.fleet.topology}):", highlight=False)
    console.print(_boxes_table(plan))
    console.print(_pools_table(plan))
    for c in plan.capacity:
        console.print(f"[dim]{c.pool}: concurrency: {c.concurrent_source}[/dim]", highlight=False)
        console.print(f"[dim]{c.pool}: decode: {c.decode_source}[/dim]", highlight=False)
    for line in wave_lines(plan):
        console.print(line, highlight=False)
    for note in plan.notes:
        console.print(f"[dim]{note}[/dim]", highlight=False)


def _boxes_table(plan: FleetPlan):
    from rich.table import Table

    table = Table(title="placement and memory per box (GiB)", show_lines=False)
    for col in ("box", "pool", "model", "role", "embedders", "resident", "KV", "headroom", "fits"):
        table.add_column(col, justify="left" if col in ("box", "pool", "model", "role") else "right")
    for m in plan.memory:
        table.add_row(m.box, m.pool, m.model, plan.fleet.role(m.box), f"{m.embedders_gib:.1f}",
                      f"{m.resident_gib:.1f}", f"{m.kv_gib:.1f}", f"{m.headroom_gib:.1f}",
                      "[green]yes[/green]" if m.fits else "[red]NO[/red]")
    return table


def _pools_table(plan: FleetPlan):
    from rich.table import Table

    table = Table(title="capacity per pool (all its boxes)")
    for col in ("pool", "served as", "model", "boxes", "engines", "concurrent\nmax-ctx reqs", "decode tok/s\n1 stream"
                " / box", "decode tok/s\nall streams\npublished"):
        table.add_column(col, justify="left" if col in ("pool", "served as", "model") else "right")
    for c in plan.capacity:
        published = max(c.decode_tokens_per_s) if c.decode_tokens_per_s else None
        table.add_row(c.pool, c.served_name, c.model, str(c.boxes), str(c.engines),
                      "unknown" if c.concurrent_requests is None else
                      f"{c.concurrent_requests:.2f}\n[dim]{c.concurrent_source.partition(':')[0].partition(' ')[0]}"
                      f"[/dim]",
                      f"{c.decode_tokens_per_s[1] / c.engines:.1f}" if 1 in c.decode_tokens_per_s else
                      f"<= {c.roofline_tokens_per_s:.1f}\n[dim]roofline[/dim]" if c.roofline_tokens_per_s else "-",
                      f"{c.decode_tokens_per_s[published]:,.0f}\n[dim]at {published} per box[/dim]"
                      if published else "-")
    return table


def wave_lines(plan: FleetPlan) -> list[str]:
    s, est = plan.settings, plan.estimate
    out = [f"[bold]Rollout[/bold]: {est.waves} waves over {est.units} units (ROLLOUT_WAVES = {s['ROLLOUT_WAVES']}, "
           f"MAX_UNAVAILABLE = {s['MAX_UNAVAILABLE']!r} per pool, MAX_FAIL_PERCENTAGE = {s['MAX_FAIL_PERCENTAGE']:g})"]
    for i, wave in enumerate(waves_mod.wave_boxes([list(w) for w in plan.waves]), 1):
        label = "canary" if i == 1 else f"wave {i}"
        out.append(f"  {label}: {len(wave)} box{'es' if len(wave) != 1 else ''}: {_names(wave)}")
    (low, high), (slow, shigh), (wlow, whigh) = est.per_unit_s, est.serial_s, est.waves_s
    phases = " + ".join(f"{p.name} {p.low_s:g}-{p.high_s:g} s ({p.setting})" for p in est.phases)
    out.append(f"Estimate: one unit {hours(low)}-{hours(high)} ({phases})")
    out.append(f"  one at a time: {hours(slow)}-{hours(shigh)}; in waves: {hours(wlow)}-{hours(whigh)} (the control "
               f"side's own time left out)")
    (low, high), (wlow, whigh) = est.cold.per_unit_s, est.cold.waves_s
    cold_load = next(p for p in est.cold.phases if p.name == "load")
    out.append(f"  a new build's or model's first rollout (cold JIT caches): one unit {hours(low)}-{hours(high)} (load "
               f"{cold_load.low_s:g}-{cold_load.high_s:g} s, {cold_load.setting}); in waves: {hours(wlow)}-"
               f"{hours(whigh)}")
    for d in est.deadlines:
        out.append(f"  gate deadline {d.setting} = {d.seconds:g} s" + (
            f": [bold red]{d.load_setting} reaches {d.load_high_s:g} s, past it: such a start is rolled back[/bold "
            f"red]" if d.outlasted else f" (>= {d.load_setting}'s {d.load_high_s:g} s)"))
    return out


def _names(boxes: list[str]) -> str:
    return ", ".join(boxes) if len(boxes) <= 6 else f"{', '.join(boxes[:3])}, ... {', '.join(boxes[-2:])}"
