"""`python -m sparkctl check`: the deploy's whole validation (check/validate.py), offline, for every inventory host.

    python -m sparkctl check                      # real-box group data (all, gx10) for the GX10_HOSTS boxes
    python -m sparkctl check --sim                # the simulated Spark's (all, gx10, sim) for its hosts
    python -m sparkctl check --data CODING_MODEL=laguna-s-2.1     # parsed as pyinfra parses --data

Exit status 0 when every host passes, 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from sparkctl.check.validate import validate_host
from sparkctl.config import groupdata, hosts
from sparkctl.config.groupdata import parse_data
from sparkctl.errors import SparkctlError


def inventory_hosts(sim: bool) -> tuple[list[hosts.HostConn], bool]:
    """The hosts inventory.py would give (with each box's SPARK_CODING_MODELS), and whether they are real ones;
    one nominal box when none is configured (GX10_HOSTS unset / the simulated Spark not booted)."""
    found = hosts.with_models(hosts.sim_hosts() if sim else hosts.real_hosts())
    if found:
        return found, True
    name = "spark-1" if sim else "gx10"
    return hosts.with_models([hosts.HostConn(name=name, address=name, simulated=sim)]), False


def run(args: argparse.Namespace) -> int:
    groups = ["all", "gx10", "sim"] if args.sim else ["all", "gx10"]
    overrides = parse_data(args.data)
    targets, configured = inventory_hosts(args.sim)
    names = [h.name for h in targets]
    base = groupdata.load(groups)
    if not configured:
        print(f"no {'simulated Spark is booted' if args.sim else 'GX10_HOSTS set'}: checking one nominal box "
              f"{names[0]!r} ({', '.join(groups)})")
    data = {h.name: {**base, **h.pyinfra_data(), **overrides} for h in targets}
    models = {h.name: h.data["CODING_MODEL"] for h in targets if "CODING_MODEL" in h.data}  # a box's own
    failed = [h for h in targets if not check_one(h, data[h.name], names, models)]
    return 2 if failed else 0


def check_one(h: hosts.HostConn, data: dict, names: list[str], models: dict[str, str] | None = None) -> bool:
    """One inventory host's whole validation, printed; data in pyinfra's order (--data > host data > group data);
    the address: ssh_hostname, as the deploy's."""
    try:
        s = validate_host(data, h.name, hosts=names, host_models=models)
    except SparkctlError as exc:
        print(f"sparkctl check: {h.name}: {exc}", file=sys.stderr)
        return False
    for w in s.warnings:
        print(f"{h.name}: WARNING: {w}")
    print(f"{h.name}: ok: {s.role.name}, {', '.join(f'{v.name}={v.model.key}' for v in s.services) or 'no vLLM'}, "
          f"{len(s.checkpoints)} checkpoints locked")
    for note in s.notes:
        print(f"{h.name}:   {note}")
    return True


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="the deploy's whole validation, offline, for every inventory host",
                       description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="the simulated Spark's group data and hosts")
    p.add_argument("--data", action="append", metavar="KEY=VALUE",
                   help="override a setting for this check, as `pyinfra --data` does (repeatable)")
    p.set_defaults(func=run)
