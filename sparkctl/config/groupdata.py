"""Read group_data/*.py outside pyinfra (for `sparkctl plan`, `bench`, ...), merged the way pyinfra merges them."""

from __future__ import annotations

import json
import os
import runpy
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.errors import SettingError


def default_groups() -> list[str]:
    """The groups a host of the configured inventory is in: a real box when GX10_HOSTS is set, else the sim."""
    return ["all", "gx10"] if os.environ.get("GX10_HOSTS") else ["all", "gx10", "sim"]


def load(groups: list[str] | None = None, root: Path = REPO_ROOT) -> dict:
    """Merged data of the given groups; later groups win, as in pyinfra, where every host is in `all`: it is read
    first even when not named, so every setting has its value and callers need no defaults of their own."""
    data: dict = {}
    groups = list(groups or default_groups())
    for group in (["all"] if "all" not in groups else []) + groups:
        path = root / "group_data" / f"{group}.py"
        if not path.exists():
            continue
        values = runpy.run_path(str(path))
        data.update({k: v for k, v in values.items() if not k.startswith("__")})
    return data


# --- `--data KEY=VALUE`, as pyinfra's CLI gives it to the deploy ---------------------------------------------------


def parse_data_value(text: str):
    """A --data value as pyinfra's CLI parses it (pyinfra_cli/util.py parse_cli_arg, pyinfra 3.10): true/false,
    an int, JSON, else the string. Copied, not imported: importing pyinfra_cli monkey-patches the stdlib (gevent);
    tests/config/test_check.py checks it against pyinfra's own function."""
    if text.lower() == "false":
        return False
    if text.lower() == "true":
        return True
    try:
        return int(text)
    except (TypeError, ValueError):
        pass
    try:
        return json.loads(text)
    except ValueError:
        pass
    return text


def parse_data(items: list[str] | None) -> dict:
    out = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SettingError("--data", item, "KEY=VALUE")
        out[key] = value
    return {k: parse_data_value(v) for k, v in out.items()}
