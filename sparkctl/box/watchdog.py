#!/usr/bin/env python3
"""On the box (uploaded by the deploy, run by sparkctl-watchdog.service, stdlib only): catch a wedged vLLM engine.

    watchdog.py --config /etc/sparkctl/watchdog.json [--once]
    watchdog.py --config /etc/sparkctl/watchdog.json --restart SERVICE   (by hand: that service's restart_command,
                                                    as a wedge would run it; its output shown, its exit code returned;
                                                    not counted in the restart history)

A known GB10 failure: the engine stops producing tokens while the API server still answers /health with 200.
A restart kills every running stream, so it needs POSITIVE evidence. Every `interval_s`, per service:
- /health not 200: down or starting; systemd's Restart= and the rollout own that. Nothing to judge.
- unknown: /metrics does not answer, or lacks vLLM's request gauges or step counters. Pending work is then
  unknown, never taken for 0: nothing is judged and no probe is sent (under a full batch the probe would queue and
  time out, and the restart would kill every stream). Logged with the last readable counters and their age.
- busy: the engine's step counters move (vllm:iteration_tokens_total_count, generation and prompt tokens), or work
  is pending and they have been still for less than `stall_s`. A busy engine is never restarted, however loaded.
- wedged, from a readable /metrics only: requests running or waiting, and the counters unchanged between two
  readable samples `stall_s` apart that both show work pending; or, idle (a readable /metrics said 0 pending), a
  1-token request on loopback (embedders: a one-word embedding, sent every `probe_idle_s`) got no answer within
  `probe_timeout_s` and the counters did not move across it (work that arrived meanwhile moves them: busy).
Every verdict carries its evidence (counter values, pending requests, how long); changes to and from down, unknown,
wedged and rollout are logged with it, and so is every restart.
- tensor-parallel: the head judges the pair as one unit (watchdog_pair.py): nothing while either box's transaction
  runs, a worker engine gone or replaced is evidence, and a restart restarts the pair through the head's
  transaction; the worker's watchdog starts the worker's part of it.
A wedged service is restarted with `restart_command` (only that service, or that pair; by default `rollout.py
restart S --wait`, the deploy's own transaction unit: drained at the proxy, restarted on its committed
configuration, gated, the result recorded), at most `max_restarts` times in `window_s` (restart loops leak GB10's
unified memory). A restart command that exits non-zero is a failed restart: logged, counted
(sparkctl_watchdog_restart_failures_total) and still one of the allowed restarts. Once they are spent the service
is stopped with `stop_command` and left down: a CRIT journal entry and sparkctl_watchdog_gave_up{service} = 1 in the
textfile directory, so the alert fires and a human looks. The restart history survives the watchdog's own restarts
(`state_file`).

The commands are templates; PLACEHOLDERS are filled per service, each value shell-quoted: {unit}, {service},
{port}, {served}, {kind} from `services`, {rollout} (`rollout_command`: the env prefix, python and rollout.py),
{limits} (`rollout_limits`: every option `rollout.py restart` takes from a setting), both rendered from the
settings, and {peer} (a tensor-parallel head's pair options: how its restart reads the worker, how long it waits;
empty elsewhere).
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
    from sparkctl.box import watchdog_pair as pair
    from sparkctl.box.boxio import write_atomic, write_json
    from sparkctl.box.textfile import TEXTFILE_MODE, Exposition
except ImportError:  # on the box: the scripts sit side by side
    import watchdog_pair as pair
    from boxio import write_atomic, write_json
    from textfile import TEXTFILE_MODE, Exposition

PROGRESS_COUNTERS = ("vllm:iteration_tokens_total_count", "vllm:generation_tokens_total", "vllm:prompt_tokens_total")
COUNTER_NAMES = ("steps", "generated", "prompt")  # how the journal names them
PENDING_GAUGES = ("vllm:num_requests_running", "vllm:num_requests_waiting")
SAMPLE_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{[^}]*\})?\s+(\S+)")
CRIT, WARNING, NOTICE, INFO = 2, 4, 5, 6  # syslog priorities: journald reads "<N>" line prefixes
# what the command templates may name (sparkctl/config/schema.py refuses any other before the box is touched)
PLACEHOLDERS = ("unit", "service", "port", "served", "kind", "rollout", "limits", "peer")
STATE_MODE = 0o644  # the restart history (no secret): `sparkctl status` reads it through the status probe
NOTEWORTHY = ("down", "wedged", "unknown", "rollout")  # a change to or from these is logged


def log(priority: int, message: str) -> None:
    print(f"<{priority}>{message}", flush=True)


def parse_metrics(text: str) -> tuple[tuple[float, ...], float] | None:
    """(progress counters, requests running + waiting) from a vLLM /metrics page, summed over engines; None when
    the page lacks vLLM's request gauges or all its step counters (unreadable: pending work unknown, never 0)."""
    sums: dict[str, float] = {}
    for line in text.splitlines():
        m = SAMPLE_RE.match(line)
        if m and (m.group(1) in PROGRESS_COUNTERS or m.group(1) in PENDING_GAUGES):
            try:
                sums[m.group(1)] = sums.get(m.group(1), 0.0) + float(m.group(2))
            except ValueError:
                continue
    if not all(g in sums for g in PENDING_GAUGES) or not any(k in sums for k in PROGRESS_COUNTERS):
        return None
    return tuple(sums.get(k, 0.0) for k in PROGRESS_COUNTERS), sum(sums[g] for g in PENDING_GAUGES)


def topic(why: str) -> str:
    """What a verdict's why is about, without its changing figures: a new topic is logged, a new figure is not."""
    return why.split(" (")[0].split(":")[0]


def counters_text(counters: tuple[float, ...] | None) -> str:
    return "none read yet" if counters is None else ", ".join(f"{n} {v:g}" for n, v in zip(COUNTER_NAMES, counters))


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
    WARNING, NOTICE = WARNING, NOTICE  # for watchdog_pair's log lines

    def __init__(self, cfg: dict):
        self.cfg = cfg
        # in memory per service: last readable counters, since when work is pending with them frozen (stall_since),
        # the last probe, and (tensor-parallel head) the worker engine the pair last served with
        self.obs: dict[str, dict] = {}
        self.last: dict[str, tuple] = {}  # last (verdict, topic) per service: the journal hears about changes only
        self.state = self._load()

    # --- persisted restart history ------------------------------------------------------------------------
    def _load(self) -> dict:
        try:
            with open(self.cfg["state_file"]) as f:
                state = json.load(f)
            return state if isinstance(state, dict) else {}
        except (OSError, ValueError):
            return {}

    def save(self) -> None:
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

    def sample(self, svc: dict) -> tuple[tuple | None, str]:
        """(counters, pending) from a readable /metrics, or None and why it is not readable."""
        code, text = http(f"{svc['url']}/metrics", self.cfg["http_timeout_s"])
        if code != 200:
            return None, f"/metrics answered {code}" if code else "/metrics did not answer within " \
                f"{self.cfg['http_timeout_s']} s"
        parsed = parse_metrics(text)
        return (parsed, "") if parsed else (None, "/metrics lacks vLLM's request gauges or step counters")

    def verdict(self, svc: dict, now: float, worker: dict | None = None) -> tuple[str, str, bool]:
        """("down" | "unknown" | "busy" | "idle" | "wedged", why with the evidence, whether this check saw the
        engine produce tokens). worker: a tensor-parallel head's worker status (watchdog_pair.py)."""
        obs = self.obs.setdefault(svc["name"], {"counters": None, "stall_since": None, "probe_at": now,
                                                "read_at": None, "served_with": None})
        if http(f"{svc['url']}/health", self.cfg["http_timeout_s"])[0] != 200:
            self.obs.pop(svc["name"], None)  # judged afresh once it answers (the pair too: both may have restarted)
            return "down", "/health does not answer 200", False
        lost = pair.worker_lost(worker, obs["served_with"]) if worker is not None else ""
        if lost:
            return "wedged", lost, False
        sample, err = self.sample(svc)
        if sample is None:  # never "idle": an idle probe would queue behind a full batch and time out
            seen = f"{now - obs['read_at']:.0f} s ago" if obs["read_at"] is not None else "never"
            return "unknown", f"{err}: pending work unknown, nothing judged (last readable {seen}: " \
                f"{counters_text(obs['counters'])})", False
        verdict = self.liveness(svc, obs, sample, now)
        if verdict[2] and worker is not None:
            obs["served_with"] = worker.get("invocation") or None
        return verdict

    def liveness(self, svc: dict, obs: dict, sample: tuple, now: float) -> tuple[str, str, bool]:
        """The verdict from a readable /metrics sample: positive evidence only."""
        (counters, pending), before = sample, obs["counters"]
        obs["counters"], obs["read_at"] = counters, now
        if before is not None and counters != before:  # tokens flowed: proof of life; the idle probe waits
            obs["probe_at"], obs["stall_since"] = now, (now if pending > 0 else None)
            return "busy", f"engine steps moved ({counters_text(before)} -> {counters_text(counters)}), " \
                f"{pending:g} pending", True
        if pending > 0:  # the stall clock runs only between readable samples that both show work pending
            obs["stall_since"] = now if obs["stall_since"] is None else obs["stall_since"]
            stalled = now - obs["stall_since"]
            evidence = f"{pending:g} requests running/waiting and no engine step for {stalled:.0f} s (counters " \
                f"{counters_text(counters)}, stall limit {self.cfg['stall_s']} s)"
            return ("wedged" if stalled >= self.cfg["stall_s"] else "busy"), evidence, False
        obs["stall_since"] = None
        if now - obs["probe_at"] >= self.cfg["probe_idle_s"]:
            obs["probe_at"] = now
            return self.probe_verdict(svc, obs, counters)
        return "idle", "no work pending (0 running/waiting)", False

    def probe_verdict(self, svc: dict, obs: dict, counters: tuple) -> tuple[str, str, bool]:
        """Idle (a readable /metrics said 0 pending): a 1-token probe. Wedged only when it gets no answer AND the
        counters did not move across it (a burst that arrived meanwhile moves them: busy, not wedged)."""
        timeout = self.cfg["probe_timeout_s"]
        if self.probe(svc):
            return "idle", "0 pending and the 1-token probe answered", True
        after, err = self.sample(svc)
        if after is None:
            return "unknown", f"idle (0 pending), a 1-token probe got no answer within {timeout} s, then {err}: " \
                "nothing judged", False
        obs["counters"] = after[0]
        if after[0] != counters:
            return "busy", f"a 1-token probe got no answer within {timeout} s, but the engine stepped meanwhile " \
                f"({counters_text(counters)} -> {counters_text(after[0])}, {after[1]:g} pending)", True
        return "wedged", f"idle (0 requests running/waiting), a 1-token probe got no answer within {timeout} s, and " \
            f"no engine step across it (counters {counters_text(counters)})", False

    def act(self, svc: dict, verdict: str, why: str, proven: bool, now: float) -> None:
        rec = self.record(svc["name"])
        if rec["gave_up"] and proven:  # someone started it again and it serves: watch it again
            rec["gave_up"] = False
            log(NOTICE, f"{svc['unit']}: serving again after the watchdog gave up; watching it again")
            self.save()
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
            self.save()  # counted before it runs: a watchdog killed mid-restart does not get a free one
            if self.run(self.cfg["restart_command"], svc):
                log(NOTICE, f"{svc['unit']}: restarted")
            else:
                rec["restart_failures_total"] += 1
                log(CRIT if len(rec["restarts"]) >= self.cfg["max_restarts"] else WARNING,
                    f"{svc['unit']}: the restart FAILED (restart {len(rec['restarts'])} of "
                    f"{self.cfg['max_restarts']}); it counts as one of the allowed restarts")
        self.obs.pop(svc["name"], None)  # judge the restarted engine afresh
        self.save()

    def command(self, template: str, svc: dict) -> list[str]:
        """The argv of a command template for one service (PLACEHOLDERS, each value shell-quoted)."""
        values = {"unit": svc["unit"], "service": svc["name"], "port": svc.get("port", ""),
                  "served": svc.get("served", ""), "kind": svc.get("kind", "")}
        quoted = {k: shlex.quote(str(v)) for k, v in values.items()}
        quoted.update(rollout=shlex.join(self.cfg.get("rollout_command", [])),
                      limits=shlex.join(str(x) for x in self.cfg.get("rollout_limits", [])),
                      peer=shlex.join(str(x) for x in svc.get("peer_args", [])))
        return shlex.split(template.format(**quoted))

    def run(self, template: str, svc: dict) -> bool:
        """Run a command template for one service; False (and its output in the journal) when it fails."""
        return self.run_argv(self.command(template, svc))

    def run_argv(self, argv: list[str]) -> bool:
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

    def check(self, svc: dict, now: float) -> tuple[str, str, bool]:
        """One service's verdict; a tensor-parallel head's ("pair") only when the pair may be judged."""
        if self.rollout_running(svc):
            self.obs.pop(svc["name"], None)  # judge it afresh once the transaction is done
            return "rollout", "a rollout transaction owns it", False
        if "pair" not in svc:
            return self.verdict(svc, now)
        worker, err = pair.read_peer(svc["pair"]["peer_status_command"], svc["name"], svc["pair"]["call_timeout_s"])
        held = pair.before_judging(worker, err, pair.head_unit(svc["pair"]))
        if held:
            self.obs.pop(svc["name"], None)  # judged afresh (what the pair served with too) once it may be again
            return (*held, False)
        return self.verdict(svc, now, worker)

    def check_once(self, now: float | None = None) -> dict[str, str]:
        now = time.time() if now is None else now
        verdicts = {}
        for svc in self.cfg["services"]:
            verdict, why, proven = self.check(svc, now)
            seen, previous = (verdict, topic(why)), self.last.get(svc["name"], ("", ""))
            if seen != previous and (verdict in NOTEWORTHY or previous[0] in NOTEWORTHY):
                log(INFO, f"{svc['unit']}: {verdict}: {why}")
            self.last[svc["name"]] = seen
            self.act(svc, verdict, why, proven, now)
            verdicts[svc["name"]] = verdict
        if self.cfg.get("follow"):  # a tensor-parallel worker: its part of the head's pair restart
            verdicts[self.cfg["follow"]["service"]] = pair.follow_head(self, self.cfg["follow"], log)
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
            exp.add("sparkctl_watchdog_unknown", "gauge", "1 when the last check could not judge the service (its "
                    "/metrics unreadable, or a tensor-parallel worker out of reach)",
                    int(verdicts.get(svc["name"]) == "unknown"), labels)
        follow = self.cfg.get("follow")
        if follow:
            exp.add("sparkctl_watchdog_pair_restarts_followed_total", "counter", "tensor-parallel worker: pair "
                    "restarts of its head it took part in", self.record(follow["service"]).get("followed_total", 0),
                    {"unit": follow["unit"]})
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
    follow = dog.cfg.get("follow")
    log(INFO, f"watching {', '.join(s['unit'] for s in dog.cfg['services']) or 'no API service'}"
              f"{'; following the head for ' + follow['unit'] if follow else ''}: stall {dog.cfg['stall_s']} s, "
              f"at most {dog.cfg['max_restarts']} restarts in {dog.cfg['window_s']} s")
    while True:
        dog.check_once()
        if args.once:
            return 0
        time.sleep(dog.cfg["interval_s"])


if __name__ == "__main__":
    sys.exit(main())
