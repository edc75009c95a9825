"""`python -m sparkctl rehearse [--hosts A,B] [--sim] [--skip-bench] [--cold-warm] [--out DIR]`: the first hour on
a box (docs/first-gx10.md), one report under --out (default REHEARSE_OUT_DIR/<UTC date and time>/): rehearsal.md,
rehearsal.json and each box's bench record. The boxes are the configured ones, as `status` and `bench` find them
(GX10_HOSTS, else the running simulated Sparks in .sim/hosts.json). Exit 1 when a figure is bad (each named), 0
otherwise. --cold-warm also restarts each box's coder twice (coldwarm.py): a cold start and a warm restart.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as _dt
import os
import shlex
import sys
from pathlib import Path

from rich.console import Console

from sparkctl import REPO_ROOT
from sparkctl.check.load import load
from sparkctl.config import hosts
from sparkctl.config.hosts import HostConn
from sparkctl.config.schema import GroupData
from sparkctl.errors import SettingError, SparkctlError
from sparkctl.rehearse import boxread, gather, report


def add_parser(sub) -> None:
    from sparkctl.measure.cli import add_list_option, str_list

    p = sub.add_parser("rehearse", help="the first hour on a box: every figure the simulated Spark cannot give, "
                                        "one report", description=__doc__.split("\n\n")[0])
    add_list_option(p, "--hosts", str_list, "only these inventory hosts (default: every configured box)",
                    example="--hosts spark-1,spark-2")
    p.add_argument("--limit", dest="hosts", type=str_list, action="extend", help="the same as --hosts")
    add_list_option(p, "--groups", str_list, "group data to merge (default: all,gx10 for a real box, all,gx10,sim "
                    "else)", example="all,gx10")
    p.add_argument("--sim", action="store_true", help="the simulated Spark's boxes (.sim/hosts.json) and group data "
                                                      "(all,gx10,sim), even with GX10_HOSTS set")
    p.add_argument("--skip-bench", action="store_true", help="no bench probe (fast: decode, prefill and speculative "
                                                             "acceptance are left out)")
    p.add_argument("--cold-warm", action="store_true", help="also a cold start (kernel caches moved aside) and a "
                   "warm restart of each box's coder, each cache's reuse reported: takes the coder down twice")
    p.add_argument("--out", default=None, help="report directory (default REHEARSE_OUT_DIR/<UTC date and time>/)")
    p.set_defaults(func=run)


def select(configured: list[HostConn], names: list[str] | None) -> list[HostConn]:
    if not configured:
        raise SparkctlError("no host configured: set GX10_HOSTS=<box>[,<box>] or run `python -m sparkctl sim up`")
    if not names:
        return configured
    known = {h.name: h for h in configured}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SettingError("--hosts", ",".join(unknown), sorted(known))
    return [known[n] for n in dict.fromkeys(names)]


class LogReporter:
    """The probe's progress as plain lines (measure.probe.Reporter's callbacks)."""

    def phase(self, text: str) -> None:
        print(f"  {text}", file=sys.stderr)

    def window(self, streams: int, elapsed: float, window: float, client_tokens: int) -> None:
        pass

    def done(self, text: str) -> None:
        print(f"  {text}", file=sys.stderr)


def bench_probe(host: HostConn, groups: list[str] | None) -> dict:
    """The bench probe's record of one box by `bench`'s own code path: its target (proxy, token, CA, /metrics over
    ssh), its BENCH_* settings, the planner's roofline, probe.run_probe."""
    from sparkctl.measure import cli as measure_cli
    from sparkctl.measure import labels, probe

    args = argparse.Namespace(host=host.name, groups=groups, ca=None, base_url=None, metrics_url=None, workload=None,
                              streams=None, window=None, max_tokens=None, no_prefill=False, prefill=None,
                              ignore_eos=None)
    t = measure_cli.resolve_target(args)
    settings = measure_cli.probe_settings(args, t.config.cfg)
    roofline, _why = labels.roofline_single_stream(t.config)
    return asyncio.run(probe.run_probe(t.endpoint, t.metrics, settings, t.labels, LogReporter(),
                                       roofline_single=roofline))


def how_measured(cfg: GroupData, skip_bench: bool) -> dict:
    """How the speed figures were measured: the bench's workload, window, streams and prefill."""
    if skip_bench:
        return {"text": "not measured (--skip-bench)"}
    from sparkctl.measure import workloads

    streams = "/".join(str(n) for n in cfg.BENCH_STREAMS)
    return {"workload": workloads.DEFAULT_WORKLOAD, "window_s": cfg.BENCH_WINDOW_S, "streams": list(cfg.BENCH_STREAMS),
            "prefill_tokens": cfg.BENCH_PREFILL_TOKENS, "max_tokens": cfg.BENCH_MAX_TOKENS,
            "text": f"the bench probe, workload {workloads.DEFAULT_WORKLOAD}, {cfg.BENCH_WINDOW_S:g} s decode windows "
                    f"at {streams} streams, then one fresh {cfg.BENCH_PREFILL_TOKENS:,}-token prefill, max_tokens "
                    f"{cfg.BENCH_MAX_TOKENS}; tok/s from vllm:generation_tokens_total"}


def out_dir(args, cfg: GroupData) -> Path:
    if args.out:
        return Path(args.out)
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H%M%SZ")
    return REPO_ROOT / cfg.REHEARSE_OUT_DIR / stamp


def run(args, shell: boxread.Shell | None = None, bench=None) -> int:
    if getattr(args, "sim", False):  # every lookup below (the bench's too) then finds the simulated Sparks
        os.environ["GX10_HOSTS"] = ""
        args.groups = args.groups or ["all", "gx10", "sim"]
    configured = hosts.configured_hosts()
    selected = select(configured, args.hosts)
    cfg = load(args.groups or None).cfg  # the configured box's group data: where the report goes, how it measures
    out = out_dir(args, cfg)
    ctx = gather.Context(shell=shell or boxread.Shell(), bench=bench or bench_probe, out_dir=out, groups=args.groups,
                         skip_bench=args.skip_bench, cold_warm=getattr(args, "cold_warm", False),
                         log=lambda text: print(text, file=sys.stderr))
    boxes = gather.rehearse(selected, configured, ctx)
    meta = {"date": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z"),
            "command": "python -m sparkctl " + (shlex.join(sys.argv[1:]) if sys.argv[1:2] == ["rehearse"]
                                                else "rehearse"),
            "groups": args.groups, "how": how_measured(cfg, args.skip_bench)}
    doc = report.assemble(boxes, meta)
    md, js = report.write(doc, out)
    console = Console(width=150) if not sys.stdout.isatty() else Console()
    console.print(report.summary_table(doc))
    console.print(f"report: {md} and {js}", markup=False, highlight=False, soft_wrap=True)
    for line in doc["bad"]:
        console.print(f"BAD: {line}", markup=False, highlight=False, soft_wrap=True)
    return 1 if doc["bad"] else 0
