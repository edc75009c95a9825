"""What the rehearsal reads on a box over ssh (the same `HostConn.ssh_argv` as `status` and `bench`):

* `read_box`: one round trip: per vLLM unit its state, its cgroup's MemoryCurrent, when its current start began,
  the lines of its current start's journal the rehearsal reads (weights, KV pool, KV tokens, the kernels vLLM chose,
  startup complete),
  this boot's admission lines (vLLM's refusal, its debug "requested memory"); /proc/meminfo; which of the box's
  own scripts are installed under SPARKCTL_HOME/bin.
* `device_check`: `<venv>/bin/python <SPARKCTL_HOME>/bin/device_check.py` (sparkctl/box/device_check.py), run as
  the deploy runs it (sparkctl/render/device_check.py: a transient unit in the vLLM unit's sandbox) where that
  module is in this checkout, or "not installed on this box" when the file is absent.
* `link_pair`: `link_probe.py --rank R --world 2 ...` (sparkctl/box/link_probe.py) on both boxes of a
  tensor-parallel pair at once, over the CX7 link's addresses and the pair's NCCL/Gloo environment.

A `Shell` runs one command on one box; tests replace it with a fake answering from text.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from sparkctl.capacity.venv import vllm_venv
from sparkctl.config import box_paths, topology
from sparkctl.config.hosts import HostConn
from sparkctl.config.schema import GroupData
from sparkctl.render import device_check as render_check
from sparkctl.rehearse import kernels

MARK = "=== "  # a section of read_box's answer: "=== service coder", "=== journal", "=== boot", ...
ABSENT = "__sparkctl_not_installed__"
SCRIPTS = ("device_check.py", "link_probe.py")
JOURNAL_LINES = (r"Model loading took|Available KV cache memory|memory for KV Cache|GiB for KV cache|KV cache size|"
                 r"Maximum concurrency for|Application startup complete|" + kernels.JOURNAL_LINES)
ADMISSION_LINES = r"Free memory on device|requested memory|GiB requested"  # vLLM's refusal, its debug line, the sim's
UNIT_PROPERTIES = ("ActiveState", "MemoryCurrent", "InvocationID")
NO_VALUE = ("", "[not set]", "infinity", "18446744073709551615")  # systemd's "no accounting" spellings


@dataclass(frozen=True)
class Result:
    rc: int
    out: str
    err: str


class Shell:
    """Runs a command on a box over ssh; never raises for an unreachable box (rc 255, or 124 on a timeout)."""

    def run(self, host: HostConn, command: str, timeout_s: float) -> Result:
        try:
            r = subprocess.run(host.ssh_argv(command), capture_output=True, text=True, timeout=timeout_s,
                               stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            return Result(124, "", f"no answer within {timeout_s:g} s")
        except OSError as exc:
            return Result(255, "", str(exc))
        return Result(r.returncode, r.stdout, r.stderr)


def ssh_text(host: HostConn, command: str) -> str:
    """How the report names a command run on the box."""
    return f"ssh {host.ssh_user}@{host.address} {shlex.quote(command)}"


# ---------------------------------------------------------------------------------------------------- read_box

def _unit_command(service: str, unit: str) -> str:
    u = shlex.quote(unit)
    props = "; ".join(f'echo "{p}=$(systemctl show -P {p} {u})"' for p in UNIT_PROPERTIES)
    return (f"echo {shlex.quote(MARK + 'service ' + service)}; {props}; "
            f"s=$(systemctl show -P ExecMainStartTimestamp {u}); "
            f'[ -n "$s" ] && echo "start_epoch=$(date -d "$s" +%s.%N)"; '
            f"inv=$(systemctl show -P InvocationID {u}); echo {shlex.quote(MARK + 'journal')}; "
            f'[ -n "$inv" ] && journalctl --no-pager -o short-unix _SYSTEMD_INVOCATION_ID="$inv" '
            f"| grep -E {shlex.quote(JOURNAL_LINES)} | tail -n 60; "
            f"echo {shlex.quote(MARK + 'boot')}; journalctl --no-pager -o short-unix -b -u {u} "
            f"| grep -E {shlex.quote(ADMISSION_LINES)} | tail -n 5;")


def facts_command(units: dict[str, str], home: str) -> str:
    """The one shell command behind read_box."""
    parts = [_unit_command(service, unit) for service, unit in units.items()]
    parts.append(f"echo {shlex.quote(MARK + 'meminfo')}; grep -E '^(MemTotal|MemAvailable):' /proc/meminfo;")
    scripts = " ".join(SCRIPTS)
    parts.append(f"echo {shlex.quote(MARK + 'scripts')}; for f in {scripts}; do "
                 f"[ -f {shlex.quote(home + '/bin')}/$f ] && echo $f; done; true")
    return " ".join(parts)


def _number(text: str) -> float | None:
    try:
        return None if text.strip() in NO_VALUE else float(text)
    except ValueError:
        return None


def _property(svc: dict, line: str) -> None:
    key, _, value = line.partition("=")
    if key == "ActiveState":
        svc["active"] = value
    elif key == "MemoryCurrent":
        svc["memory_current"] = _number(value)
    elif key == "start_epoch":
        svc["start_epoch"] = _number(value)
    elif key == "InvocationID":
        svc["invocation"] = value


def parse_facts(text: str) -> dict:
    """read_box's answer as {"services": {service: {"active", "memory_current" (bytes or None), "start_epoch",
    "journal": [...], "boot": [...]}}, "meminfo": {"MemAvailable": bytes, ...}, "scripts": [...]}."""
    facts: dict = {"services": {}, "meminfo": {}, "scripts": []}
    svc, part = None, None
    for line in text.splitlines():
        if line.startswith(MARK + "service "):
            svc, part = {"journal": [], "boot": []}, "unit"
            facts["services"][line[len(MARK) + 8:].strip()] = svc
        elif line.startswith(MARK):
            part = line[len(MARK):].strip()
        elif part in ("journal", "boot") and svc is not None:
            svc[part].append(line)
        elif part == "unit" and svc is not None:
            _property(svc, line)
        elif part == "meminfo" and ":" in line:
            key, value = line.split(":", 1)
            facts["meminfo"][key] = int(value.split()[0]) * 1024  # kB
        elif part == "scripts" and line.strip():
            facts["scripts"].append(line.strip())
    return facts


def read_box(shell: Shell, host: HostConn, cfg: GroupData, units: dict[str, str]) -> dict:
    """The box's facts (parse_facts), with "error" set when the box did not answer."""
    r = shell.run(host, facts_command(units, cfg.SPARKCTL_HOME), cfg.REHEARSE_SSH_TIMEOUT_S)
    if r.rc != 0:
        error = (r.err.strip().splitlines() or [f"ssh exited {r.rc}"])[-1]
        return {"services": {}, "meminfo": {}, "scripts": [], "error": error}
    return {**parse_facts(r.out), "error": None}


# ---------------------------------------------------------------------------------------------------- box scripts

def _guarded(cfg: GroupData, script: str, run: str) -> str:
    """`run`, or ABSENT when the script is not installed under SPARKCTL_HOME/bin."""
    path = f"{box_paths.bin_dir(cfg.SPARKCTL_HOME)}/{script}"
    return f"[ -f {shlex.quote(path)} ] || {{ echo {ABSENT}; exit 0; }}; {run}"


def _script_command(cfg: GroupData, script: str, args: list[str], env: dict | None = None) -> str:
    path = f"{box_paths.bin_dir(cfg.SPARKCTL_HOME)}/{script}"
    prefix = "env " + " ".join(f"{k}={shlex.quote(str(v))}" for k, v in sorted((env or {}).items())) + " " \
        if env else ""
    return _guarded(cfg, script, f"{prefix}{shlex.quote(vllm_venv(cfg) + '/bin/python')} {shlex.quote(path)} "
                                 f"{shlex.join(args)}".strip())


def _last_json(text: str) -> dict | None:
    """The last line of a script's output that is a JSON object."""
    for line in reversed(text.strip().splitlines()):
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if isinstance(doc, dict):
            return doc
    return None


def _script_result(host: HostConn, command: str, r: Result) -> dict:
    if r.out.strip() == ABSENT:
        return {"installed": False, "command": ssh_text(host, command)}
    doc = _last_json(r.out)
    lines = [ln for ln in (r.out + "\n" + r.err).splitlines() if ln.strip()]
    last = ((r.err.strip() or r.out.strip()) if r.rc != 0 else r.out.strip()).splitlines()[-1:]
    summary = (doc or {}).get("summary") or (doc or {}).get("error") or (last[0] if last else "")
    return {"installed": True, "rc": r.rc, "output": doc, "summary": str(summary)[:300], "lines": lines[-20:],
            "command": ssh_text(host, command)}


def device_command(cfg: GroupData, settings=None) -> str:
    """The device check as the deploy runs it (sparkctl/render/device_check.py: systemd-run in the coder unit's
    sandbox) when the box's derived settings (sparkctl.config.settings.Settings) could be built; the script with its
    arguments alone when they could not (a lock not refreshed)."""
    if settings is None:
        return _script_command(cfg, "device_check.py", render_check.check_args(cfg))
    argv = render_check.argv(settings.coder, cfg, vllm_venv(cfg), box_paths.bin_dir(cfg.SPARKCTL_HOME))
    return _guarded(cfg, "device_check.py", shlex.join(argv))


def device_check(shell: Shell, host: HostConn, cfg: GroupData, settings=None) -> dict:
    """The box-side device check's result: {"installed", "rc", "output" (its JSON, if it printed one), "summary"
    (its last line), "lines" (its last 20), "command"}."""
    command = device_command(cfg, settings)
    return _script_result(host, command, shell.run(host, command, cfg.REHEARSE_DEVICE_CHECK_TIMEOUT_S))


def link_settings(cfg: GroupData) -> dict:
    """The link probe's settings: what it moves and how (LINK_PROBE_*), and the floor it is judged against."""
    return {"LINK_PROBE_BYTES": cfg.LINK_PROBE_BYTES, "LINK_PROBE_ITERS": cfg.LINK_PROBE_ITERS,
            "LINK_PROBE_BACKEND": cfg.LINK_PROBE_BACKEND, "LINK_MIN_BUSBW_GBPS": cfg.LINK_MIN_BUSBW_GBPS}


def link_commands(cfg: GroupData, pair: tuple[str, ...], probe: dict) -> list[str]:
    """The link probe on each box of the pair (head first, rank 0), with the pair's NCCL/Gloo environment (the
    coder's topology environment, topology.distributed_env); probe: link_settings(cfg)."""
    head = pair[0]
    master = topology.cx7_address(cfg, head)
    out = []
    for rank, box in enumerate(pair):
        env = {k: v for k, v in topology.distributed_env(cfg, box, head).items() if not k.startswith("RAY_")}
        args = ["--rank", str(rank), "--world", "2", "--master", master, "--port", str(cfg.REHEARSE_LINK_PORT),
                "--bytes", str(probe["LINK_PROBE_BYTES"]), "--iters", str(probe["LINK_PROBE_ITERS"]),
                "--backend", probe["LINK_PROBE_BACKEND"]]
        out.append(_script_command(cfg, "link_probe.py", args, env))
    return out


def link_pair(shell: Shell, boxes: list[HostConn], cfg: GroupData, probe: dict) -> dict[str, dict]:
    """Both ranks at once (each waits for the other at the rendezvous); per box its result and busbw_gbps."""
    commands = link_commands(cfg, tuple(h.name for h in boxes), probe)
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda hc: shell.run(hc[0], hc[1], cfg.REHEARSE_LINK_TIMEOUT_S),
                                zip(boxes, commands)))
    out = {}
    for host, command, r in zip(boxes, commands, results):
        result = _script_result(host, command, r)
        busbw = (result.get("output") or {}).get("busbw_gbps")
        result["busbw_gbps"] = float(busbw) if isinstance(busbw, (int, float)) else None
        out[host.name] = result
    return out
