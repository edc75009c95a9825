"""`python -m sparkctl plan`: the configured box's memory and KV capacity for each coding model.

    python -m sparkctl plan                                   # the configured box (GX10_HOSTS set: a real one)
    python -m sparkctl plan --groups all,gx10                 # a real GX10's group data, wherever this runs
    python -m sparkctl plan --kv 48                           # what-if: a 48 GiB KV budget
    python -m sparkctl plan --sparks 2 --topology split       # what-if: two Sparks, one coding model each
    python -m sparkctl plan --json                            # the stable JSON (schema in sparkctl/capacity/report.py)

Layer facts come from the checkpoint's config.json when given (--config MODEL=PATH) or found in a local Hugging
Face cache, else from the catalog. Exit status 0 (a what-if that does not fit is a finding, shown as such);
2 for invalid settings.
"""

from __future__ import annotations

import argparse
import json

from sparkctl.capacity import admission, kv, plan, report
from sparkctl.check.load import load
from sparkctl.config import catalog as catalog_mod
from sparkctl.config.settings import HostConfig
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


def build_plan(args: argparse.Namespace) -> tuple[plan.BoxPlan, HostConfig]:
    groups = _groups(args.groups) or (["all", "gx10", "sim"] if getattr(args, "sim", False) else ["all", "gx10"])
    config = load(groups)  # the schema and the catalog; no lock, no secrets: any box's data plans anywhere
    names = _model_names(args, config.catalog)
    topology = args.topology or (config.cfg.SPARK_TOPOLOGY if args.sparks > 1 else "replicas")
    configs = _layer_configs(args, config, names)
    plans = [plan.plan_box(config.cfg, config.catalog, coding_model=name, kv_gib=args.kv, sparks=args.sparks,
                           topology=topology, configs=configs) for name in names]
    box_plan = plan.BoxPlan(box=plans[0].box, sparks=args.sparks, topology=topology,
                            models=tuple(m for p in plans for m in p.models))
    return box_plan, config


def _model_names(args: argparse.Namespace, catalog: dict) -> list[str]:
    """--model (checked), else every coding model of the catalog."""
    for name in args.model or []:
        catalog_mod.lookup(catalog, "--model", name, catalog_mod.CODER)
    return args.model or plan.coding_models(catalog)


def _layer_configs(args: argparse.Namespace, config: HostConfig, names: list[str]) -> dict[str, tuple[dict, str]]:
    """{model: (config.json, where it came from)}: --config, else one found in a local Hugging Face cache."""
    explicit = _config_args(args.config)
    for name in explicit:
        catalog_mod.lookup(config.catalog, "--config", name, catalog_mod.CODER)
    configs = {}
    for name in names:
        if name in explicit:
            configs[name] = (kv.load_config(explicit[name]), f"config.json:{explicit[name]}")
        elif not args.no_local_config and (found := kv.find_local_config(config.catalog[name],
                                                                         config.cfg.MODEL_STORE)):
            configs[name] = (kv.load_config(found), f"config.json:{found}")
    return configs


def admission_walk(config: HostConfig, box_plan: plan.BoxPlan) -> dict[str, list[admission.Start] | str]:
    """{box: every start vLLM's admission judges there, or why it cannot be walked} for the configured box (a
    tensor-parallel pair: the head with the embedders, the worker without)."""
    tp = 2 if box_plan.topology == "tensor-parallel" else 1
    boxes = {"head": True, "worker": False} if tp > 1 else {"box": True}
    out = {}
    for name, embedders in boxes.items():
        try:
            engines, flips = admission.configured_engines(config.cfg, config.catalog, tp, embedders)
            out[name] = admission.walk(config.cfg, engines, flips, host=name)
        except SettingError as exc:
            out[name] = str(exc)
    return out


def run(args: argparse.Namespace) -> int:
    box_plan, config = build_plan(args)
    starts = admission_walk(config, box_plan)
    if args.json:
        print(json.dumps({**report.plan_json(box_plan), "admission": report.admission_json(starts)}, indent=2))
    else:
        report.print_table(box_plan, config.cfg.CODING_MODEL)
        report.print_admission(starts, config.cfg)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("plan", help="memory and KV capacity of the configured box for each coding model",
                       description=__doc__.splitlines()[0])
    p.add_argument("--groups", help="group data to read, comma-separated (default: all,gx10 = a real GX10)")
    p.add_argument("--sim", action="store_true", help="plan the simulated Spark (same as --groups all,gx10,sim)")
    p.add_argument("--kv", type=float, metavar="GIB", help="what-if: KV budget per box for every model, GiB")
    p.add_argument("--sparks", type=int, default=1, help="what-if: number of Sparks (default 1)")
    p.add_argument("--topology", choices=plan.TOPOLOGIES,
                   help="with --sparks 2: replicas (capacity doubles), split (one coding model per box, all its "
                        "memory for KV), tensor-parallel (weights halved per box, KV pooled); default SPARK_TOPOLOGY")
    p.add_argument("--model", action="append", metavar="KEY", help="only this coding model (repeatable)")
    p.add_argument("--config", action="append", metavar="MODEL=PATH",
                   help="a checkpoint's config.json for that model's layer facts (repeatable)")
    p.add_argument("--no-local-config", action="store_true",
                   help="ignore config.json files in local Hugging Face caches; use the catalog's layer facts")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (schema in sparkctl/capacity/report.py)")
    p.set_defaults(func=run)
