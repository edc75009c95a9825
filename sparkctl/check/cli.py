"""`python -m sparkctl check`: the deploy's whole validation (check/validate.py), offline, for every inventory host.

    python -m sparkctl check                      # real-box group data (all, gx10) for the GX10_HOSTS boxes
    python -m sparkctl check --sim                # the simulated Spark's (all, gx10, sim) for its hosts
    python -m sparkctl check --data CODING_MODEL=laguna-s-2.1     # parsed as pyinfra parses --data
    python -m sparkctl check --resolve            # also: what pip would install into the box's vLLM venv

--resolve reads the resolution for the box's platform and Python from the control machine's wheelhouse cache
(check/wheelhouse.py), downloading the set into it once when it is not there yet: from the index, which must answer
(else it is skipped, saying why), WHEELHOUSE_FROM, or the simulated Spark's wheelhouse; it refuses a requirement pip
cannot resolve for the box. Without it the check stays offline and says so, but for an AIRGAPPED box: refused when
nothing on this machine can provide its vLLM (no cache, no WHEELHOUSE_FROM, an index that does not answer).

Every GATEWAY_HOSTS host (the `gateway` group) is checked as the deploy's gateway step checks it (check/gateway.py),
over the boxes above, and every file the gateway step writes is rendered and validated (check/gateway_files.py:
nginx -t, systemd-analyze verify, nft -c, keepalived -t); with --sim, the simulated Spark's gateway where one is
configured.

Exit status 0 when every host passes, 2 otherwise.
"""

from __future__ import annotations

import argparse
import sys

from sparkctl.capacity.venv import vllm_venv
from sparkctl.check.gateway import unique_gateways, validate_gateway
from sparkctl.check import wheelhouse
from sparkctl.check.gateway_files import check_gateway_files
from sparkctl.check.validate import derive_host, validate_fanout, validate_host
from sparkctl.config import groupdata, hosts
from sparkctl.config.groupdata import parse_data
from sparkctl.config.schema import GroupData
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
    resolved = resolutions(args.resolve)
    failed = [h for h in targets if not check_one(h, data[h.name], names, models, resolved)]
    failed = check_fanout(targets, data, names, models, failed)
    gateways = gateway_hosts(args.sim) if configured or not args.sim else []  # no simulated Spark: no sim gateway
    gateways_ok = check_gateways(gateways, groups, data if configured else {}, overrides, models)
    return 2 if failed or not gateways_ok else 0


def gateway_hosts(sim: bool) -> list[hosts.HostConn]:
    """The `gateway` group inventory.py would give: GATEWAY_HOSTS for real hosts; the simulated Spark's gateway
    where sparkctl.config.hosts knows one (sim_gateway_hosts), else none."""
    if not sim:
        return hosts.gateway_hosts()
    sim_gateways = getattr(hosts, "sim_gateway_hosts", None)
    return sim_gateways() if sim_gateways else []


def check_gateways(gateways: list[hosts.HostConn], groups: list[str], boxes: dict[str, dict], overrides: dict,
                   models: dict[str, str]) -> bool:
    """Every gateway host's whole validation (check/gateway.py), printed; boxes: each gx10 host's data in
    inventory order (none when no box is configured). A gateway that is a box has the box's data; another has the
    groups it is in (not gx10) under the first box's, as the deploy merges them."""
    try:
        unique_gateways([g.name for g in gateways])
    except SparkctlError as exc:
        print(f"sparkctl check: {exc}", file=sys.stderr)
        return False
    ok = True
    owns = {gw.name: boxes.get(gw.name) or {**groupdata.load([g for g in groups if g != "gx10"]),
                                            **gw.pyinfra_data(), **overrides} for gw in gateways}
    for gw in gateways:
        try:
            checked = validate_gateway(gw.name, owns[gw.name], boxes, host_models=models, gateways=owns)
            notes = check_gateway_files(checked, gw.name, [g.name for g in gateways])
        except SparkctlError as exc:
            print(f"sparkctl check: {gw.name}: {exc}", file=sys.stderr)
            ok = False
            continue
        for w in checked.warnings:
            print(f"{gw.name}: WARNING: {w}")
        print(f"{gw.name}: ok: gateway, routers for {', '.join(p.served for p in checked.pools)}")
        for line in notes:
            print(f"{gw.name}:   {line}")
    return ok


def check_one(h: hosts.HostConn, data: dict, names: list[str], models: dict[str, str] | None = None,
              resolved: dict[str, str] | None = None) -> bool:
    """One inventory host's whole validation, printed; data in pyinfra's order (--data > host data > group data);
    the address: ssh_hostname, as the deploy's. resolved: with --resolve, each venv's resolution note so far (one
    pip run per distinct venv, whatever the number of boxes)."""
    try:
        s = validate_host(data, h.name, hosts=names, host_models=models)
        wheelhouse.check_paths(s.cfg)
        if airgapped := wheelhouse.airgap_refusal(s.cfg, h.name):  # nothing here provides its wheels
            raise airgapped
        note = resolution(s.cfg, resolved)
    except SparkctlError as exc:
        print(f"sparkctl check: {h.name}: {exc}", file=sys.stderr)
        return False
    for w in s.warnings:
        print(f"{h.name}: WARNING: {w}")
    print(f"{h.name}: ok: {s.role.name}, {', '.join(f'{v.name}={v.model.key}' for v in s.services) or 'no vLLM'}, "
          f"{len(s.checkpoints)} checkpoints locked")
    for line in (*s.notes, note):
        print(f"{h.name}:   {line}")
    return True


def check_fanout(targets: list[hosts.HostConn], data: dict[str, dict], names: list[str],
                 models: dict[str, str], failed: list[hosts.HostConn]) -> list[hosts.HostConn]:
    """The fleet's checkpoint fan-out (sparkctl/fleet/fanout.py) of several boxes that passed their own checks
    (`failed`: those that did not, returned as they are), printed; every box refused (the message naming the setting
    and the box) when it could not give every box its checkpoints."""
    if failed or len(targets) < 2:
        return failed
    try:
        boxes = [(derive_host(data[h.name], h.name, names, models), h.address) for h in targets]
        plan = validate_fanout(boxes)
    except SparkctlError as exc:
        print(f"sparkctl check: fleet: {exc}", file=sys.stderr)
        return targets
    copies = len(plan.fetches) - plan.hub_fetches()
    print(f"fleet: checkpoint fan-out: {plan.hub_fetches()} downloads from the Hub, {copies} copies box to box in "
          f"{max(plan.rounds - 1, 0)} rounds (when no box holds any yet)")
    return []


def resolutions(resolve: bool) -> dict[str, str] | None:
    """Where --resolve keeps each venv's resolution note (None: the check stays offline)."""
    return {} if resolve else None


def resolution(cfg: GroupData, resolved: dict[str, str] | None) -> str:
    """The venv's pip resolution for the box (--resolve), once per distinct venv; else why it did not run."""
    if resolved is None:
        return "pip resolution for the box: skipped (the check is offline; --resolve runs it)"
    key = f"{vllm_venv(cfg)} {cfg.BOX_PIP_PLATFORMS} {cfg.BOX_PYTHON_VERSION} {sorted(cfg.PIP_FIND_LINKS_HERE.items())}"
    if key not in resolved:
        resolved[key] = wheelhouse.resolve_note(cfg)
    return resolved[key]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("check", help="the deploy's whole validation, offline, for every inventory host",
                       description=__doc__.splitlines()[0])
    p.add_argument("--sim", action="store_true", help="the simulated Spark's group data and hosts")
    p.add_argument("--data", action="append", metavar="KEY=VALUE",
                   help="override a setting for this check, as `pyinfra --data` does (repeatable)")
    p.add_argument("--resolve", action="store_true",
                   help="also resolve the vLLM venv's requirements for the box with this machine's pip (a dry run: "
                        "reads the index, installs nothing)")
    p.set_defaults(func=run)
