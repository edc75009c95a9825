"""Each reading of the rehearsal judged: a Figure says what was measured, how, against what, its verdict, and what
a bad result means. Pure: parsed readings, the plan and the typed settings in; Figures out.

Verdicts: OK; BAD (the command exits non-zero naming it); WARN (printed, not failing: worth a look); NOT_MEASURED
(nothing to read: a script not installed, a line vLLM did not log); NA (does not apply to this box: not a pair, a
headless worker).
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

from sparkctl.capacity import vllm_reported
from sparkctl.config.quantities import GIB

OK, BAD, WARN, NOT_MEASURED, NA = "ok", "BAD", "warn", "not measured", "n/a"

# section key -> its heading in the report (and in docs/first-gx10.md's order)
SECTIONS = {
    "device": "Device check",
    "admission": "Admission per start",
    "memory": "Memory per service: planned against measured",
    "load": "Load time per service",
    "kernels": "Kernels vLLM chose against the catalog's",
    "caches": "Kernel caches: a cold start against a warm restart",
    "decode": "Decode and prefill against the roofline",
    "speculative": "MTP acceptance per position",
    "kv": "KV tokens: planned against vLLM's",
    "link": "Link bandwidth of a tensor-parallel pair",
}

MODEL_LOADING_RE = re.compile(r"Model loading took\s+([0-9.]+)\s*GiB")
CPU_KV_RE = re.compile(r"Explicitly set \(([0-9.]+)/[0-9.]+\) GiB for KV cache")  # vLLM's CPU build (the sim)
REFUSAL_RE = re.compile(r"Free memory on device \S+ \(([0-9.]+)/([0-9.]+) GiB\) on startup is less than desired "
                        r"GPU memory utilization \(([0-9.]+), ([0-9.]+) GiB\)")
REQUESTED_RE = re.compile(r"requested memory\D*([0-9.]+)\s*GiB")
INITIAL_FREE_RE = re.compile(r"Initial free memory\s+([0-9.]+)\s*GiB")  # vLLM's own reading at its current start
# the simulated Spark's GB10 pool stand-in (sparkctl/sim/standins/gb10-memory: vLLM's own request_memory) when it admits
ADMITTED_RE = re.compile(r"([0-9.]+) GiB free >= ([0-9.]+) GiB requested")
STARTUP_COMPLETE = "Application startup complete"


@dataclass(frozen=True)
class Figure:
    section: str  # a SECTIONS key
    box: str  # inventory name
    name: str  # what was measured, e.g. "coder: whole unit (cgroup MemoryCurrent)"
    value: str  # the reading, with its unit
    against: str  # what it is judged against (the plan, a floor, the write-up's figure), or "-"
    verdict: str  # OK | BAD | WARN | NOT_MEASURED | NA
    how: str  # the command or reading that measured it (workload, window, streams where they apply)
    bad_means: str  # what a bad result means, and what to do

    def to_dict(self) -> dict:
        return asdict(self)


def gib(x: float | None) -> str:
    """A size in GiB: one decimal, or three significant digits below 1 GiB (the simulated Spark's 64 MiB of KV)."""
    if x is None:
        return "-"
    return f"{x:.1f} GiB" if abs(x) >= 1 else f"{x:.3g} GiB"


def _within(measured: float, planned: float, tolerance: float) -> bool:
    return planned > 0 and abs(measured - planned) / planned <= tolerance


# ---------------------------------------------------------------------------------------------------- device

DEVICE_BAD = ("the box cannot run the deploy's vLLM on its GPU as the unit runs it: read the check's output "
              "(device nodes in the sandbox, the CUDA wheels, Triton's compile, the NVFP4 kernels) and fix that "
              "first; nothing after it is worth measuring")


def device_figures(box: str, result: dict) -> list[Figure]:
    """The box-side device check's result: {"installed", "rc", "summary", "command"}."""
    how = result.get("command", "")
    if not result.get("installed"):
        return [Figure("device", box, "device check", "not installed on this box", "exit 0", NOT_MEASURED, how,
                       DEVICE_BAD)]
    ok = result.get("rc") == 0
    value = ("passed" if ok else f"FAILED (exit {result.get('rc')})") + \
        (f": {result['summary']}" if result.get("summary") else "")
    return [Figure("device", box, "device check", value, "exit 0", OK if ok else BAD, how, DEVICE_BAD)]


# ---------------------------------------------------------------------------------------------------- memory

def memory_figures(box: str, facts: dict, planned: dict, tolerance: float) -> list[Figure]:
    """Per service the plan's resident + KV beside what the box reads: the weights and the KV pool vLLM logged
    (journal), the unit's whole cgroup (MemoryCurrent)."""
    out = []
    for service, plan in planned.items():
        svc = (facts.get("services") or {}).get(service) or {}
        out += [_weights(box, service, svc, plan), _kv_pool(box, service, svc, plan, tolerance),
                _cgroup(box, service, svc, plan, tolerance)]
    return out


def _weights(box: str, service: str, svc: dict, plan: dict) -> Figure:
    found = [float(m.group(1)) for line in svc.get("journal", []) if (m := MODEL_LOADING_RE.search(line))]
    how = "journal of the unit's current start: vLLM's \"Model loading took X GiB\""
    against = f"planned resident {gib(plan['resident_gib'])} (weights + runtime, {plan['resident_source']})"
    bad = ("the weights alone outgrow the plan's resident figure: the checkpoint is not the one the catalog "
           "describes (lock, revision, quantization) or its memory facts are wrong: fix them before trusting the plan")
    if not found:
        return Figure("memory", box, f"{service}: weights (vLLM)", "not logged", against, NOT_MEASURED, how, bad)
    weights = found[-1]
    return Figure("memory", box, f"{service}: weights (vLLM)", gib(weights), against,
                  OK if weights <= plan["resident_gib"] else BAD, how, bad)


def _kv_pool(box: str, service: str, svc: dict, plan: dict, tolerance: float) -> Figure:
    text = "\n".join(svc.get("journal", []))
    logged = vllm_reported.parse_log(text).kv_memory_gib
    if logged is None and (m := CPU_KV_RE.search(text)):
        logged = float(m.group(1))
    how = ("journal of the unit's current start: vLLM's \"Available KV cache memory\" / \"reserved X GiB memory for "
           "KV Cache\" (the CPU build's \"Explicitly set (X/Y) GiB for KV cache\")")
    against = f"planned KV {gib(plan['kv_gib'])} (±{tolerance:.0%}, PLAN_MEASURED_TOLERANCE)"
    bad = ("the KV pool is not the budget the deploy set (--kv-cache-memory-bytes): the unit runs other "
           "arguments than the rendered ones, or vLLM sized the pool itself; compare `systemctl cat` with the env file")
    if logged is None:
        return Figure("memory", box, f"{service}: KV pool (vLLM)", "not logged", against, NOT_MEASURED, how, bad)
    return Figure("memory", box, f"{service}: KV pool (vLLM)", gib(logged), against,
                  OK if _within(logged, plan["kv_gib"], tolerance) else BAD, how, bad)


def _cgroup(box: str, service: str, svc: dict, plan: dict, tolerance: float) -> Figure:
    current = svc.get("memory_current")
    how = "systemctl show -P MemoryCurrent (the unit's cgroup: weights, KV, runtime, its page cache)"
    against = f"planned footprint {gib(plan['footprint_gib'])} (+{tolerance:.0%})"
    bad = ("the service holds more than the plan gave it: the memory the other services and the OS were promised "
           "is not there (SparkMemAvailableLow, earlyoom); lower a KV budget or correct the catalog's resident figure")
    if current is None:
        return Figure("memory", box, f"{service}: whole unit (cgroup)", "not available (no memory accounting for "
                      "the unit, or not running)", against, NOT_MEASURED, how, bad)
    value = current / GIB
    verdict = OK if value <= plan["footprint_gib"] * (1 + tolerance) else BAD
    return Figure("memory", box, f"{service}: whole unit (cgroup)", gib(value), against, verdict, how, bad)


def box_memory_figures(box: str, facts: dict, planned: dict, usable_gib: float, reserve_gib: float,
                       floor_gib: float) -> list[Figure]:
    """MemAvailable now, against the alert's floor and the plan's headroom."""
    available = (facts.get("meminfo") or {}).get("MemAvailable")
    planned_free = usable_gib - reserve_gib - sum(p["footprint_gib"] for p in planned.values())
    how = "/proc/meminfo MemAvailable (GB10: what CUDA calls free; NVML's memory fields are N/A)"
    against = (f"> {gib(floor_gib)} (ALERT_MEM_AVAILABLE_FLOOR_GIB); the plan leaves {gib(planned_free)} beyond the "
               f"OS reserve")
    bad = ("the box is short of memory with every service up: earlyoom kills vLLM next; find what holds it "
           "(page cache: `sync; echo 3 > /proc/sys/vm/drop_caches`; a stray process) or lower a KV budget")
    if available is None:
        return [Figure("memory", box, "box: MemAvailable", "not read", against, NOT_MEASURED, how, bad)]
    value = available / GIB
    return [Figure("memory", box, "box: MemAvailable", gib(value), against, OK if value > floor_gib else BAD, how,
                   bad)]


# ---------------------------------------------------------------------------------------------------- admission

ADMISSION_BAD = ("vLLM refuses this start (\"Free memory on device ... is less than desired GPU memory "
                 "utilization\"): a first install, a lone restart or a flip in this order does not come up; free "
                 "memory for it (a smaller KV budget, fewer EMBEDDERS, a smaller VLLM_ADMISSION_MARGIN_GIB) or, when "
                 "the box holds more than planned, correct the plan's resident figures (docs/first-gx10.md)")


def admission_figures(box: str, starts: list | None, why_not: str, facts: dict) -> list[Figure]:
    """The planned admission of every start (capacity/admission.py's walk), then vLLM's own figure per service."""
    how = ("sparkctl.capacity.admission.walk_settings: the planned MemAvailable at each start against vLLM's "
           "request_memory, ceil(total x --gpu-memory-utilization)")
    if starts is None:
        out = [Figure("admission", box, "admission walk", why_not, "-", NOT_MEASURED, how, ADMISSION_BAD)]
    else:
        out = [Figure("admission", box, f"{s.service}: {s.start}",
                      f"free {gib(s.free_gib)}, needs {gib(s.required_gib)} (utilization {_fraction(s.utilization)})",
                      "needs <= free", OK if s.admitted else BAD, how, ADMISSION_BAD) for s in starts]
    for service, svc in sorted((facts.get("services") or {}).items()):
        out.append(_vllm_admission(box, service, svc))
    return out


def _fraction(x) -> str:
    return "-" if x is None else f"{x:.3f}"


def _vllm_admission(box: str, service: str, svc: dict) -> Figure:
    how = "journal of this boot: vLLM's startup refusal, or its debug \"requested memory\" line"
    name = f"{service}: vLLM's own admission"
    for line in reversed(svc.get("boot", [])):
        if m := REFUSAL_RE.search(line):
            free, total, util, wanted = m.groups()
            verdict = WARN if svc.get("active") == "active" else BAD  # refused once, up now: a restart order hit it
            return Figure("admission", box, name, f"refused: free {free}/{total} GiB < {util} x total = {wanted} GiB",
                          "free >= wanted", verdict, how, ADMISSION_BAD)
        if m := ADMITTED_RE.search(line):
            return Figure("admission", box, name, f"admitted: {m.group(1)} GiB free >= {m.group(2)} GiB requested",
                          "free >= requested", OK, how, ADMISSION_BAD)
        if m := REQUESTED_RE.search(line):
            return Figure("admission", box, name, f"requested {m.group(1)} GiB", "-", OK, how, ADMISSION_BAD)
    for line in svc.get("journal", []):
        if m := INITIAL_FREE_RE.search(line):
            return Figure("admission", box, name, f"admitted: vLLM saw {m.group(1)} GiB free at its current start",
                          "-", OK, how + "; its \"Initial free memory\"", ADMISSION_BAD)
    return Figure("admission", box, name, "no admission line this boot (vLLM logs a refusal only when it refuses, "
                  "the request at debug level)", "-", NOT_MEASURED, how, ADMISSION_BAD)


# ---------------------------------------------------------------------------------------------------- load time

def load_seconds(svc: dict) -> float | None:
    """Seconds from the unit's current start to vLLM's "Application startup complete" (the health table's
    "load s": the same two readings)."""
    start = svc.get("start_epoch")
    for line in svc.get("journal", []):
        if STARTUP_COMPLETE in line and start is not None:
            try:
                return round(float(line.split()[0]) - start, 1)
            except (ValueError, IndexError):
                return None
    return None


def load_figures(box: str, facts: dict, headless: set[str], deadline_s: float, estimate_s: float) -> list[Figure]:
    how = ("ExecMainStartTimestamp of the unit's current start to its journal's \"Application startup complete\" "
           "(the health table's \"load s\")")
    against = f"<= {deadline_s:g} s (HEALTH_READY_TIMEOUT_S); estimate {estimate_s:g} s (ROLLOUT_ESTIMATE_LOAD_S)"
    bad = ("the service takes longer to load than the deploy's gate waits: every rollout of it fails and rolls "
           "back; raise HEALTH_READY_TIMEOUT_S to the measured time plus a margin, and ROLLOUT_ESTIMATE_LOAD_S with "
           "it (the alerts' deadlines follow); check that the JIT caches persist (a second start should be faster)")
    out = []
    for service, svc in sorted((facts.get("services") or {}).items()):
        seconds = load_seconds(svc)
        if service in headless:
            out.append(Figure("load", box, service, "a headless worker logs no API start", "-", NA, how, bad))
        elif seconds is None:
            out.append(Figure("load", box, service, "not logged (not running, or started before the journal "
                              "kept it)", against, NOT_MEASURED, how, bad))
        else:
            verdict = BAD if seconds > deadline_s else (WARN if seconds > estimate_s else OK)
            out.append(Figure("load", box, service, f"{seconds:.1f} s", against, verdict, how, bad))
    return out
