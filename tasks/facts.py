"""Custom pyinfra facts for the GX10 deploy (read-only commands; never change the host)."""

from __future__ import annotations

import json
import posixpath
import shlex

from pyinfra.api import FactBase
from pyinfra.api.command import QuoteString, StringCommand


class GpuInfo(FactBase):
    """`nvidia-smi` query of the first GPU: {"name", "compute_cap", "driver_version"}; None when not installed.

    Memory fields are [N/A] on GB10 (unified memory), so memory comes from /proc/meminfo instead.
    """

    def requires_command(self):
        return "nvidia-smi"

    def command(self):
        return "nvidia-smi --query-gpu=name,compute_cap,driver_version --format=csv,noheader 2>&1 || true"

    def default(self):
        return None

    def process(self, output):
        line = next((x for x in output if x.strip()), "")
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            return {"error": line.strip()}
        return {"name": parts[0], "compute_cap": parts[1], "driver_version": parts[2]}


class DeviceGroups(FactBase):
    """The device groups /proc/devices lists (what DeviceAllow=char-NAME and block-NAME match), read after the GPU's
    preparation ran as root (`prepare`: VLLM_DEVICE_PREPARE, what sparkctl-devices.service runs before the vLLM units
    at every boot; like nvidia-smi for GpuInfo, they load a driver module this box has and create its nodes, nothing
    else), and each preparation program this box lacks: {"char": [names], "block": [names], "missing": [programs]}."""

    def command(self, prepare):
        steps = []
        for cmd in prepare:  # the schema holds each to an absolute program and plain arguments
            exe, words = cmd.split()[0], " ".join(shlex.quote(w) for w in cmd.split())
            steps.append(f"if [ -x {shlex.quote(exe)} ]; then {words} >/dev/null 2>&1; "
                         f"else echo {shlex.quote('MISSING ' + exe)}; fi;")
        return " ".join([*steps, "awk '/^Character devices:/ {s=\"C\"; next} /^Block devices:/ {s=\"B\"; next}",
                         "s && NF == 2 {print s, $2}' /proc/devices"])

    def default(self):
        return None

    def process(self, output):
        out = {"char": [], "block": [], "missing": []}
        for line in output:
            kind, _, name = line.strip().partition(" ")
            key = {"C": "char", "B": "block", "MISSING": "missing"}.get(kind)
            if key and name:
                out[key].append(name)
        return out


class DiskAvailable(FactBase):
    """Bytes free on the filesystem that holds `path` (or its nearest existing parent)."""

    def command(self, path):
        return StringCommand("p=", QuoteString(path), "; while [ ! -e \"$p\" ]; do p=$(dirname \"$p\"); done;",
                             "df -B1 --output=avail \"$p\" | tail -n 1", separator="")

    def process(self, output):
        return int(output[-1].strip())


class Sha256Sums(FactBase):
    """The sha256 of every wheel in `path` ({file name: hex}; {} when the directory is absent): what a partial copy
    of the wheelhouse already holds (tasks/vllm.py resumes with the rest)."""

    def command(self, path):
        return StringCommand("[ -d", QuoteString(path), "] && cd", QuoteString(path),
                             "&& find . -maxdepth 1 -name '*.whl' -type f -exec sha256sum {} + || true")

    def default(self):
        return {}

    def process(self, output):
        sums = {}
        for line in output:
            digest, _, name = line.strip().partition("  ")
            if name:
                sums[posixpath.basename(name)] = digest
        return sums


class DistVersion(FactBase):
    """Installed version of a Python distribution in a venv (None when the venv or the distribution is absent)."""

    def command(self, python, dist):
        code = f"import importlib.metadata as m; print(m.version({dist!r}))"
        return StringCommand("[ -x", QuoteString(python), "] &&", QuoteString(python), "-c", QuoteString(code),
                             "2>/dev/null || true")

    def default(self):
        return None

    def process(self, output):
        return output[-1].strip() if output else None


class BoxScriptStatus(FactBase):
    """The one JSON object a box script's `status` prints, in ONE call ({} before the script exists): rollout.py's
    (RolloutStatus), retire_services.py's (the marker of a retired box, each unit's state, the services a rollout
    owns). No venv python is spawned."""

    def command(self, script, args, env_prefix=""):
        # the variables must prefix python3 itself, not the `[` test before it
        return StringCommand("[ -f", QuoteString(script), "] &&", env_prefix, "python3", QuoteString(script), "status",
                             *[QuoteString(a) for a in args], "2>/dev/null || true")

    def default(self):
        return {}

    def process(self, output):
        try:
            return json.loads(output[-1])
        except (ValueError, IndexError):
            return {}


class RolloutStatus(BoxScriptStatus):
    """What rollout.py says about every service of the box: {service: {active, applied, wanted, running, phase,
    failed, last}}."""

    def command(self, script, services, env_prefix=""):
        return super().command(script, services, env_prefix)


class VenvsInUse(FactBase):
    """{"venvs": names under root, newest first, "used": ExecStart binaries of the unit files matching the globs}."""

    def command(self, root, unit_globs):
        # each glob's directory quoted, its file pattern left for the shell to expand
        globs = [f"{shlex.quote(posixpath.dirname(g))}/{posixpath.basename(g)}" for g in unit_globs]
        return StringCommand("ls -1t", QuoteString(root), "2>/dev/null | sed 's/^/V /';",
                             "grep -ho '^ExecStart=[^ ]*'", *globs, "2>/dev/null | sed 's/^ExecStart=/U /'; true")

    def default(self):
        return {"venvs": [], "used": []}

    def process(self, output):
        return {"venvs": [x[2:] for x in output if x.startswith("V ")],
                "used": [x[2:] for x in output if x.startswith("U ")]}


class ListenerReady(FactBase):
    """Whether http://127.0.0.1:PORT/v1/models answers and lists `served` (one quick try of `timeout` s, no waiting)."""

    def command(self, port, served, timeout):
        return StringCommand("curl -fsS --max-time", str(float(timeout)),  # curl takes fractions; int(0.5) is 0: none
                             QuoteString(f"http://127.0.0.1:{port}/v1/models"), "2>/dev/null || true")

    def default(self):
        return None

    def process(self, output):
        try:
            return [m.get("id") for m in json.loads("".join(output)).get("data", [])]
        except ValueError:
            return None


class JournalText(FactBase):
    """The last N journal lines of a unit (used for failure reports and vLLM's KV capacity lines)."""

    def command(self, unit, lines=40, grep=""):
        cmd = ["journalctl -u", QuoteString(unit), "-n", str(int(lines)), "--no-pager", "-o cat"]
        if grep:
            cmd = ["journalctl -u", QuoteString(unit), "--no-pager -o cat | grep -E", QuoteString(grep),
                   "| tail -n", str(int(lines))]
        return StringCommand(*cmd, "2>/dev/null || true")

    def default(self):
        return ""

    def process(self, output):
        return "\n".join(output)


class UnitProperties(FactBase):
    """A few `systemctl show` properties of a unit (MainPID, ActiveState, ActiveEnterTimestampMonotonic...)."""

    def command(self, unit):
        return StringCommand("systemctl show", QuoteString(unit),
                             "-p MainPID -p ActiveState -p SubState -p NRestarts -p InvocationID 2>/dev/null || true")

    def default(self):
        return {}

    def process(self, output):
        return dict(line.split("=", 1) for line in output if "=" in line)


class LoadSeconds(FactBase):
    """Seconds from the unit's current start to vLLM's "Application startup complete." (None if not found)."""

    def command(self, unit):
        u = QuoteString(unit)
        return StringCommand(
            "s=$(systemctl show -P ExecMainStartTimestamp", u, "); i=$(systemctl show -P InvocationID", u, ");",
            "[ -n \"$s\" ] && [ -n \"$i\" ] && echo $(date -d \"$s\" +%s.%N)",
            "$(journalctl _SYSTEMD_INVOCATION_ID=$i -o short-unix --no-pager 2>/dev/null",
            "| awk '/Application startup complete/ {print $1; exit}') || true")

    def default(self):
        return None

    def process(self, output):
        parts = " ".join(output).split()
        if len(parts) < 2:
            return None
        return round(float(parts[1]) - float(parts[0]), 1)


CAP_SYS_RESOURCE = 24  # linux/capability.h: needed to lower an oom_score_adj


class RunningOomGuard(FactBase):
    """What the running daemon of a unit has now (not what its unit file says): its main process id and that
    process's oom_score_adj, the unit cgroup's memory.min in bytes (None where the cgroup has no memory
    controller, e.g. a simulated Spark's), and whether root here may lower an OOM score at all (CAP_SYS_RESOURCE
    in the effective set; a container without it cannot, and systemd then ignores OOMScoreAdjust= too)."""

    def command(self, unit):
        u = QuoteString(unit)
        return StringCommand("s=$(systemctl show -P MainPID", u, "2>/dev/null); cg=$(systemctl show -P ControlGroup",
                             u, '2>/dev/null); echo "pid=${s:-0}";',
                             '[ "${s:-0}" -gt 0 ] 2>/dev/null && echo "adj=$(cat /proc/$s/oom_score_adj 2>/dev/null)";',
                             'f="/sys/fs/cgroup$cg/memory.min"; [ -n "$cg" ] && [ -f "$f" ] && echo "min=$(cat "$f")";',
                             "echo \"caps=$(awk '/^CapEff:/ {print $2}' /proc/self/status)\";", "true")

    def default(self):
        return {"pid": 0, "adj": None, "memory_min": None, "can_lower": True}

    def process(self, output):
        out = self.default()
        for line in output:
            key, _, value = line.strip().partition("=")
            try:
                if key == "caps":
                    out["can_lower"] = bool(int(value, 16) >> CAP_SYS_RESOURCE & 1)
                elif key in ("pid", "adj"):
                    out[key] = int(value)
                elif key == "min":
                    out["memory_min"] = None if value == "max" else int(value)
            except ValueError:
                continue
        return out


class MemTotal(FactBase):
    """Bytes of memory the kernel manages (/proc/meminfo MemTotal; on GB10's unified memory, what CUDA sees too);
    None when it cannot be read."""

    def command(self):
        return "awk '/^MemTotal:/ {print $2}' /proc/meminfo"

    def default(self):
        return None

    def process(self, output):
        try:
            return int(output[-1].strip()) * 1024  # kB
        except (ValueError, IndexError):
            return None


NOLOGIN_SHELLS = ("/usr/sbin/nologin", "/sbin/nologin", "/bin/false", "/usr/bin/false")
LOGIN_UID_RANGE = (1000, 60000)  # /etc/login.defs UID_MIN, UID_MAX on Debian/Ubuntu when the file says nothing


class SystemUser(FactBase):
    """A user's passwd entry on the box ({"uid", "shell", "home"}, None when there is none) and the box's login
    uid range (/etc/login.defs): {"entry": ..., "uid_min": ..., "uid_max": ...}."""

    def command(self, user):
        defs = "awk '/^UID_(MIN|MAX)[[:space:]]/ {print \"D \" $1 \"=\" $2}' /etc/login.defs 2>/dev/null;"
        return StringCommand("getent passwd", QuoteString(user), "| sed 's/^/P /';", defs, "true")

    def default(self):
        return {"entry": None, "uid_min": LOGIN_UID_RANGE[0], "uid_max": LOGIN_UID_RANGE[1]}

    def process(self, output):
        out = self.default()
        for line in output:
            kind, _, rest = line.strip().partition(" ")
            if kind == "P" and len(rest.split(":")) >= 7:
                fields = rest.split(":")
                out["entry"] = {"uid": int(fields[2]) if fields[2].isdigit() else -1, "home": fields[5],
                                "shell": fields[6]}
            elif kind == "D" and rest.partition("=")[2].isdigit():
                key, _, value = rest.partition("=")
                out["uid_min" if key == "UID_MIN" else "uid_max"] = int(value)
        return out


class PlannedHolds(FactBase):
    """What each vLLM service installed on the box holds now by the plan its live env file was rendered with:
    {service: {"gib": SPARKCTL_PLANNED_GIB (None: a file from before the deploy wrote it), "state": its unit's
    ActiveState}}; {} on a box with none (a first install)."""

    def command(self, env_dir):
        d = shlex.quote(env_dir)
        return StringCommand(f'for f in {d}/vllm-*.env; do [ -e "$f" ] || continue; n=${{f##*/vllm-}}; n=${{n%.env}}; '
                             "g=$(sed -n 's/^SPARKCTL_PLANNED_GIB=//p' \"$f\"); "
                             'echo "HOLDS $n ${g:--} $(systemctl show -P ActiveState "vllm-$n.service")"; done; true')

    def default(self):
        return {}

    def process(self, output):
        out = {}
        for line in output:
            words = line.split()
            if len(words) == 4 and words[0] == "HOLDS":
                try:
                    gib = None if words[2] == "-" else float(words[2])
                except ValueError:
                    gib = None
                out[words[1]] = {"gib": gib, "state": words[3]}
        return out

def account_problems(setting: str, user: str, fact: dict | None) -> list[str]:
    """An account the deploy creates (SERVICE_USER, ROUTER_USER: the schema's DedicatedUser) is its own: an existing
    account that logs in, or whose uid is in the login range, would lose its shell and home to the deploy. fact: the
    host's SystemUser fact of `user`."""
    entry = (fact or {}).get("entry")
    if not entry:
        return []
    if entry["shell"] not in NOLOGIN_SHELLS:
        return [f"{setting} = {user!r} is an account on this box with the login shell {entry['shell']} (home "
                f"{entry['home']}): the deploy would make it a nologin user. Choose a user of the deploy's own"]
    if fact["uid_min"] <= entry["uid"] <= fact["uid_max"]:
        return [f"{setting} = {user!r} is an account on this box with uid {entry['uid']}, in the login range "
                f"{fact['uid_min']}-{fact['uid_max']} (/etc/login.defs): not a system user the deploy made"]
    return []
