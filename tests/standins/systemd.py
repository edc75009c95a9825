#!/usr/bin/env python3
"""Stand-in `systemctl`, `systemd-run` and `journalctl` for the box-side rollout tests (installed on PATH under
those names; argv[0] picks the tool). State lives in $FAKE_SD: units/<unit>.json, calls.log, broken (models that
crash at start), unready (models that start but never answer), slow ("model seconds" lines: models that answer only
that long after their start), logging (models whose journal keeps advancing while they start: "model [seconds]"
lines), kill_on ("verb#n":
SIGKILL the caller on the n-th such call, to interrupt a rollout there).

A vLLM unit "starts" by reading SPARKCTL_MODEL from its env file: a broken model goes to auto-restart, any other
becomes active and is published in serving.json for the stand-in HTTP endpoint the test runs.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid

SD = os.environ["FAKE_SD"]


def load(unit):
    try:
        with open(f"{SD}/units/{unit}.json") as f:
            return json.load(f)
    except FileNotFoundError:
        return {"ActiveState": "inactive", "SubState": "dead", "Result": "success", "NRestarts": 0, "MainPID": 0}


def save(unit, st):
    os.makedirs(f"{SD}/units", exist_ok=True)
    with open(f"{SD}/units/{unit}.json", "w") as f:
        json.dump(st, f)


def note(call):
    with open(f"{SD}/calls.log", "a") as f:
        f.write(call + "\n")
    count = sum(1 for line in open(f"{SD}/calls.log") if line.split()[0] == call.split()[0])
    try:
        kill_on = open(f"{SD}/kill_on").read().strip()
    except FileNotFoundError:
        return
    if kill_on == f"{call.split()[0]}#{count}":
        os.unlink(f"{SD}/kill_on")
        os.kill(os.getppid(), signal.SIGKILL)  # the rollout dies right here, mid-step
        sys.exit(1)


def alive(pid):
    try:
        return bool(pid) and "zombie" not in open(f"/proc/{pid}/status").read()
    except FileNotFoundError:
        return False


def serving(up, model="", ready_at=None):
    with open(f"{SD}/serving.json.tmp", "w") as f:
        json.dump({"up": up, "model": model, **({"ready_at": ready_at} if ready_at else {})}, f)
    os.rename(f"{SD}/serving.json.tmp", f"{SD}/serving.json")


def start(unit):
    m = re.match(r"vllm-(.+)\.service$", unit)
    unit_file = f"{os.environ['SPARKCTL_UNIT_DIR']}/{unit}"
    if not m or not os.path.exists(unit_file):
        print(f"Unit {unit} not found.", file=sys.stderr)
        return 5
    env = open(f"{os.environ['SPARKCTL_ENV_DIR']}/vllm-{m.group(1)}.env").read()
    model = re.search(r"^SPARKCTL_MODEL=(.*)$", env, re.M).group(1)
    broken = open(f"{SD}/broken").read().split() if os.path.exists(f"{SD}/broken") else []
    unready = open(f"{SD}/unready").read().split() if os.path.exists(f"{SD}/unready") else []
    st = load(unit)
    st["InvocationID"] = uuid.uuid4().hex  # a new one at every start, as systemd's
    st["StartedAt"] = time.time()
    slow = dict(line.split() for line in open(f"{SD}/slow").read().splitlines()) if os.path.exists(f"{SD}/slow") \
        else {}
    if model in slow:  # starts and stays active, answers only after that many seconds (a long cold start)
        st.update(ActiveState="active", SubState="running", MainPID=os.getpid())
        serving(False, model, ready_at=time.time() + float(slow[model]))
    elif model in unready:  # starts and stays active, but never answers a request (a gate that times out)
        st.update(ActiveState="active", SubState="running", MainPID=os.getpid())
        serving(False)
    elif model in broken:
        st.update(ActiveState="activating", SubState="auto-restart", NRestarts=st.get("NRestarts", 0) + 1)
        serving(False)
    else:
        st.update(ActiveState="active", SubState="running", MainPID=os.getpid())
        serving(True, model)
    save(unit, st)
    return 0


def journal_cursor():
    """The journal's newest cursor: a unit whose model is in $FAKE_SD/logging ("model [seconds]" lines) writes a line
    every tenth of a second after its start (a cold start compiling), for that many seconds when given; every other
    one's journal stands still after its start."""
    try:
        env = open(f"{os.environ['SPARKCTL_ENV_DIR']}/vllm-coder.env").read()
        model = re.search(r"^SPARKCTL_MODEL=(.*)$", env, re.M).group(1)
        logging = dict((line.split() + ["inf"])[:2] for line in open(f"{SD}/logging").read().splitlines() if line)
    except (FileNotFoundError, AttributeError, KeyError):
        return "s=still"
    if model not in logging:
        return "s=still"
    now = min(time.time(), load("vllm-coder.service").get("StartedAt", 0) + float(logging[model]))
    return f"s={int(now * 10)}"


def systemctl(args):
    verb = args[0]
    if verb == "show":
        units = [a for a in args[1:] if not a.startswith("-") and a not in
                 ("Id", "ActiveState", "SubState", "Result", "NRestarts", "MainPID", "InvocationID",
                  "UnitFileState")]
        blocks = []
        for u in units:
            st = load(u)
            if u.startswith(("sparkctl-rollout-", "sparkctl-retire")):  # transient units
                up = alive(st.get("pid", 0))
                st = {"ActiveState": "active" if up else "inactive", "SubState": "running" if up else "dead"}
            blocks.append("\n".join([f"Id={u}"] + [f"{k}={st.get(k, '')}" for k in
                                                   ("ActiveState", "SubState", "Result", "NRestarts", "MainPID",
                                                    "InvocationID", "UnitFileState")]))
        print("\n\n".join(blocks))
        return 0
    note(" ".join(args))
    if verb in ("restart", "start") and args[1].startswith("vllm-"):
        return start(args[1])
    if verb == "start":
        st = load(args[1])
        st.update(ActiveState="active", SubState="running")
        save(args[1], st)
        return 0
    unit = args[-1]
    if verb == "stop" or (verb == "disable" and "--now" in args):
        st = load(unit)
        st.update(ActiveState="inactive", SubState="dead")
        save(unit, st)
        if unit.startswith("vllm-"):  # (a watchdog's stop leaves the model serving)
            serving(False)
    if verb in ("enable", "disable"):
        st = load(unit)
        st["UnitFileState"] = f"{verb}d"
        save(unit, st)
    return 0


def systemd_run(args):
    unit = next(a.split("=", 1)[1] for a in args if a.startswith("--unit="))
    env = dict(os.environ)
    for a in args:
        if a.startswith("--setenv="):
            k, v = a.split("=", 1)[1].split("=", 1)
            env[k] = v
    if alive(load(unit).get("pid", 0)):
        print(f"Unit {unit} was already loaded or has a fragment file.", file=sys.stderr)
        return 1
    cmd = args[next(i for i, a in enumerate(args) if not a.startswith("-")):]  # options end at the command
    log = open(f"{SD}/{unit}.journal", "ab")
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True)
    save(unit, {"pid": proc.pid})
    note(f"systemd-run {unit}")
    return 0


if __name__ == "__main__":
    tool = globals().get("TOOL") or os.path.basename(sys.argv[0])
    if tool == "journalctl":
        if "json" in sys.argv:  # the newest entry's cursor: it moves while the starting engine logs (see logging())
            print(json.dumps({"__CURSOR": journal_cursor(), "MESSAGE": "stand-in journal line"}))
            sys.exit(0)
        print("2026-12-01T09:00:00+0000 box vllm[1]: stand-in journal line")
        sys.exit(0)
    sys.exit({"systemctl": systemctl, "systemd-run": systemd_run}[tool](sys.argv[1:]))
