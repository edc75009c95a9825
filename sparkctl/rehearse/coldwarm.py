"""`rehearse --cold-warm`: a cold start and a warm restart of the same build of the coder, and each kernel cache
(KERNEL_CACHES) proven reused.

On the box, over ssh, as root: the files of every kernel cache are counted; the coder is stopped, its kernel caches
are moved aside (so the start compiles everything: a cold start) and it is started; once vLLM logs "Application
startup complete" the caches are counted again (what the cold start wrote: the files present before the warm
restart), a mark file is touched and the unit restarted (a warm start: the same build, the caches as the cold start
left them), and the caches are counted a last time: a file not newer than the mark was there before the warm restart
and it neither removed nor rewrote it (reused). Each start's time is the health table's "load s" (ExecMainStartTimestamp to "Application startup
complete", figures.load_seconds). The caches moved aside are removed once the cold start came up, and put back when
it did not. It takes the coder down twice: drain client traffic first, as for the bench probe.

The box commands are built here (pure); `measure` drives them through a boxread.Shell, which tests fake.
"""

from __future__ import annotations

import shlex
import time
from collections.abc import Callable

from sparkctl.config.schema import GroupData
from sparkctl.config.hosts import HostConn
from sparkctl.rehearse import boxread
from sparkctl.rehearse.figures import BAD, NA, NOT_MEASURED, OK, WARN, Figure, load_seconds

ASIDE = ".rehearse-cold-aside"  # suffix of a cache directory moved aside for the cold start
SERVICE = "coder"
MARK = "cache "  # one line per cache: "cache <VAR> <files> <bytes>"


def cache_dirs(cfg: GroupData) -> dict[str, str]:
    """{variable: directory} of every kernel cache (units.kernel_caches, without importing the renderer)."""
    return {name: f"{cfg.STATE_DIR}/{sub}" for name, sub in cfg.KERNEL_CACHES.items()}


def mark_path(cfg: GroupData) -> str:
    """A file touched just before the warm restart: a cache file not newer than it was there before and is untouched."""
    return f"{cfg.STATE_DIR}/.rehearse-warm-mark"


def count_command(cfg: GroupData, mark: str = "") -> str:
    """One line per cache: its variable, how many files it holds, their bytes (0 0 when it does not exist) and, with
    `mark`, how many of them are not newer than that file (kept untouched since it was touched)."""
    parts = []
    for name, d in cache_dirs(cfg).items():
        q = shlex.quote(d)
        kept = (f'k=$(find {q} -type f ! -newer {shlex.quote(mark)} 2>/dev/null | wc -l); ' if mark else "k=-; ")
        parts.append(f'n=$(find {q} -type f 2>/dev/null | wc -l); b=$(du -sb {q} 2>/dev/null | cut -f1); {kept}'
                     f'echo "{MARK}{name} $n ${{b:-0}} $k";')
    return " ".join(parts)


def cold_command(cfg: GroupData, unit: str) -> str:
    """Stop the unit, move every kernel cache aside, start it (returns once systemd started it)."""
    u = shlex.quote(unit)
    aside = " ".join(f"if [ -e {shlex.quote(d)} ]; then rm -rf {shlex.quote(d + ASIDE)}; "
                     f"mv {shlex.quote(d)} {shlex.quote(d + ASIDE)}; fi;" for d in cache_dirs(cfg).values())
    return f"set -e; systemctl stop {u}; {aside} systemctl start {u}"


def warm_command(cfg: GroupData, unit: str) -> str:
    """Touch the mark (mark_path), then restart the unit on the caches as the cold start left them."""
    return f"set -e; touch {shlex.quote(mark_path(cfg))}; systemctl restart {shlex.quote(unit)}"


def drop_aside_command(cfg: GroupData) -> str:
    return "rm -rf " + " ".join(shlex.quote(d + ASIDE) for d in cache_dirs(cfg).values())


def drop_mark_command(cfg: GroupData) -> str:
    return f"rm -f {shlex.quote(mark_path(cfg))}"


def restore_command(cfg: GroupData, unit: str) -> str:
    """The cold start did not come up: the caches moved aside go back, and the unit starts on them."""
    u = shlex.quote(unit)
    back = " ".join(f"if [ -e {shlex.quote(d + ASIDE)} ]; then rm -rf {shlex.quote(d)}; "
                    f"mv {shlex.quote(d + ASIDE)} {shlex.quote(d)}; fi;" for d in cache_dirs(cfg).values())
    return f"systemctl stop {u}; {back} systemctl start {u}"


def parse_counts(text: str) -> dict[str, dict]:
    out = {}
    for line in text.splitlines():
        if line.startswith(MARK):
            _mark, name, files, size, kept = (line.split() + ["0", "0", "-"])[:5]
            out[name] = {"files": int(files) if files.isdigit() else 0, "bytes": int(size) if size.isdigit() else 0}
            if kept.isdigit():
                out[name]["kept"] = int(kept)
    return out


def _unit(shell: boxread.Shell, host: HostConn, cfg: GroupData, unit: str) -> dict:
    """The unit's state, its current start's InvocationID and journal (boxread.read_box)."""
    facts = boxread.read_box(shell, host, cfg, {SERVICE: unit})
    return (facts.get("services") or {}).get(SERVICE) or {}


def _wait_ready(shell: boxread.Shell, host: HostConn, cfg: GroupData, unit: str, before: str,
                sleep: Callable[[float], None]) -> tuple[float | None, str]:
    """Seconds the unit's new start (an InvocationID other than `before`) took to "Application startup complete";
    (None, why) when it failed or REHEARSE_COLD_WARM_TIMEOUT_S passed (timed on this machine)."""
    deadline = time.monotonic() + cfg.REHEARSE_COLD_WARM_TIMEOUT_S
    while True:
        svc = _unit(shell, host, cfg, unit)
        seconds = load_seconds(svc)
        if seconds is not None and svc.get("invocation") and svc.get("invocation") != before:
            return seconds, ""
        if svc.get("active") == "failed":
            return None, f"{unit} failed during its start"
        if time.monotonic() > deadline:
            return None, f"not ready within {cfg.REHEARSE_COLD_WARM_TIMEOUT_S:g} s (REHEARSE_COLD_WARM_TIMEOUT_S)"
        sleep(cfg.HEALTH_POLL_INTERVAL_S)


def _counts(shell, host, cfg, mark: str = "") -> dict[str, dict]:
    return parse_counts(shell.run(host, count_command(cfg, mark), cfg.REHEARSE_SSH_TIMEOUT_S).out)


def measure(shell: boxread.Shell, host: HostConn, cfg: GroupData, unit: str,
            sleep: Callable[[float], None] = time.sleep, log: Callable[[str], None] = lambda text: None) -> dict:
    """{"service", "unit", "cold_s", "warm_s", "error", "caches": {VAR: {"dir", "before_cold", "before_warm",
    "after_warm"}}, "commands"}: each count {"files", "bytes"}."""
    stop_s = cfg.SERVICE_STOP_TIMEOUT_S + cfg.REHEARSE_SSH_TIMEOUT_S
    out = {"service": SERVICE, "unit": unit, "cold_s": None, "warm_s": None, "error": "",
           "commands": {"count": boxread.ssh_text(host, count_command(cfg)),
                        "cold": boxread.ssh_text(host, cold_command(cfg, unit)),
                        "warm": boxread.ssh_text(host, warm_command(cfg, unit))}}
    before_cold = _counts(shell, host, cfg)
    log(f"{host.name}: cold start of {unit} (kernel caches moved aside)")
    invocation = _unit(shell, host, cfg, unit).get("invocation", "")
    r = shell.run(host, cold_command(cfg, unit), stop_s)
    cold, why = (None, f"the cold start's command exited {r.rc}: {r.err.strip()[-200:]}") if r.rc != 0 else \
        _wait_ready(shell, host, cfg, unit, invocation, sleep)
    out["cold_s"] = cold
    if cold is None:
        shell.run(host, restore_command(cfg, unit), stop_s)
        out["error"] = f"cold start: {why}; the caches moved aside were put back"
        out["caches"] = _caches(cfg, before_cold, {}, {})
        return out
    shell.run(host, drop_aside_command(cfg), cfg.REHEARSE_SSH_TIMEOUT_S)
    before_warm = _counts(shell, host, cfg)
    log(f"{host.name}: warm restart of {unit}")
    invocation = _unit(shell, host, cfg, unit).get("invocation", "")
    r = shell.run(host, warm_command(cfg, unit), stop_s)
    warm, why = (None, f"the warm restart's command exited {r.rc}") if r.rc != 0 else \
        _wait_ready(shell, host, cfg, unit, invocation, sleep)
    out["warm_s"], out["error"] = warm, ("" if warm is not None else f"warm restart: {why}")
    out["caches"] = _caches(cfg, before_cold, before_warm, _counts(shell, host, cfg, mark_path(cfg)))
    shell.run(host, drop_mark_command(cfg), cfg.REHEARSE_SSH_TIMEOUT_S)
    return out


def _caches(cfg, before_cold, before_warm, after_warm) -> dict:
    none = {"files": 0, "bytes": 0}
    return {name: {"dir": d, "before_cold": before_cold.get(name, none), "before_warm": before_warm.get(name),
                   "after_warm": after_warm.get(name)} for name, d in cache_dirs(cfg).items()}


# ---------------------------------------------------------------------------------------------------- figures

HOW = ("rehearse --cold-warm: the coder stopped, its kernel caches (KERNEL_CACHES) moved aside, started (cold), then "
       "restarted (warm); each start from ExecMainStartTimestamp to \"Application startup complete\"; each cache's "
       "files counted on the box (find -type f) before the cold start, before the warm restart and after it (those "
       "not newer than a mark touched just before the warm restart: untouched by it)")
BAD_MEANS = ("a kernel cache does not survive a restart, or is not read: every restart compiles again (a cold "
             "FlashInfer JIT on a GB10 has taken ~17 min), and a start can outlast the health gate; check that every "
             "cache's variable is in the unit's environment under STATE_DIR (KERNEL_CACHES), never TMPDIR or /run")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def figures(box: str, result: dict | None, why_not: str = "") -> list[Figure]:
    """The two starts' times, then each cache's reuse; one figure saying why when nothing was measured."""
    if result is None:
        return [Figure("caches", box, "cold start and warm restart", why_not or "not measured (no --cold-warm)", "-",
                       NA if why_not.startswith("n/a") else NOT_MEASURED, HOW, BAD_MEANS)]
    return _start_figures(box, result) + [_cache_figure(box, name, c) for name, c in result.get("caches", {}).items()]


def _start_figures(box: str, result: dict) -> list[Figure]:
    svc, cold, warm = result["service"], result["cold_s"], result["warm_s"]
    out = [Figure("caches", box, f"{svc}: cold start (kernel caches emptied)",
                  f"{cold:.1f} s" if cold is not None else f"not ready: {result['error']}", "comes up",
                  OK if cold is not None else BAD, HOW, BAD_MEANS)]
    if cold is None:
        return out
    against = f"faster than the cold start ({cold:.1f} s)"
    if warm is None:
        return out + [Figure("caches", box, f"{svc}: warm restart", f"not ready: {result['error']}", against, BAD,
                             HOW, BAD_MEANS)]
    diff = f"{cold - warm:.1f} s faster" if warm < cold else f"{warm - cold:.1f} s slower"
    share = f", {warm / cold:.0%} of the cold start" if cold > 0 else ""
    return out + [Figure("caches", box, f"{svc}: warm restart", f"{warm:.1f} s ({diff}{share})", against,
                         OK if warm < cold else WARN, HOW, BAD_MEANS)]


def _cache_figure(box: str, name: str, c: dict) -> Figure:
    before, after, label = c.get("before_warm"), c.get("after_warm"), f"{name}: reused"
    if before is None or after is None:
        return Figure("caches", box, label, "not counted (the restarts did not both come up)", c["dir"],
                      NOT_MEASURED, HOW, BAD_MEANS)
    if before["files"] == 0:
        return Figure("caches", box, label, "nothing written by the cold start (this build does not use it)",
                      c["dir"], NOT_MEASURED, HOW, BAD_MEANS)
    kept = after.get("kept", 0)
    verdict = OK if kept >= before["files"] else BAD if kept == 0 else WARN
    return Figure("caches", box, label, f"{before['files']} files ({_mib(before['bytes'])}) before the warm "
                  f"restart, {kept} of them untouched after it ({after['files']} in all)",
                  f"{c['dir']}: every file the cold start wrote still there, not rewritten", verdict, HOW, BAD_MEANS)
