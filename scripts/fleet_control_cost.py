"""The control side's own cost of one deploy over N boxes, on paper for a fleet: pyinfra's @fake connector (no
box, no network, no sleeps), the real group data and deploy.py, N hosts in the gx10 group. Prints, per host count,
the wall seconds of the whole run (config, the offline check, facts and operations for every host), the CPU seconds
it used (user + system, with the validators it ran: the control side's own work) and the peak memory (max RSS) of
the process that ran it. A benchmark, not a test: figures depend on the machine. The wall time also holds the
rollout's wave turns: every @fake box has a candidate to roll out, so from 2 hosts on each later wave waits its turn
(HEALTH_POLL_INTERVAL_S a look); a converge with nothing to roll out has no such waits, hence the CPU figure.

    .venv/bin/python scripts/fleet_control_cost.py            # 1 and 32 hosts
    .venv/bin/python scripts/fleet_control_cost.py 1 8 32

Each run is tests/standins/deploy_runner.py in its own process (pyinfra keeps global state), with the @fake facts of
tests/standins/gx10_inventory.py; its boxes answer no health check (HEALTH_READY_TIMEOUT_S = 0), so every host stops at the
health step, after the facts and the operations that are the control side's work.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TOKEN = "0123456789abcdefABCDEF-_.~+/=ghijklmnopqrstuvwxyz"  # 128+ random-looking bits: the check's strength rule

INVENTORY = '''
from tests.standins.gx10_inventory import _data
gx10 = [(f"@fake/spark-{{i}}", dict(_data)) for i in range(1, {n} + 1)]
'''


def _secrets(tmp: Path) -> dict:
    env = {}
    for name, var in (("api_token", "SPARK_API_TOKEN_FILE"), ("scrape_token", "SPARK_SCRAPE_TOKEN_FILE")):
        path = tmp / name
        path.write_text(TOKEN + name)
        path.chmod(0o600)
        env[var] = str(path)
    return env


def _children_cpu_s() -> float:
    """User + system CPU seconds of this process's waited-for children (and theirs) so far."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run(n: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp_dir:
        tmp = Path(tmp_dir)
        inventory = tmp / "inventory_fleet.py"
        inventory.write_text(INVENTORY.format(n=n))
        env = dict(os.environ, FAKE_KIND="dgx", PYINFRA_FAKE_DELAY="0", PYINFRA_FAKE_DELAY_JITTER="0",
                   GX10_HOSTS="", SPARKCTL_TEST_SECRETS=str(tmp / "secrets"), PYTHONPATH=str(REPO),
                   **_secrets(tmp))
        start, cpu_before = time.monotonic(), _children_cpu_s()
        proc = subprocess.Popen([sys.executable, "tests/standins/deploy_runner.py", str(inventory)], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, _err = proc.communicate()
        seconds, cpu_s = time.monotonic() - start, _children_cpu_s() - cpu_before
    line = next((x for x in out.splitlines() if x.startswith("FAKE-DRIVER-JSON ")), None)
    result = json.loads(line.split(" ", 1)[1]) if line else {"error": "no result", "by_host": {}}
    return {"hosts": n, "seconds": round(seconds, 1), "cpu_seconds": round(cpu_s, 1),
            "commands": len(result.get("commands", [])), "operations": len(result.get("ops", [])), "error": result.get("error")}


def run_measured(n: int) -> dict:
    """run(n), with the child's peak RSS read from the kernel's accounting of this process's children."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    figures = run(n)
    after = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    figures["peak_rss_mib"] = round(after / 1024, 1) if after > before else f"<= {before / 1024:.1f}"
    return figures


if __name__ == "__main__":
    counts = [int(a) for a in sys.argv[1:]] or [1, 32]
    for count in sorted(counts):  # ascending, so each run's peak RSS is the children's maximum so far
        print(json.dumps(run_measured(count)), flush=True)
