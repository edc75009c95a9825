#!/usr/bin/env python3
"""On the box (uploaded by `pyinfra inventory.py retire.py`, run as root, stdlib only): take the box out of service
in one run that systemd owns (the transient unit contract.RETIRE_UNIT), so the control machine's connection can drop
at any instant without changing the outcome.

    retire_services.py status <what>   -> ONE JSON object: the marker of a retired box (or null), each unit's
                                          state, the services a rollout owns now, whether a retire runs (--stale:
                                          also "stale", each stale service's files)
    retire_services.py apply <what> <limits>
                                       -> starts `retire_services.py run` as the transient unit, or attaches to the one
                                          running; prints {"txn": ID, "attached": bool} and returns at once
    retire_services.py follow [--stale] --txn ID [--offset N]
                                       -> the log from byte N, then a line "@@ {offset, running, done, result}"
    retire_services.py run --txn ID <what> <limits>
                                       -> the retire itself, as apply starts it
<what>: --serve SERVED=PORT per served model, --service NAME per vLLM service (a tensor-parallel worker's too),
--unit UNIT for other units that stop with them (Ray), --quiet UNIT for what would restart or judge them (the
watchdog); or --stale with --keep NAME per service the box is configured to run (below). <limits>: --unready-wait
(ROUTER_OUT_WAIT_S), --drain-timeout (DRAIN_TIMEOUT_S), --retry-after (DRAIN_RETRY_AFTER_S), --interval
(HEALTH_POLL_INTERVAL_S), --textfile-dir (TEXTFILE_DIR).

The run, in order: the --quiet units stop and are disabled (nothing restarts or judges the services meanwhile);
every served model fails its router health path (drain.unready_on) and, when one of them served, the run
waits --unready-wait s so the gateway's routers take the box out while its API still serves; every served model
drains (503 + Retry-After) and the run waits for vLLM's running + waiting requests to reach 0, up to
--drain-timeout s; the services' units, then the --unit ones, stop and are disabled; the marker
(contract.retired_marker) and the textfile contract.RETIRED_TEXTFILE (sparkctl_box_retired 1: the alert rules hold
back SparkServedModelDown for this box) record it. The drain and unready files stay (the routers keep the box out, a
client sent straight to it gets 503 + Retry-After); checkpoints, venvs, unit files and nginx stay, so a deploy brings
the box back (its rollouts lift both files and restart the committed configuration, its monitoring step starts the
watchdog and removes the marker and the textfile).

Refused, nothing touched, while a rollout or a restart of one of the services runs or is open (it owns the service).
A retired box (marker there, every unit stopped and disabled) is left as it is: outcome already-retired.

--stale (the deploy's step tasks/stale.py, its own transient unit contract.STALE_UNIT, files in contract.stale_dir):
the services go, not the box. The box's own files name them: every vLLM service with a live or staged unit or env
file (contract.Paths) that no --keep names (the host's configured services); what each served, and on which port,
comes from its live env file. They leave the routers, drain and stop as above, are disabled, and then their unit
and env files (live and staged), stamp and last result are removed (daemon-reload). The --quiet units (the
watchdog: its configuration names them until the deploy's monitoring step renders it again) are paused, not
disabled, and started again at the end. No marker, no textfile; everything else the box runs is untouched.
Outcomes: removed, nothing-stale (nothing changed), retire-refused (a rollout owns one), retire-failed.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import contract as c  # noqa: E402
import drain  # noqa: E402
import readiness_gate as gate  # noqa: E402
from boxio import Say, read, read_json, write_atomic, write_json  # noqa: E402

STATE_DIR = os.environ.get("SPARKCTL_STATE_DIR", "/var/lib/sparkctl")
DRAIN_DIR = os.environ.get("SPARKCTL_DRAIN_DIR", "/etc/nginx/sparkctl-drain")
ENV_DIR = os.environ.get("SPARKCTL_ENV_DIR", "/etc/sparkctl")
UNIT_DIR = os.environ.get("SPARKCTL_UNIT_DIR", c.UNIT_DIR)
STOPPED = ("inactive", "failed")  # ActiveStates of a unit that runs nothing
NO_RESULT_GRACE_S = 10  # follow: once the unit is gone, how long the result file may take to appear, s


def files(stale: bool = False) -> dict[str, str]:
    """The run's files and transient unit: the whole box's retire, or (stale) the removal of stale services."""
    base = c.stale_dir(STATE_DIR) if stale else c.retire_dir(STATE_DIR)
    return {"dir": base, "current": f"{base}/current", "log": f"{base}/retire.log", "result": f"{base}/result.json",
            "marker": c.retired_marker(STATE_DIR), "unit": c.STALE_UNIT if stale else c.RETIRE_UNIT}


def served_port(text: str) -> tuple[str, int]:
    served, _, port = text.partition("=")
    if not served or not port.isdigit():
        raise argparse.ArgumentTypeError(f"{text!r} is not SERVED=PORT")
    return served, int(port)


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="retire_services.py", description=__doc__.splitlines()[0])
    sub = top.add_subparsers(dest="cmd", required=True)
    for name in ("status", "apply", "run"):
        p = sub.add_parser(name)
        p.add_argument("--serve", type=served_port, action="append", default=[], help="SERVED=PORT, each served model")
        p.add_argument("--service", action="append", default=[], help="a vLLM service (its unit vllm-NAME.service)")
        p.add_argument("--unit", action="append", default=[], help="another unit that stops with the services")
        p.add_argument("--quiet", action="append", default=[], help="a unit that would restart or judge them")
        p.add_argument("--stale", action="store_true", help="only the services installed here that no --keep names")
        p.add_argument("--keep", action="append", default=[], help="--stale: a service this box is configured to run")
        if name == "status":
            continue
        for flag, kind in (("--unready-wait", float), ("--drain-timeout", float), ("--retry-after", int),
                           ("--interval", float), ("--textfile-dir", str)):
            p.add_argument(flag, type=kind, required=True)
        if name == "run":
            p.add_argument("--txn", required=True)
    p = sub.add_parser("follow")
    p.add_argument("--stale", action="store_true", help="follow the removal of stale services")
    p.add_argument("--txn", required=True)
    p.add_argument("--offset", type=int, default=0)
    return top


def units_of(a) -> list[str]:
    """Every unit the retire stops, in the order it stops them."""
    return [*a.quiet, *(c.unit_of(s) for s in a.service), *a.unit]


def unit_states(units: list[str]) -> dict[str, dict]:
    """{unit: {"active": runs, "enabled": starts at boot}} in ONE systemctl call."""
    if not units:
        return {}
    out = gate.systemctl("show", "-p", "Id", "-p", "ActiveState", "-p", "UnitFileState", *units).stdout
    found = {}
    for block in out.split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if props.get("Id"):
            found[props["Id"]] = props
    return {u: {"active": found.get(u, {}).get("ActiveState", "inactive") not in STOPPED,
                "enabled": found.get(u, {}).get("UnitFileState", "") in ("enabled", "enabled-runtime")}
            for u in units}


def owned(services: list[str]) -> list[str]:
    """The services a rollout or restart owns now: its transient unit runs, or its transaction is open."""
    if not services:
        return []
    units = gate.show(*[c.rollout_unit(s) for s in services])
    rollout = c.rollout_dir(STATE_DIR)
    return [s for s in services if units[c.rollout_unit(s)].get("ActiveState") in c.UNIT_RUNNING
            or read_json(c.Paths(s, "", rollout).state).get("phase")]


def retire_running(stale: bool = False) -> bool:
    return gate.unit_state(files(stale)["unit"]).get("ActiveState") in c.UNIT_RUNNING


def stale_files(keep: list[str]) -> dict[str, list[str]]:
    """{service: its files}: every vLLM service with a live or staged unit or env file here (contract.Paths' globs)
    that `keep` does not name."""
    every = c.Paths("*", ENV_DIR, c.rollout_dir(STATE_DIR), UNIT_DIR)
    found: dict[str, list[str]] = {}
    for pattern in (every.unit, every.env, every.unit_next, every.env_next):
        for path in sorted(glob.glob(pattern)):
            name = c.service_of(path, pattern)
            if name not in keep:
                found.setdefault(name, []).append(path)
    return found


def served_by(env_path: str) -> tuple[str, int] | None:
    """(served name, port) of a live env file's vLLM (None: no env file, or a headless worker's engine)."""
    args = c.vllm_args_of(read(env_path))
    flags = {k: v for k, v in zip(args, args[1:]) if k in ("--served-model-name", "--port")}
    if "--headless" in args or len(flags) < 2 or not flags["--port"].isdigit():
        return None
    return flags["--served-model-name"], int(flags["--port"])


def resolve_stale(a) -> dict[str, list[str]]:
    """--stale: the box's own files name what goes (a.service) and what it served (a.serve), not the caller. A
    served name a kept service serves now is not drained (that service keeps it)."""
    found = stale_files(a.keep)
    kept = {s[0] for s in (served_by(c.Paths(k, ENV_DIR, "").env) for k in a.keep) if s}
    a.service = sorted(found)
    a.serve = [s for s in (served_by(c.Paths(n, ENV_DIR, "").env) for n in a.service) if s and s[0] not in kept]
    return found


def status(a) -> int:
    f = files(a.stale)
    stale = resolve_stale(a) if a.stale else None
    print(json.dumps({"retired": read_json(f["marker"]) or None, "units": unit_states(units_of(a)),
                      "owned": owned(a.service), "running": retire_running(a.stale),
                      **({"stale": stale} if a.stale else {})}))
    return 0


def already_retired(marker: dict, states: dict[str, dict]) -> bool:
    """Retired before, and nothing of it undone since: no unit runs or starts at boot."""
    return bool(marker) and not any(s["active"] or s["enabled"] for s in states.values())


def forward(a) -> list[str]:
    """apply's arguments as `run` takes them again (the transient unit's command line)."""
    out = [x for served, port in a.serve for x in ("--serve", f"{served}={port}")]
    out += [x for flag in ("service", "unit", "quiet", "keep") for v in getattr(a, flag) for x in (f"--{flag}", v)]
    out += ["--stale"] if a.stale else []
    for flag in ("unready_wait", "drain_timeout", "retry_after", "interval", "textfile_dir"):
        out += ["--" + flag.replace("_", "-"), str(getattr(a, flag))]
    return out


def new_txn_id(stale: bool = False) -> str:
    return f"{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{os.getpid()}-{'stale' if stale else 'retire'}"


def apply(a) -> int:
    """Start the run in the transient unit (systemd-run --collect), or attach to the one running."""
    f = files(a.stale)
    what = "removal of services this box no longer runs" if a.stale else "retire of this box"
    if retire_running(a.stale):
        print(json.dumps({"txn": read(f["current"]).decode().strip(), "attached": True}))
        return 0
    txn = new_txn_id(a.stale)
    os.makedirs(f["dir"], mode=0o755, exist_ok=True)
    write_atomic(f["current"], f"{txn}\n", 0o644)
    write_atomic(f["log"], f"retire {txn}\n", 0o640)
    setenv = [f"--setenv={k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("SPARKCTL_")]
    argv = ["run", "--txn", txn, *forward(a)]
    r = gate.run("systemd-run", f"--unit={f['unit']}", "--collect", "--quiet", "--service-type=exec",
                 f"--description=sparkctl {what} ({txn})", *setenv, sys.executable, os.path.abspath(__file__), *argv)
    if r.returncode != 0:
        if retire_running(a.stale):  # another control machine won the race
            print(json.dumps({"txn": read(f["current"]).decode().strip(), "attached": True}))
            return 0
        print(f"retire: systemd-run could not start {f['unit']}: {r.stderr.strip()}", file=sys.stderr)
        return c.RETIRE_CODES[c.RETIRE_FAILED]
    print(json.dumps({"txn": txn, "attached": False}))
    return 0


def follow(a) -> int:
    f = files(a.stale)
    data = read(f["log"])
    offset = a.offset if a.offset <= len(data) else 0
    result = read_json(f["result"])
    done = result.get("txn") == a.txn
    sys.stdout.write(data[offset:].decode("utf-8", "replace"))
    print("@@ " + json.dumps({"offset": len(data), "running": retire_running(a.stale), "done": done,
                              "result": result if done else None}))
    return 0


def stop_units(units: list[str], say) -> list[str]:
    """Stop and disable each unit (systemctl disable --now); returns the ones still running or enabled after."""
    for unit in units:
        r = gate.systemctl("disable", "--now", unit)
        if r.returncode != 0:
            say(f"{unit}: systemctl disable --now: {(r.stderr or r.stdout).strip()}")
    states = unit_states(units)
    return [u for u in units if states[u]["active"] or states[u]["enabled"]]


def leave_routers(a, states: dict[str, dict], say) -> bool:
    """Fail every served model's router health path (its API still serves); when one of them served, wait for the
    routers' health window. Returns whether one served (a vLLM unit of this box ran)."""
    for i, (served, _port) in enumerate(a.serve):  # one nginx reload takes them all in
        reloaded, err = drain.unready_on(DRAIN_DIR, served, reload=i == len(a.serve) - 1)
        if not reloaded:
            say(f"leaving the routers: nginx did not reload ({err}); going on")
    serving = any(states.get(c.unit_of(s), {}).get("active") for s in a.service)
    if a.serve and serving and a.unready_wait > 0:
        say(f"{', '.join(s for s, _ in a.serve)} fail their router health path; waiting {a.unready_wait:g} s "
            f"(ROUTER_OUT_WAIT_S) for the routers to take this box out before draining")
        time.sleep(a.unready_wait)
    return serving


def drain_all(a, serving: bool, say, why: str = "the box's retirement") -> dict[str, dict]:
    """Close every served model to new requests, then wait for each one's requests in flight (they drain at once,
    so the waits overlap). Returns {served: {"idle", "waited_s", "busy"}}."""
    for served, _port in a.serve:
        reloaded, err = drain.drain_on(DRAIN_DIR, served, a.retry_after, why=why)
        if not reloaded:
            say(f"draining {served!r}: nginx did not reload ({err}); waiting for running requests anyway")
    out, start = {}, time.monotonic()
    if not serving or a.drain_timeout <= 0:  # nothing ran, or no drain asked for (DRAIN_TIMEOUT_S = 0)
        return {served: {"idle": not serving, "waited_s": 0.0, "busy": 0.0} for served, _ in a.serve}
    for served, port in a.serve:
        left = max(0.0, a.drain_timeout - (time.monotonic() - start))
        idle, _waited, busy = drain.wait_idle(port, left, a.interval, say)
        out[served] = {"idle": idle, "waited_s": round(time.monotonic() - start, 1), "busy": busy}
        say(f"{served!r}: drained, 0 in flight after {out[served]['waited_s']:.1f} s" if idle else
            f"{served!r}: drain timeout ({a.drain_timeout:g} s, DRAIN_TIMEOUT_S): {busy:.0f} request(s) still "
            f"running are cut")
    return out


def write_retired(a, txn: str, drained: dict) -> None:
    from textfile import TEXTFILE_MODE, Exposition  # only here: the deploy's --stale runs upload no textfile.py

    write_json(files()["marker"], {"txn": txn, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                   "served": [s for s, _ in a.serve], "units": units_of(a), "drained": drained},
               0o644)
    exp = Exposition()
    exp.add("sparkctl_box_retired", "gauge", "1: this box was retired (retire.py): its served models are stopped on "
            "purpose", 1)
    os.makedirs(a.textfile_dir, mode=0o755, exist_ok=True)
    write_atomic(os.path.join(a.textfile_dir, c.RETIRED_TEXTFILE), exp.text(), TEXTFILE_MODE)


def summary(a, drained: dict, done: str = "stopped and disabled") -> str:
    """One line: "out of the routers, drained (0 in flight after 3.2 s), coder+embed stopped and disabled"."""
    parts = []
    if a.serve:
        waited = max((d["waited_s"] for d in drained.values()), default=0.0)
        cut = sum(d["busy"] for d in drained.values() if not d["idle"])
        parts.append("out of the routers")
        if all(d["idle"] for d in drained.values()):
            parts.append(f"drained (0 in flight after {waited:.1f} s)")
        elif a.drain_timeout <= 0:
            parts.append("not drained (DRAIN_TIMEOUT_S is 0: requests in flight were cut)")
        else:
            parts.append(f"not drained: {cut:.0f} request(s) cut at DRAIN_TIMEOUT_S ({a.drain_timeout:g} s)")
    what = "+".join([*a.service, *a.unit]) or "nothing of vLLM"
    parts.append(f"{what} {done}" + (f" ({', '.join(a.quiet)} too)" if a.quiet and not a.stale else ""))
    return ", ".join(parts)


def finish(txn: str, outcome: str, message: str, say, stale: bool = False, **extra) -> int:
    rc = c.RETIRE_CODES[outcome]
    write_json(files(stale)["result"], {"txn": txn, "outcome": outcome, "rc": rc, "message": message,
                                   "finished": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **extra}, 0o644)
    say(message)
    return rc


def execute(a, say) -> int:
    """The retire (this module's docstring), once the transient unit runs it."""
    states = unit_states(units_of(a))
    if already_retired(read_json(files()["marker"]), states):
        return finish(a.txn, c.ALREADY_RETIRED, "already retired: every unit stopped and disabled; nothing changed",
                      say)
    busy = owned(a.service)
    if busy:
        return finish(a.txn, c.RETIRE_REFUSED, f"not retiring: a rollout or restart owns {', '.join(busy)} now "
                      f"(sparkctl-rollout-<service>); nothing was touched. Let it finish, then retire again", say)
    left = stop_units(a.quiet, say)
    busy = owned(a.service)  # the watchdog may have started a restart just before it stopped
    if busy:
        for unit in a.quiet:
            gate.systemctl("enable", "--now", unit)
        return finish(a.txn, c.RETIRE_REFUSED, f"not retiring: a restart of {', '.join(busy)} began as the retire "
                      f"started; {', '.join(a.quiet)} started again, nothing else was touched. Retire again later",
                      say)
    serving = leave_routers(a, states, say)
    drained = drain_all(a, serving, say)
    left += stop_units([*(c.unit_of(s) for s in a.service), *a.unit], say)
    if left:
        return finish(a.txn, c.RETIRE_FAILED, f"retire: {', '.join(left)} still running or enabled; the box stays "
                      f"out of the routers and drained. See journalctl -u {left[0]}", say, drained=drained)
    write_retired(a, a.txn, drained)
    return finish(a.txn, c.RETIRED, summary(a, drained), say, drained=drained)


def pause(units: list[str]) -> list[str]:
    """Stop those of `units` that run, for the run only (not disabled: a run that dies leaves them to start at boot,
    and the deploy's monitoring step starts them again); returns the ones it stopped."""
    running = [u for u, s in unit_states(units).items() if s["active"]]
    for unit in running:
        gate.systemctl("stop", unit)
    return running


def remove_service_files(services: list[str], say) -> None:
    """Each service's unit and env file (live and staged), its committed stamp and last result, then daemon-reload:
    the venv pruning, `sparkctl status` and the facts textfile stop seeing it, and a deploy that configures it again
    installs it afresh (that rollout lifts the drain and router health files). Its rollout log and the records of
    its failed candidates stay."""
    for service in services:
        p = c.Paths(service, ENV_DIR, c.rollout_dir(STATE_DIR), UNIT_DIR)
        for path in (p.unit, p.env, p.unit_next, p.env_next, p.stamp, p.result):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
    r = gate.systemctl("daemon-reload")
    if r.returncode != 0:
        say(f"systemctl daemon-reload: {(r.stderr or r.stdout).strip()}")


def execute_stale(a, say) -> int:
    """--stale: the vLLM services installed here that no --keep names leave the routers, drain, stop, are disabled
    and removed, as a retire takes a whole box out; the box serves everything else on (no marker, no textfile), and
    the --quiet units (the watchdog, whose configuration still names them) are only paused meanwhile."""
    def done(outcome: str, message: str, **extra) -> int:
        return finish(a.txn, outcome, message, say, stale=True, **extra)

    if not resolve_stale(a):
        return done(c.NOTHING_STALE, "nothing stale: every vLLM service installed here is configured; nothing changed")
    units = [c.unit_of(s) for s in a.service]
    busy = owned(a.service)
    if busy:
        return done(c.RETIRE_REFUSED, f"not removing {', '.join(a.service)} (no longer configured here): a rollout or "
                    f"restart owns {', '.join(busy)} now (sparkctl-rollout-<service>); nothing was touched. Let it "
                    f"finish, then deploy again")
    paused = pause(a.quiet)
    try:
        busy = owned(a.service)  # the watchdog may have started a restart just before it stopped
        if busy:
            return done(c.RETIRE_REFUSED, f"not removing {', '.join(a.service)}: a restart of {', '.join(busy)} "
                        f"began as the run started; nothing else was touched. Deploy again later")
        states = unit_states(units)
        drained = drain_all(a, leave_routers(a, states, say), say, why="its removal from this box")
        left = stop_units([u for u in units if states[u]["active"] or states[u]["enabled"]], say)
        if left:
            return done(c.RETIRE_FAILED, f"stale services: {', '.join(left)} still running or enabled; out of the "
                        f"routers and drained, its files kept. See journalctl -u {left[0]}", drained=drained)
        remove_service_files(a.service, say)
    finally:
        for unit in paused:
            gate.systemctl("start", unit)
    return done(c.REMOVED, f"{summary(a, drained, 'stopped, disabled and removed')} (no longer configured here)",
                services=a.service, served=[s for s, _ in a.serve], drained=drained)


def main(argv: list[str] | None = None) -> int:
    a = parser().parse_args(argv)
    if a.cmd == "run":
        f = files(a.stale)
        os.makedirs(f["dir"], mode=0o755, exist_ok=True)
        return (execute_stale if a.stale else execute)(a, Say(f["log"]))
    return {"status": status, "apply": apply, "follow": follow}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
