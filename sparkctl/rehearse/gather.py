"""The rehearsal of each box, in the order of docs/first-gx10.md: the plan, one read of the box, its device check,
the admission walk, the bench probe (the same code path as `python -m sparkctl bench`), then the link of each
tensor-parallel pair with both boxes at once. Everything it talks to comes in a Context, so tests fake the ssh
layer and the probe.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sparkctl.capacity import admission
from sparkctl.config.hosts import HostConn
from sparkctl.config.settings import derive
from sparkctl.errors import SparkctlError
from sparkctl.measure import acceptance, record
from sparkctl.measure.thresholds import Thresholds
from sparkctl.rehearse import boxread, coldwarm, figures, kernels, planned, probe_figures
from sparkctl.rehearse.figures import BAD, NA, Figure


@dataclass
class Context:
    shell: boxread.Shell  # runs a command on a box
    bench: Callable[[HostConn, list[str] | None], dict]  # the bench probe's record of a box (measure.probe)
    out_dir: Path  # where the bench records go, beside the report
    groups: list[str] | None = None  # group data to merge (None: the configured box's)
    skip_bench: bool = False
    cold_warm: bool = False  # a cold start and a warm restart of the coder (coldwarm.py): takes it down twice
    sleep: Callable[[float], None] = time.sleep  # between two reads of a starting unit
    log: Callable[[str], None] = lambda text: None


@dataclass
class BoxReport:
    name: str
    role: str  # "single", "replica", "split", "head", "worker" (topology.Role.name), "?" when unplanned
    figures: list[Figure] = field(default_factory=list)
    plan: dict = field(default_factory=dict)  # service -> planned resident, KV, footprint (GiB)
    facts: dict = field(default_factory=dict)  # the box's raw readings (boxread.read_box)
    device: dict | None = None  # the device check's result
    link: dict | None = None  # this box's rank of the link probe
    bench_record: str | None = None  # the bench record written beside the report
    cold_warm: dict | None = None  # the coder's cold start and warm restart, each cache's files (coldwarm.measure)

    def to_dict(self) -> dict:
        return {"name": self.name, "role": self.role, "plan": self.plan, "facts": self.facts, "device": self.device,
                "link": self.link, "bench_record": self.bench_record, "cold_warm": self.cold_warm,
                "figures": [f.to_dict() for f in self.figures]}


def admission_starts(bp: planned.BoxPlan, box: str) -> tuple[list | None, str]:
    """The admission walk's starts on this box (sparkctl/capacity/admission.py over its derived settings), or
    (None, why not)."""
    try:
        starts = admission.walk_settings(settings_for(bp))
    except SparkctlError as exc:
        return None, f"admission walk not run: {exc}"
    return [s for s in starts if s.host in (box, "")], ""


def settings_for(bp: planned.BoxPlan):
    """The box's deploy settings (its services and their locked checkpoints) the admission walk reads."""
    return derive(bp.config, bp.part)


def _settings_or_none(bp: planned.BoxPlan):
    """The box's derived settings, or None when they cannot be built here (a lock not refreshed)."""
    try:
        return settings_for(bp)
    except SparkctlError:
        return None


def _bench(host: HostConn, bp: planned.BoxPlan, ctx: Context) -> tuple[list[Figure], str | None]:
    """Decode, prefill and speculative acceptance from the bench probe's record, written beside the report."""
    box = host.name
    if ctx.skip_bench or not bp.role.serves_api:
        why = "skipped (--skip-bench)" if ctx.skip_bench else "a tensor-parallel worker: the pair is measured " \
              "through its head"
        return [Figure("decode", box, "decode and prefill", why, "-", NA, "-", probe_figures.DECODE_BAD),
                Figure("speculative", box, "speculative decoding", why, "-", NA, "-", probe_figures.SPEC_BAD)], None
    ctx.log(f"{box}: the bench probe (python -m sparkctl bench --host {box})")
    try:
        rec = ctx.bench(host, ctx.groups)
    except Exception as exc:  # noqa: BLE001 (an unreachable proxy is httpx's error): one BAD figure, not a lost report
        why = str(exc) if isinstance(exc, SparkctlError) else f"{type(exc).__name__}: {exc}"
        return [Figure("decode", box, "decode and prefill", f"the probe could not measure: {why}", "-", BAD,
                       f"python -m sparkctl bench --host {box}", probe_figures.DECODE_BAD)], None
    path = record.write_record(rec, ctx.out_dir / f"bench-{box}.json")
    spec, t = bp.config.coding_model, Thresholds.from_settings(bp.config.cfg)
    return (probe_figures.decode_figures(box, rec, spec, t) +
            probe_figures.spec_figures(box, rec, spec, acceptance.floor_of(spec), t)), str(path)


def _kv(box: str, bp: planned.BoxPlan, facts: dict) -> list[Figure]:
    if "coder" in bp.headless:
        return [Figure("kv", box, "coder KV tokens", "the head logs the pair's KV tokens", "-", NA, "-",
                       probe_figures.KV_BAD)]
    journal = ((facts.get("services") or {}).get("coder") or {}).get("journal", [])
    return probe_figures.kv_figures(box, journal, bp.kv_tokens, bp.production_kv_tokens,
                                    bp.config.cfg.PLAN_MEASURED_TOLERANCE)


def _read(host: HostConn, bp: planned.BoxPlan, ctx: Context, out: BoxReport) -> None:
    """The box's own figures: device check, memory, admission, load, bench, KV tokens."""
    cfg, box = bp.config.cfg, host.name
    out.device = boxread.device_check(ctx.shell, host, cfg, _settings_or_none(bp))
    out.figures += figures.device_figures(box, out.device)
    out.figures += figures.memory_figures(box, out.facts, bp.services, cfg.PLAN_MEASURED_TOLERANCE)
    out.figures += figures.box_memory_figures(box, out.facts, bp.services, cfg.BOX_USABLE_MEMORY_GIB,
                                              cfg.OS_RESERVE_GIB, cfg.ALERT_MEM_AVAILABLE_FLOOR_GIB)
    starts, why = admission_starts(bp, box)
    out.figures += figures.admission_figures(box, starts, why, out.facts)
    out.figures += figures.load_figures(box, out.facts, bp.headless, cfg.HEALTH_READY_TIMEOUT_S,
                                        max(cfg.ROLLOUT_ESTIMATE_LOAD_S))
    out.figures += kernels.kernel_figures(box, out.facts, {s: m for s, m in bp.models.items() if s in bp.units})
    bench, out.bench_record = _bench(host, bp, ctx)
    out.figures += bench + _kv(box, bp, out.facts)
    out.figures += _cold_warm(host, bp, ctx, out)


def _cold_warm(host: HostConn, bp: planned.BoxPlan, ctx: Context, out: BoxReport) -> list[Figure]:
    """The coder's cold start and warm restart (last: it takes the coder down twice), when asked for."""
    unit = bp.units.get(coldwarm.SERVICE)
    if not ctx.cold_warm:
        return coldwarm.figures(host.name, None, "not measured (rehearse --cold-warm restarts the coder twice)")
    if bp.role.tensor_parallel or unit is None:
        return coldwarm.figures(host.name, None, "n/a: a tensor-parallel pair restarts as one (its rollout)")
    out.cold_warm = coldwarm.measure(ctx.shell, host, bp.config.cfg, unit, sleep=ctx.sleep, log=ctx.log)
    return coldwarm.figures(host.name, out.cold_warm)


def gather_box(host: HostConn, inventory: list[str], ctx: Context) -> tuple[BoxReport, planned.BoxPlan | None]:
    """One box's figures (the link comes later, per pair); an unplanned or unreachable box is one BAD figure."""
    ctx.log(f"{host.name}: the plan and one read of the box")
    try:
        bp = planned.plan_box(ctx.groups, host, inventory)
    except SparkctlError as exc:
        return BoxReport(host.name, "?", [Figure("memory", host.name, "the plan", f"refused: {exc}", "fits", BAD,
                                                 "sparkctl.capacity check_fits (the deploy's preflight)",
                                                 "the configuration does not fit: the deploy refuses it too")]), None
    out = BoxReport(host.name, bp.role.name, plan=bp.services)
    out.facts = boxread.read_box(ctx.shell, host, bp.config.cfg, bp.units)
    if out.facts.get("error"):
        out.figures.append(Figure("device", host.name, "box over ssh", f"unreachable: {out.facts['error']}", "-", BAD,
                                  boxread.ssh_text(host, "true"), "nothing on this box could be measured"))
        return out, bp
    _read(host, bp, ctx, out)
    return out, bp


def link_figures(reports: list[BoxReport], plans: dict[str, planned.BoxPlan], everyone: dict[str, HostConn],
                 ctx: Context) -> None:
    """Each tensor-parallel pair's link probe, both ranks at once; "not a pair" elsewhere."""
    done: dict[tuple[str, ...], dict[str, dict]] = {}
    for rep in reports:
        bp = plans.get(rep.name)
        if bp is None:
            continue
        if not bp.role.tensor_parallel:
            rep.figures += probe_figures.link_figures(rep.name, None, f"not a pair (SPARK_TOPOLOGY = "
                                                      f"{bp.config.cfg.SPARK_TOPOLOGY!r})", None)
            continue
        probe = boxread.link_settings(bp.config.cfg)
        pair = bp.role.pair
        if pair not in done:
            ctx.log(f"{' and '.join(pair)}: the link probe, both ranks at once")
            done[pair] = boxread.link_pair(ctx.shell, [everyone[name] for name in pair], bp.config.cfg, probe)
        rep.link = done[pair].get(rep.name)
        rep.figures += probe_figures.link_figures(rep.name, rep.link, "", probe["LINK_MIN_BUSBW_GBPS"])


def rehearse(selected: list[HostConn], inventory: list[HostConn], ctx: Context) -> list[BoxReport]:
    names = [h.name for h in inventory]
    reports, plans = [], {}
    for host in selected:
        rep, bp = gather_box(host, names, ctx)
        reports.append(rep)
        if bp is not None and not any(f.name == "box over ssh" for f in rep.figures):
            plans[host.name] = bp
    link_figures(reports, plans, {h.name: h for h in inventory}, ctx)
    return reports

