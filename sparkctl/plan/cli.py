"""`python -m sparkctl plan`, with the fleet: the capacity planner's table for one box (sparkctl/plan/capacity.py),
then the fleet's placement, each box's memory, each pool's capacity, the waves a rollout takes and its wall-time
estimate. --json adds the fleet under the plan's "fleet" key (schema in sparkctl/fleet/report.py).

    python -m sparkctl plan                                          # the configured inventory and FLEET_POOLS
    python -m sparkctl plan --boxes 32                               # what-if: 32 boxes, today's pools over them
    python -m sparkctl plan --pools qwen3.8-27b=3,laguna-s-2.1=1     # what-if: these pools over 4 boxes

What-if boxes are named spark-1 ... spark-N (N: --boxes, else the sum of --pools). Exit status 2 when the fleet
is refused (the message names the setting).
"""

from __future__ import annotations

import argparse
import json

from sparkctl.capacity import report as capacity_report
from sparkctl.check.load import typed
from sparkctl.config import hosts as hosts_mod
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError
from sparkctl.fleet import overview, report
from sparkctl.plan import capacity as capacity_cli

NOMINAL_HOST = "gx10"  # the one box planned when no inventory is configured (as `check` names it)


def parse_pools(text: str) -> dict[str, int]:
    """"qwen3.8-27b=3,laguna-s-2.1=1" -> {"qwen3.8-27b": 3, "laguna-s-2.1": 1} (FLEET_POOLS' counted form)."""
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, sep, count = item.partition("=")
        if not sep or not name.strip() or not count.strip().isdigit():
            raise SettingError("--pools", item, "MODEL=BOXES items, comma-separated, e.g. qwen3.8-27b=3,laguna-s-2.1=1")
        out[name.strip()] = int(count)
    return out


def what_if(cfg: GroupData, args: argparse.Namespace) -> tuple[GroupData, list[str], dict[str, str]]:
    """(settings, hosts, each box's own CODING_MODEL) for the plan: the inventory's, or the what-if's."""
    pools = parse_pools(args.pools) if args.pools else {}
    if pools:
        cfg = typed({**cfg.model_dump(), "FLEET_POOLS": pools})
    count = args.boxes or (sum(pools.values()) if pools else 0)
    if count:
        return cfg, [f"spark-{i}" for i in range(1, count + 1)], {}
    configured = hosts_mod.configured_hosts()
    models = {h.name: h.data["CODING_MODEL"] for h in configured if "CODING_MODEL" in h.data}
    return cfg, [h.name for h in configured] or [NOMINAL_HOST], models


def run(args: argparse.Namespace) -> int:
    box_plan, config = capacity_cli.build_plan(args)
    cfg, hosts, host_models = what_if(config.cfg, args)
    fleet = overview.fleet_plan(cfg, config.catalog, hosts, host_models)
    starts = capacity_cli.admission_walk(config, box_plan)
    if args.json:
        print(json.dumps({**capacity_report.plan_json(box_plan), "admission": capacity_report.admission_json(starts),
                          "fleet": report.fleet_json(fleet)}, indent=2))
        return 0
    capacity_report.print_table(box_plan, config.cfg.CODING_MODEL)
    capacity_report.print_admission(starts, config.cfg)
    from rich.console import Console

    console = Console()
    if not console.is_terminal:
        console = Console(width=190)
    report.print_fleet(fleet, console)
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    capacity_cli.add_parser(sub)
    p = sub.choices["plan"]
    p.description = __doc__.splitlines()[0]
    p.add_argument("--boxes", type=int, metavar="N", help="what-if fleet: N boxes (spark-1 ... spark-N)")
    p.add_argument("--pools", metavar="MODEL=N,...", help="what-if FLEET_POOLS: counted pools, e.g. "
                                                         "qwen3.8-27b=3,laguna-s-2.1=1")
    p.set_defaults(func=run)
