#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run by sparkctl-watchdog.service, stdlib only): catch a wedged vLLM engine.

    watchdog.py --config /etc/sparkctl/watchdog.json [--once]
    watchdog.py --config /etc/sparkctl/watchdog.json --restart SERVICE   (by hand: that service's restart_command,
                                                    as a wedge would run it; its output shown, its exit code returned;
                                                    not counted in the restart history)

A known GB10 failure: the engine stops producing tokens while the API server still answers /health with 200.
Every `interval_s`, per service:
- /health not 200: down or starting; systemd's Restart= and the rollout own that. Nothing to judge.
- busy: the engine's step counter moves (vllm:iteration_tokens_total_count, generation and prompt tokens). A busy
  engine is never restarted, however loaded.
- wedged: requests are running or waiting and no counter moved for `stall_s`; or, when idle, a 1-token request
  on loopback (embedders: a one-word embedding) got no answer within `probe_timeout_s` (sent every `probe_idle_s`).
A wedged service is restarted with `restart_command` (only that service; by default `rollout.py restart S --wait`,
the deploy's own transaction unit: drained at the proxy, restarted on its committed configuration, gated, the
result recorded), at most `max_restarts` times in `window_s`. A restart command that exits non-zero is a failed
restart: logged, counted (sparkctl_watchdog_restart_failures_total) and still one of the allowed restarts. Once
they are spent the service is stopped with `stop_command` and left down: a CRIT journal entry and
sparkctl_watchdog_gave_up{service} = 1 in the textfile directory, so the alert fires and a human looks.
The restart history survives the watchdog's own restarts (`state_file`).

The commands are templates; PLACEHOLDERS are filled per service, each value shell-quoted: {unit}, {service},
{port}, {served}, {kind} from `services`, {rollout} (`rollout_command`: the env prefix, python and rollout.py)
and {limits} (`rollout_limits`: every option `rollout.py restart` takes from a setting), both rendered from the
settings.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import time
import urllib.error
import urllib.request

try:
    from sparkctl.box.boxio import write_atomic, write_json
    from sparkctl.box.textfile import TEXTFILE_MODE, Exposition
except ImportError:  # on the box: the scripts sit side by side
    from boxio import write_atomic, write_json
    from textfile import TEXTFILE_MODE, Exposition

PROGRESS_COUNTERS = ("vllm:iteration_tokens_total_count", "vllm:generation_tokens_total", "vllm:prompt_tokens_total")
PENDING_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")
CRIT, WARNING, NOTICE, INFO = 2, 4, 5, 6  # syslog priorities: journald reads "<N>" line prefixes
# what the command templates may name (sparkctl/config/schema.py refuses any other before the box is touched)
PLACEHOLDERS = ("unit", "service", "port", "served", "kind", "rollout", "limits")
STATE_MODE = 0o644  # the restart history (no secret): `sparkctl status` reads it through the status probe


def log(priority: int, message: str) -> None:
    print(f"<{priority}>{message}", flush=True)


def parse_metrics(text: str) -> tuple[tuple[float, ...], float]:
    """(progress counters, requests running + waiting) from a vLLM /metrics page, summed over engines."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        m = SAMPLE_RE.match(line)
        if m and (m.group(1) in PROGRESS_COUNTERS or m.group(1) in PENDING_GAUGES):
            try:
                sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(2))
            except ValueError:
                continue
    return tuple(sums.get(c, 0.0) for c in PROGRESS_COUNTERS), sum(sums.get(g, 0.0) for g in PENDING_GAUGES)


def http(url: str, timeout: float, body: dict | None = None) -> tuple[int, str]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, ""
    except (OSError, ValueError):  # refused, reset, timed out
        return 0, ""


class Watchdog:
    def __init__(self, cfg: dict):
        self.cfg = cfg
        self.obs: dict[str, dict] = {}  # in memory: last counters, when progress was last seen, last probe
        self.last: dict[str, str] = {}  # last verdict per service: the journal hears about changes only
        self.state = self._load()

    # --- persisted restart history ------------------------------------------------------------------------
    def _load(self) -> dict:
        try:
            with open(self.cfg["state_file"]) as f:
                state = json.load(f)
            return state if isinstance(state, dict) else {}
        except (OSError, ValueError):
            return {}

    def _save(self) -> None:
        path = self.cfg["state_file"]
        os.makedirs(os.path.dirname(path), exist_ok=True)
        write_json(path, self.state, STATE_MODE)

    def record(self, name: str) -> dict:
        rec = self.state.setdefault(name, {"restarts": [], "restarts_total": 0, "gave_up": False})
        rec.setdefault("restart_failures_total", 0)  # a state file from before this counter existed
        return rec

    # --- one service -------------------------------------------------------------------------------------
    def probe(self, svc: dict) -> bool:
        timeout = self.cfg["probe_timeout_s"]
        if svc["kind"] == "embed":
            code, _ = http(f"{svc['url']}/v1/embeddings", timeout, {"model": svc["served"], "input": "ping"})
        else:
            code, _ = http(f"{svc['url']}/v1/completions", timeout,
                           {"model": svc["served"], "prompt": "ping", "max_tokens": 1})
        return code == 200

    def verdict(self, svc: dict, now: float) -> tuple[str, str, bool]:
        """("down" | "busy" | "idle" | "wedged", why, whether this check saw the engine produce tokens)."""
        obs = self.obs.setdefault(svc["name"], {"counters": None, "progress_at": now, "probe_at": now})
        timeout = self.cfg["http_timeout_s"]
        if http(f"{svc['url']}/health", timeout)[0] != 200:
            obs.update(counters=None, progress_at=now, probe_at=now)
            return "down", "/health does not answer 200", False
        code, text = http(f"{svc['url']}/metrics", timeout)
        counters, pending = parse_metrics(text) if code == 200 else (None, 0.0)
        moved = counters is not None and obs["counters"] is not None and counters != obs["counters"]
        if counters is not None:
            obs["counters"] = counters
        if moved:  # tokens flowed: proof of life, so the idle probe waits a full probe_idle_s from here
            obs["progress_at"] = obs["probe_at"] = now
            return "busy", "engine steps are moving", True
        if pending > 0:
            stalled = now - obs["progress_at"]
            if stalled >= self.cfg["stall_s"]:
                return "wedged", f"{pending:g} requests running/waiting and no engine step for {stalled:.0f} s", False
            return "busy", f"{pending:g} requests pending, no step for {stalled:.0f} s yet", False
        obs["progress_at"] = now  # idle is not stalled: the clock runs only while work is pending
        if now - obs["probe_at"] >= self.cfg["probe_idle_s"]:
            obs["probe_at"] = now
            if not self.probe(svc):
                return "wedged", f"idle, and a 1-token probe got no answer within {self.cfg['probe_timeout_s']} s", \
                    False
            return "idle", "the 1-token probe answered", True
        return "idle", "no work pending", False

    def act(self, svc: dict, verdict: str, why: str, proven: bool, now: float) -> None:
        rec = self.record(svc["name"])
        if rec["gave_up"] and proven:  # someone started it again and it serves: watch it again
            rec["gave_up"] = False
            log(NOTICE, f"{svc['unit']}: serving again after the watchdog gave up; watching it again")
            self._save()
        if verdict != "wedged" or rec["gave_up"]:
            return
        rec["restarts"] = [t for t in rec["restarts"] if now - t < self.cfg["window_s"]]
        if len(rec["restarts"]) >= self.cfg["max_restarts"]:
            rec["gave_up"] = True
            log(CRIT, f"{svc['unit']}: WEDGED ({why}) after {len(rec['restarts'])} watchdog restarts in "
                      f"{self.cfg['window_s']} s: giving up, stopping it and leaving it down for a human "
                      f"(sparkctl_watchdog_gave_up=1). Look at `journalctl -u {svc['unit']}`, then start it again.")
            self.run(self.cfg["stop_command"], svc)
        else:
            rec["restarts"].append(now)
            rec["restarts_total"] += 1
            log(WARNING, f"{svc['unit']}: WEDGED ({why}): restarting it (restart {len(rec['restarts'])} of "
                         f"{self.cfg['max_restarts']} allowed in {self.cfg['window_s']} s)")
            self._save()  # counted before it runs: a watchdog killed mid-restart does not get a free one
            if self.run(self.cfg["restart_command"], svc):
                log(NOTICE, f"{svc['unit']}: restarted")
            else:
                rec["restart_failures_total"] += 1
                log(CRIT if len(rec["restarts"]) >= self.cfg["max_restarts"] else WARNING,
                    f"{svc['unit']}: the restart FAILED (restart {len(rec['restarts'])} of "
                    f"{self.cfg['max_restarts']}); it counts as one of the allowed restarts")
        self.obs.pop(svc["name"], None)  # judge the restarted engine afresh
        self._save()

    def command(self, template: str, svc: dict) -> list[str]:
        """The argv of a command template for one service (PLACEHOLDERS, each value shell-quoted)."""
        values = {"unit": svc["unit"], "service": svc["name"], "port": svc.get("port", ""),
                  "served": svc.get("served", ""), "kind": svc.get("kind", "")}
        quoted = {k: shlex.quote(str(v)) for k, v in values.items()}
        quoted.update(rollout=shlex.join(self.cfg.get("rollout_command", [])),
                      limits=shlex.join(str(x) for x in self.cfg.get("rollout_limits", [])))
        return shlex.split(template.format(**quoted))

    def run(self, template: str, svc: dict) -> bool:
        """Run a command template for one service; False (and its output in the journal) when it fails."""
        argv = self.command(template, svc)
        try:
            r = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL)
        except OSError as exc:
            log(WARNING, f"{shlex.join(argv)!r} could not run: {exc}")
            return False
        if r.returncode != 0:
            log(WARNING, f"{shlex.join(argv)!r} exited {r.returncode}: {(r.stdout + r.stderr).strip()[-3000:]}")
        return r.returncode == 0

    # --- the loop ------------------------------------------------------------------------------------------
    def rollout_running(self, svc: dict) -> bool:
        """A rollout transaction owns the service right now (draining, restarting, gating): never restart it then."""
        return subprocess.run(self.command(self.cfg["rollout_active_command"], svc), capture_output=True,
                              stdin=subprocess.DEVNULL).returncode == 0

    def check_once(self, now: float | None = None) -> dict[str, str]:
        now = time.time() if now is None else now
        verdicts = {}
        for svc in self.cfg["services"]:
            if self.rollout_running(svc):
                self.obs.pop(svc["name"], None)  # judge it afresh once the transaction is done
                verdict, why, proven = "rollout", "a rollout transaction owns it", False
            else:
                verdict, why, proven = self.verdict(svc, now)
            if verdict != self.last.get(svc["name"]) and (verdict in ("down", "wedged")
                                                          or self.last.get(svc["name"]) in ("down", "wedged")):
                log(INFO, f"{svc['unit']}: {verdict}: {why}")
            self.last[svc["name"]] = verdict
            self.act(svc, verdict, why, proven, now)
            verdicts[svc["name"]] = verdict
        self.write_metrics(verdicts, now)
        return verdicts

    def write_metrics(self, verdicts: dict[str, str], now: float) -> None:
        exp = Exposition()
        for svc in self.cfg["services"]:
            rec, labels = self.record(svc["name"]), {"unit": svc["unit"]}  # "service" is a target label
            window = [t for t in rec["restarts"] if now - t < self.cfg["window_s"]]
            exp.add("sparkctl_watchdog_restarts_total", "counter", "restarts of a wedged service by the watchdog",
                    rec["restarts_total"], labels)
            exp.add("sparkctl_watchdog_restarts_in_window", "gauge", "watchdog restarts within its window",
                    len(window), labels)
            exp.add("sparkctl_watchdog_restart_failures_total", "counter",
                    "watchdog restarts whose command exited non-zero (the service did not come up again)",
                    rec["restart_failures_total"], labels)
            exp.add("sparkctl_watchdog_gave_up", "gauge", "1: wedged again after the allowed restarts; left down",
                    int(rec["gave_up"]), labels)
            exp.add("sparkctl_watchdog_wedged", "gauge", "1 when the last check found the service wedged",
                    int(verdicts.get(svc["name"]) == "wedged"), labels)
        exp.add("sparkctl_watchdog_last_check_timestamp_seconds", "gauge", "when the watchdog last checked, unix time",
                round(now, 3))
        try:
            write_atomic(self.cfg["textfile"], exp.text(), TEXTFILE_MODE)
        except OSError as exc:
            log(WARNING, f"cannot write {self.cfg['textfile']}: {exc}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", required=True)
    p.add_argument("--once", action="store_true", help="one check of every service, then exit")
    p.add_argument("--restart", metavar="SERVICE", help="run SERVICE's restart command now, then exit with its code")
    args = p.parse_args(argv)
    with open(args.config) as f:
        dog = Watchdog(json.load(f))
    if args.restart:
        svc = next((s for s in dog.cfg["services"] if s["name"] == args.restart), None)
        if svc is None:
            p.error(f"--restart {args.restart}: not one of {', '.join(s['name'] for s in dog.cfg['services'])}")
        return subprocess.run(dog.command(dog.cfg["restart_command"], svc), stdin=subprocess.DEVNULL).returncode
    log(INFO, f"watching {', '.join(s['unit'] for s in dog.cfg['services'])}: stall {dog.cfg['stall_s']} s, "
              f"at most {dog.cfg['max_restarts']} restarts in {dog.cfg['window_s']} s")
    while True:
        dog.check_once()
        if args.once:
            return 0
        time.sleep(dog.cfg["interval_s"])


if __name__ == "__main__":
    sys.exit(main())
