"""The quick acceptance of a rollout: the bench probe, shorter, plus one NIAH cell and the KV read-back.

The same code as `bench` and `niah` (probe.run_probe, niah.run_cell), never a copy: a short decode window
(ACCEPTANCE_WINDOW_S) at 1 and N streams (ACCEPTANCE_STREAMS) with the bench's requests (its workload,
BENCH_MAX_TOKENS, BENCH_IGNORE_EOS), which also yields the spec-decode acceptance per draft position; one fresh
prefill of ACCEPTANCE_PREFILL_TOKENS (prefix-cache hits must stay 0); one NIAH cell (ACCEPTANCE_NIAH_LENGTH at
ACCEPTANCE_NIAH_DEPTH); and vLLM's own KV-cache size from the journal of the coder's current start, beside the
plan. Every part has an ACCEPTANCE_*_ENABLED switch. The record is a bench record with a `gate` part naming its
window, streams and prefill, so no one reads it as a full bench.

The deploy calls `acceptance_of(host, config)` -> acceptance.Verdict: the quick run, then `judge_record` (the box's
history read, the moving reference chosen by reference.choose, the fixed anchors, a pair's one-box bound, the
catalog's floors, acceptance.judge), which `bench judge RECORD.json --history FILE` also calls on a saved record.
The history is read before anything is measured: one that cannot be read fails the verdict at once
(history.HistoryError). After the box confirmed the commit it calls `record_accepted(host, cfg, verdict)`, which
appends the run to the box's history (history.py) with the reference it was judged against: as the baseline when
its configuration and workload have none yet, or provisional when it was judged on the roofline alone.
"""

from __future__ import annotations

import asyncio
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path

from sparkctl.box.contract import PROBE_HEADER  # lets the probe through while its box keeps everyone else drained
from sparkctl.config import catalog
from sparkctl.config.schema import GroupData
from sparkctl.config.secrets import read_api_token, secrets_dir
from sparkctl.config.settings import HostConfig
from sparkctl.errors import SettingError
from sparkctl.measure import acceptance, evidence, history, labels, niah, probe, record, reference, workloads
from sparkctl.measure.client import Endpoint, make_client, server_info

KV_LINES = r"KV cache size|Maximum concurrency for"  # vLLM's startup lines (capacity/vllm_reported.py parses them)
JOURNAL_TIMEOUT_S = 60  # one journal read over ssh, s


@dataclass(frozen=True)
class QuickSettings:
    probe: probe.ProbeSettings  # window, streams and prefill of the gate; the bench's requests
    niah: bool  # ACCEPTANCE_NIAH_ENABLED
    niah_length: int  # ACCEPTANCE_NIAH_LENGTH, tokens
    niah_depth: float  # ACCEPTANCE_NIAH_DEPTH, %
    niah_max_tokens: int  # NIAH_MAX_TOKENS
    kv: bool  # ACCEPTANCE_KV_ENABLED

    @classmethod
    def from_settings(cls, cfg: GroupData) -> "QuickSettings":
        """The gate's probe from the typed settings (every ACCEPTANCE_* value already checked by the schema)."""
        t = acceptance.Thresholds.from_settings(cfg)
        ps = probe.ProbeSettings(
            workload=workloads.load(workloads.DEFAULT_WORKLOAD),
            streams=probe.distinct("ACCEPTANCE_STREAMS", cfg.ACCEPTANCE_STREAMS),
            window_s=float(cfg.ACCEPTANCE_WINDOW_S), max_tokens=cfg.BENCH_MAX_TOKENS,
            prefill_tokens=[cfg.ACCEPTANCE_PREFILL_TOKENS] if t.prefill else [],
            prefill_repeats=cfg.ACCEPTANCE_PREFILL_REPEATS, ignore_eos=cfg.BENCH_IGNORE_EOS,
            timeout_s=float(cfg.BENCH_CLIENT_TIMEOUT_S), settle_s=float(cfg.BENCH_SETTLE_S),
            idle_timeout_s=float(cfg.BENCH_IDLE_TIMEOUT_S), agreement_tolerance=float(cfg.BENCH_AGREEMENT_TOLERANCE))
        return cls(probe=ps, niah=t.niah, niah_length=cfg.ACCEPTANCE_NIAH_LENGTH,
                   niah_depth=float(cfg.ACCEPTANCE_NIAH_DEPTH), niah_max_tokens=cfg.NIAH_MAX_TOKENS, kv=t.kv)


# ---------------------------------------------------------------------------------------------------- measuring

async def niah_cell(ep: Endpoint, qs: QuickSettings) -> dict:
    """The one NIAH cell, by niah.run_cell (the grid's own code)."""
    async with make_client(ep, qs.probe.timeout_s) as client:
        info = await server_info(client, ep)
        return await niah.run_cell(client, ep, qs.niah_length, qs.niah_depth, 0, qs.niah_max_tokens,
                                   info.get("max_model_len"))


async def run_quick(ep: Endpoint, metrics_source: probe.MetricsSource, qs: QuickSettings, record_labels: dict,
                    kv: dict | None = None, reporter: probe.Reporter | None = None,
                    roofline_single: float | None = None) -> dict:
    """The quick run's bench record, with its `gate` part. kv: {"planned_tokens", "measured_tokens"} or None."""
    rec = await probe.run_probe(ep, metrics_source, qs.probe, record_labels, reporter,
                                roofline_single=roofline_single)
    gate = {"kind": "acceptance", "window_s": qs.probe.window_s, "streams": list(qs.probe.streams),
            "prefill_tokens": list(qs.probe.prefill_tokens),
            "prefill_repeats": qs.probe.prefill_repeats, "kv": kv if qs.kv else None, "niah": None}
    if qs.niah:
        if reporter:
            reporter.phase(f"NIAH {qs.niah_length} tokens at depth {qs.niah_depth:g} %")
        gate["niah"] = await niah_cell(ep, qs)
    rec["gate"] = gate
    return record.validate_record(rec, "quick acceptance record")


def planned_kv_tokens(config: HostConfig) -> int | None:
    """The plan's KV tokens for the configured coding model (what the health table shows as planned)."""
    from sparkctl.capacity import planner

    plan = planner.check_fits(config.cfg, config.catalog, config.cfg.CODING_MODEL)
    return plan.capacity.tokens if plan.capacity else None


def journal_command(unit: str) -> str:
    """The KV lines vLLM logged in the unit's current run only (its InvocationID), never an earlier start's."""
    u = shlex.quote(unit)
    return (f"inv=$(systemctl show -p InvocationID --value {u}); [ -n \"$inv\" ] && "
            f"journalctl --no-pager -o cat _SYSTEMD_INVOCATION_ID=$inv | grep -E {shlex.quote(KV_LINES)} | tail -n 4"
            " || true")


def read_kv(host, config: HostConfig, unit: str) -> dict:
    """{"planned_tokens", "measured_tokens"}: the plan beside what the coder's vLLM reported at this start."""
    from sparkctl.capacity import vllm_reported

    try:
        r = subprocess.run(host.ssh_argv(journal_command(unit)), capture_output=True, text=True,
                           timeout=JOURNAL_TIMEOUT_S)
        text = r.stdout if r.returncode == 0 else ""
    except (OSError, subprocess.TimeoutExpired):
        text = ""
    return {"planned_tokens": planned_kv_tokens(config), "measured_tokens": vllm_reported.parse_log(text).tokens}


# ---------------------------------------------------------------------------------------------------- the interface



def endpoint_for(host, cfg: GroupData, ca: str | None = None, probe_key: str = "") -> Endpoint:
    """The coder through the box's TLS proxy, as `bench` reaches it (probe_key: the waiting transaction's drain
    exemption, sent as PROBE_HEADER)."""
    address = f"[{host.address}]" if ":" in host.address and not host.address.startswith("[") else host.address
    served = cfg.CODER_SERVED_NAME
    ca = ca or str(secrets_dir(cfg) / "pki" / "ca.pem")
    if not Path(ca).is_file():
        raise SettingError("CA bundle", ca, "the CA (PEM) that signed the proxy's certificate")
    return Endpoint(f"https://{address}:{cfg.PROXY_PORT}/{served}/v1", served, read_api_token(cfg), ca,
                    ((PROBE_HEADER, probe_key),) if probe_key else ())


def acceptance_of(host, config: HostConfig, *, unit: str = "vllm-coder.service", endpoint: Endpoint | None = None,
                  metrics: probe.MetricsSource | None = None, reporter: probe.Reporter | None = None,
                  lines: list[dict] | None = None, probe_key: str = "") -> acceptance.Verdict:
    """Run the quick acceptance of `host`'s coder and judge it: the Verdict the deploy turns into the box-side
    `commit` or `rollback`. Settings are checked first (SettingError before anything is measured); a probe that
    cannot measure at all raises BenchError (the caller decides: no verdict sent = the box decides by timeout).
    lines: the box's history, when the caller already read it (tests); None: read over ssh first, so a history
    that cannot be read (history.HistoryError) fails before anything is measured. probe_key: the waiting
    transaction's key that lets this probe (and only it) through the box's drain."""
    cfg = config.cfg
    qs = QuickSettings.from_settings(cfg)
    acceptance.floor_of(coder_spec(config, cfg.CODING_MODEL))  # the catalog's floor is valid before measuring
    ep = endpoint or endpoint_for(host, cfg, probe_key=probe_key)
    source = metrics or probe.MetricsSource.ssh(host, cfg.CODER_PORT)
    kv = read_kv(host, config, unit) if qs.kv else None
    tags = {**labels.model_labels(config), **labels.build_labels(config), **labels.box_labels(host, config)}
    roofline, _why = labels.roofline_single_stream(config)
    lines = history.read(host, cfg) if lines is None else lines  # before the run: unreadable, nothing is measured
    rec = asyncio.run(run_quick(ep, source, qs, tags, kv, reporter, roofline))
    return judge_record(rec, config, lines)


def coder_spec(config: HostConfig, key: str, setting: str = "CODING_MODEL") -> catalog.ModelSpec:
    return catalog.lookup(config.catalog, setting, key, catalog.CODER)


def judge_record(rec: dict, config: HostConfig, lines: list[dict], where: str = "the judged record",
                 kinds: dict | None = None) -> acceptance.Verdict:
    """The verdict on a quick-run record, given the box's history before it: the deploy's judgement, and
    `bench judge`'s replay of a saved one. The catalog entry is the record's own model's. The record is read into
    its types here (record.validate_record: non-finite or negative figures, malformed cells refused) and refused
    unless it is evidence (evidence.check: its bounds on this box and model, its workload, its NIAH cell re-scored;
    evidence.same_kind: a simulated record never judged against a real box's history, nor the other way round).
    kinds: evidence.history_kinds of the whole history, when lines is only what the judge needed of it."""
    rec = record.validate_record(rec, where)
    t = acceptance.Thresholds.from_settings(config.cfg)
    spec = coder_spec(config, (rec.get("model") or {}).get("key"), "the record's model.key")
    evidence.check(rec, evidence.Bounds.of(config, spec.key, history.config_key(rec)["tensor_parallel_size"]), where)
    evidence.same_kind(rec, evidence.history_kinds(lines) if kinds is None else kinds, where)
    published = reference.published_of(spec)
    moving = reference.choose(rec, lines, published, t)
    anchors, notes = reference.anchors(rec, lines, published, moving, t)
    return acceptance.judge(rec, t, floor=acceptance.floor_of(spec), reference=moving, anchors=tuple(anchors),
                            pair=reference.pair_bound(rec, lines, published, t), speculative=bool(spec.speculative),
                            notes=tuple(notes))


def record_accepted(host, cfg: GroupData, verdict: acceptance.Verdict) -> dict | None:
    """After the box committed: append the run to its history (the baseline when it had none; provisional, never
    a baseline, when a figure was judged on the roofline alone). A run kept only because ACCEPTANCE_MODE is warn is
    not recorded: it must never become the yardstick."""
    if not verdict.passed:
        return None
    return history.append(host, cfg, verdict.record, source="acceptance", reference=verdict.reference.tag(),
                          provisional=verdict.provisional)
