"""`python -m sparkctl plan`: the configured box's memory and KV capacity for each coding model.

    python -m sparkctl plan                                   # the configured box (GX10_HOSTS set: a real one)
    python -m sparkctl plan --groups all,gx10                 # a real GX10's group data, wherever this runs
    python -m sparkctl plan --kv 48                           # what-if: a 48 GiB KV budget
    python -m sparkctl plan --sparks 2 --topology split       # what-if: two Sparks, one coding model each
    python -m sparkctl plan --json                            # the stable JSON (schema in sparkctl/capacity/planner.py)

Layer facts come from the checkpoint's config.json when given (--config MODEL=PATH) or found in a local Hugging
Face cache, else from the catalog. Exit status 0 (a what-if that does not fit is a finding, shown as such);
2 for invalid settings.
"""

from __future__ import annotations

import argparse
import json

from sparkctl.capacity import planner
from sparkctl.config import catalog as catalog_mod
from sparkctl.config import groupdata
from sparkctl.errors import SettingError


def _groups(text: str | None) -> list[str] | None:
    return [g for g in text.split(",") if g] if text else None


def _config_args(values: list[str] | None) -> dict[str, str]:
    out = {}
    for item in values or []:
        key, sep, path = item.partition("=")
        if not sep or not key or not path:
            raise SettingError("--config", item, "MODEL=PATH to a checkpoint's config.json")
        out[key] = path
    return out


def build_plan(args: argparse.Namespace) -> tuple[planner.BoxPlan, dict]:
    groups = _groups(args.groups) or (["all", "gx10", "sim"] if getattr(args, "sim", False) else ["all", "gx10"])
    data = groupdata.load(groups)
    cat = catalog_mod.resolve(data.get("CATALOG_OVERRIDES"))
    coders = planner.coding_models(cat)
    for name in args.model or []:
        catalog_mod.lookup(cat, "--model", name, catalog_mod.CODER)
    explicit = _config_args(args.config)
    for name in explicit:
        catalog_mod.lookup(cat, "--config", name, catalog_mod.CODER)
    topology = args.topology or (data.get("SPARK_TOPOLOGY", "replicas") if args.sparks > 1 else "replicas")
    names = args.model or coders
    configs = {}
    for name in names:
        if name in explicit:
            configs[name] = (planner.load_config(explicit[name]), f"config.json:{explicit[name]}")
        elif not args.no_local_config and (found := planner.find_local_config(cat[name], data)):
            configs[name] = (planner.load_config(found), f"config.json:{found}")
    plans = [planner.plan_box(data, cat, coding_model=name, kv_gib=args.kv, sparks=args.sparks, topology=topology,
                              configs=configs) for name in names]
    box_plan = planner.BoxPlan(box=plans[0].box, sparks=args.sparks, topology=topology,
                               models=tuple(m for p in plans for m in p.models))
    return box_plan, data


def _gib(value: float) -> str:
    return f"{value:,.1f}" if abs(value) >= 0.1 or value == 0 else f"{value:.4g}"


def _est_meas(est, meas, fmt: str) -> str:
    """An estimate with the production measurement under it when one is known."""
    if est is None and meas is None:
        return "unknown"
    text = f"{est:{fmt}} est" if est is not None else ""
    if meas is not None:
        text += f"\n{meas:{fmt}} measured"
    return text


def _tokens(m: planner.ModelPlan) -> str:
    return _est_meas(m.kv_tokens_estimate, m.kv_tokens_measured, ",")


def _concurrency(m: planner.ModelPlan) -> str:
    return _est_meas(m.concurrent_requests_estimate, m.concurrent_requests_measured, ".2f")


def _decode(m: planner.ModelPlan) -> str:
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
    return "all free (split)" if setting.startswith("split") else setting


def render(plan: planner.BoxPlan, data: dict) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if not console.is_terminal:
        console = Console(width=170)
    box = plan.box
    emb = ", ".join(f"{e.name} {_gib(e.resident_gib)} + {_gib(e.kv_gib)} KV" for e in box.embedders) or "none"
    where = "each box" if plan.sparks > 1 else "the box"
    console.print(f"[bold]Box[/bold] ({plan.sparks} Spark{'s' if plan.sparks > 1 else ''}, {plan.topology}; figures "
                  f"per box unless marked total): {_gib(box.usable_gib)} GiB usable - {_gib(box.os_reserve_gib)} OS "
                  f"reserve - embedders {_gib(box.embedders_gib)} ({emb}) = {_gib(box.available_gib)} GiB for the "
                  f"coding model on {where}; {box.bandwidth_gbps:g} GB/s")
    table = Table(show_lines=True)
    for col, justify in (("model", "left"), ("resident GiB", "right"), ("free after\nembedders", "right"),
                         ("KV budget", "right"), ("headroom", "right"), ("KV tokens\n(total)", "right"),
                         ("max ctx", "right"), ("concurrent\nmax-ctx reqs\n(total)", "right"),
                         ("decode tok/s\n(1 stream)", "right"), ("fits", "center")):
        table.add_column(col, justify=justify)
    for m in plan.models:
        configured = " [dim](configured)[/dim]" if m.name == data.get("CODING_MODEL") else ""
        table.add_row(
            f"{m.name}{configured}\n[dim]{m.layout.source if m.layout else 'no layer facts'}[/dim]",
            f"{_gib(m.resident_gib)}\n[dim]{m.resident_source}[/dim]",
            _gib(m.free_gib),
            f"{_gib(m.kv_gib)}\n[dim]{_kv_label(m.kv_setting)}[/dim]",
            _gib(m.headroom_gib),
            _tokens(m),
            f"{m.max_context:,}",
            _concurrency(m),
            _decode(m),
            "[green]yes[/green]" if m.fits else "[red]NO[/red]",
        )
    console.print(table)
    for m in plan.models:
        for p in m.problems:
            console.print(f"[red]{m.name}:[/red] {p}", highlight=False)
        for n in m.notes:
            console.print(f"[dim]{m.name}: {n}[/dim]", highlight=False)
    console.print("[dim]est = estimate from the layer facts (vLLM's hybrid KV allocator); measured = what vLLM "
                  "reported in production. Roofline = bandwidth / weight bytes per step x tokens per step "
                  "(upper bound).[/dim]", highlight=False)


def run(args: argparse.Namespace) -> int:
    plan, data = build_plan(args)
    if args.json:
        print(json.dumps(plan.to_json(), indent=2))
    else:
        render(plan, data)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="memory and KV capacity of the configured box for each coding model",
                       description=__doc__.splitlines()[0])
    p.add_argument("--groups", help="group data to read, comma-separated (default: all,gx10 = a real GX10)")
    p.add_argument("--sim", action="store_true", help="plan the simulated Spark (same as --groups all,gx10,sim)")
    p.add_argument("--kv", type=float, metavar="GIB", help="what-if: KV budget per box for every model, GiB")
    p.add_argument("--sparks", type=int, default=1, help="what-if: number of Sparks (default 1)")
    p.add_argument("--topology", choices=planner.TOPOLOGIES,
                   help="with --sparks 2: replicas (capacity doubles), split (one coding model per box, all its "
                        "memory for KV), tensor-parallel (weights halved per box, KV pooled); default SPARK_TOPOLOGY")
    p.add_argument("--model", action="append", metavar="KEY", help="only this coding model (repeatable)")
    p.add_argument("--config", action="append", metavar="MODEL=PATH",
                   help="a checkpoint's config.json for that model's layer facts (repeatable)")
    p.add_argument("--no-local-config", action="store_true",
                   help="ignore config.json files in local Hugging Face caches; use the catalog's layer facts")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (schema in sparkctl/capacity/planner.py)")
    p.set_defaults(func=run)
