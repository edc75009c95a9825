"""The rehearsal's figures from the bench probe's record (decode and prefill against the roofline and the write-up's
published figures, speculative acceptance per position), vLLM's KV tokens against the plan, and the link probe of
a tensor-parallel pair. Pure, like figures.py.
"""

from __future__ import annotations

from sparkctl.capacity import vllm_reported
from sparkctl.measure import reference
from sparkctl.measure.thresholds import Thresholds
from sparkctl.rehearse.figures import BAD, NA, NOT_MEASURED, OK, WARN, Figure

DECODE_BAD = ("decode is far below what this box class did in production (the write-up's probe) or the roofline: "
              "the NVFP4 kernels are not the ones vLLM picked in production (its log names the GEMM backend), the "
              "speculative draft accepts little, or something else runs on the box; compare with `python -m sparkctl "
              "bench compare` after fixing")
PREFILL_BAD = ("a fresh prefill is slower than production's: long prompts (a repository read by an agent) wait "
               "longer for their first token; check the attention backend and --max-num-batched-tokens in the unit")
SPEC_BAD = ("the draft accepts too little to pay for itself (below ACCEPTANCE_SPEC_MIN_TOKENS_PER_STEP or the "
            "catalog's floor): an NVFP4 export without its mtp.* tensors accepts 0 %; check the checkpoint's "
            "model.safetensors.index.json for mtp. keys, the draft revision in the lock, --speculative-config")
KV_BAD = ("vLLM holds another number of KV tokens than the plan: the plan's concurrency (full-context requests at "
          "once) is wrong for this box; correct the catalog's layer facts or the KV budget, then `sparkctl plan`")
LINK_BAD = ("the CX7 link carries less than LINK_MIN_BUSBW_GBPS: a tensor-parallel pair pays an all-reduce per layer "
            "over it; check both twins are up with their addresses (`ibdev2netdev`), NCCL_IB_HCA lists both, the "
            "same physical port on both boxes, the MTU")


DECODE_COUNTER = "tok/s from vllm:generation_tokens_total, read on the box over ssh"


def streams(n: int) -> str:
    return f"{n} stream{'s' if n != 1 else ''}"


def _how(rec: dict, what: str, reading: str = DECODE_COUNTER) -> str:
    w = rec.get("workload") or {}
    box = (rec.get("box") or {}).get("name", "?")
    return (f"python -m sparkctl bench --host {box} ({what}; workload {w.get('name', '?')}-v{w.get('version', '?')}, "
            f"max_tokens {rec.get('max_tokens')}; {reading})")


def _published(rec: dict, spec) -> tuple[reference.Published | None, str]:
    """The write-up's figures when they apply to this run (same checkpoint, one box, their workload), else why not."""
    pub = reference.published_of(spec)
    why = reference.published_mismatch(rec, pub)
    return (None, why) if why else (pub, "")


def decode_figures(box: str, rec: dict, spec, t: Thresholds) -> list[Figure]:
    """Each stream count's decode rate against the roofline floor and, where they apply, the published figures."""
    pub, why = _published(rec, spec)
    out = []
    for run in rec.get("runs", []):
        n, rate, pct = run["streams"], run["counter_tokens_per_s"], run.get("roofline_pct")
        value = f"{rate:.1f} tok/s" + (f" ({pct:.1f} % of the roofline {run['roofline_tokens_per_s']:.1f})"
                                       if pct is not None and run.get("roofline_tokens_per_s") else "")
        bad = t.roofline_floor_fraction > 0 and pct is not None and pct < 100 * t.roofline_floor_fraction
        against = f">= {100 * t.roofline_floor_fraction:g} % of the roofline" if t.roofline_floor_fraction else \
            "roofline floor off (ACCEPTANCE_ROOFLINE_FLOOR_FRACTION = 0)"
        if pub is not None and n in pub.decode:
            floor = pub.decode[n] * (1 - t.published_decode_max_regression)
            bad = bad or rate < floor
            against += f"; write-up {pub.decode[n]:g} tok/s, floor {floor:.1f}"
        elif why:
            against += f"; no published figure: {why}"
        out.append(Figure("decode", box, f"decode, {streams(n)}", value, against, BAD if bad else OK,
                          _how(rec, f"{streams(n)}, {rec.get('window_s'):g} s window"), DECODE_BAD))
    out += _prefill_figures(box, rec, pub, why, t)
    if rec.get("problems"):
        out.append(Figure("decode", box, "probe problems", "; ".join(rec["problems"]), "none", BAD,
                          _how(rec, "every window"), "the counters and the client disagree: the figures above "
                          "are not trustworthy; another client used the server, or a scrape failed"))
    return out


def _prefill_figures(box: str, rec: dict, pub, why: str, t: Thresholds) -> list[Figure]:
    out = []
    for p in rec.get("prefill", []):
        n = p["target_tokens"]
        how = _how(rec, f"one fresh {n:,}-token prompt, max_tokens 1", "prompt tokens / time to the first token, "
                   "prefix-cache hits 0")
        if p.get("error") or p.get("tokens_per_s") is None:
            out.append(Figure("decode", box, f"prefill, {n:,} tokens", f"not measured: {p.get('error')}", "-", BAD,
                              how, PREFILL_BAD))
            continue
        rate, verdict, against = p["tokens_per_s"], OK, f"no published figure: {why}" if why else "-"
        if pub is not None and n in pub.prefill:
            floor = pub.prefill[n] * (1 - t.published_prefill_max_regression)
            verdict, against = (OK if rate >= floor else BAD), f"write-up {pub.prefill[n]:g} tok/s, floor {floor:.0f}"
        out.append(Figure("decode", box, f"prefill, {n:,} tokens", f"{rate:.0f} tok/s", against, verdict, how,
                          PREFILL_BAD))
    return out


def spec_figures(box: str, rec: dict, spec, floor, t: Thresholds) -> list[Figure]:
    """Tokens per step, acceptance rate and per-position acceptance over each decode window."""
    if not spec.speculative:
        return [Figure("speculative", box, "speculative decoding", f"{spec.key} does not speculate", "-", NA, "-",
                       SPEC_BAD)]
    least = max(t.spec_min_tokens_per_step, floor.tokens_per_step * t.spec_floor_fraction if floor else 0.0)
    against = f"tokens/step >= {least:.2f}" + (f" (catalog {floor.tokens_per_step:g} x {t.spec_floor_fraction:g})"
                                               if floor and floor.tokens_per_step else "")
    if least <= 1:  # as the acceptance gate: 1 token per step is what no speculation gives, so nothing is judged
        against = "off (ACCEPTANCE_SPEC_MIN_TOKENS_PER_STEP <= 1, no catalog floor for this checkpoint)"
    out = []
    for run in rec.get("runs", []):
        sd, n = run.get("spec_decode") or {}, run["streams"]
        how = _how(rec, f"{streams(n)}, {rec.get('window_s'):g} s window", "vllm:spec_decode_* counters over the "
                   "same window")
        if sd.get("tokens_per_step") is None:
            out.append(Figure("speculative", box, f"acceptance, {streams(n)}", "not measured (no draft in the "
                              "window)", against, BAD if least > 1 else NOT_MEASURED, how, SPEC_BAD))
            continue
        per_pos = ", ".join(f"{v:.2f}" for v in (sd.get("per_position_acceptance") or {}).values()) or "-"
        rate = sd.get("acceptance_rate")
        value = (f"{sd['tokens_per_step']:.2f} tokens/step, rate {'-' if rate is None else f'{rate:.0%}'}, per "
                 f"position {per_pos}")
        out.append(Figure("speculative", box, f"acceptance, {streams(n)}", value, against,
                          OK if sd["tokens_per_step"] >= least else BAD, how, SPEC_BAD))
    return out


def kv_figures(box: str, journal: list[str], planned_tokens: int | None, production_tokens: int | None,
               tolerance: float) -> list[Figure]:
    """vLLM's "KV cache size: N tokens" of the coder's current start against the plan's tokens."""
    measured = vllm_reported.parse_log("\n".join(journal)).tokens
    how = "journal of the coder's current start: vLLM's \"KV cache size: N tokens\""
    against = f"planned {planned_tokens:,}" if planned_tokens else "planned: -"
    against += (f" (±{tolerance:.0%}); production measured {production_tokens:,}" if production_tokens else
                f" (±{tolerance:.0%})")
    if measured is None:
        return [Figure("kv", box, "coder KV tokens", "not logged", against, NOT_MEASURED, how, KV_BAD)]
    warning = vllm_reported.compare_planned_measured(planned_tokens, measured, tolerance)
    return [Figure("kv", box, "coder KV tokens", f"{measured:,} tokens", against, BAD if warning else OK, how,
                   KV_BAD)]


def link_figures(box: str, result: dict | None, why_not: str, floor_gbps: float | None) -> list[Figure]:
    """The link probe's bus bandwidth on this box's rank, against LINK_MIN_BUSBW_GBPS."""
    if result is None:
        return [Figure("link", box, "link bus bandwidth", why_not, "-", NA, "-", LINK_BAD)]
    how = result.get("command", "")
    against = f">= {floor_gbps:g} GB/s (LINK_MIN_BUSBW_GBPS)" if floor_gbps else "no floor (LINK_MIN_BUSBW_GBPS = 0)"
    if not result.get("installed"):
        return [Figure("link", box, "link bus bandwidth", "not installed on this box", against, NOT_MEASURED, how,
                       LINK_BAD)]
    busbw = result.get("busbw_gbps")
    if result.get("rc") != 0 or busbw is None:
        return [Figure("link", box, "link bus bandwidth", f"FAILED (exit {result.get('rc')}): "
                       f"{result.get('summary', '')}", against, BAD, how, LINK_BAD)]
    verdict = (OK if busbw >= floor_gbps else BAD) if floor_gbps else (OK if floor_gbps == 0 else WARN)
    return [Figure("link", box, "link bus bandwidth", f"{busbw:.2f} GB/s", against, verdict, how, LINK_BAD)]
