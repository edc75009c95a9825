"""Read group_data/*.py outside pyinfra (for `sparkctl plan`, `bench`, ...), merged the way pyinfra merges them."""

from __future__ import annotations

import ast
import json
import os
import traceback
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.config import files
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
        if os.path.lexists(path):
            data.update(read_file(path))
    return data


def read_file(path: Path) -> dict:
    """One group data file's settings, read as pyinfra reads it (UTF-8 Python, executed); a file that is not a
    regular UTF-8 file, does not parse or fails while it runs is a SettingError naming the file and the line."""
    name = f"{path.parent.name}/{path.name}"
    what = "a Python file of settings, one NAME = value per setting"
    text, _ = files.read_text(path, name, what)
    try:
        code = compile(text, str(path), "exec")
    except SyntaxError as exc:
        raise SettingError(f"{name} line {exc.lineno}", (exc.text or "").strip(), what,
                           f"Python cannot parse it: {exc.msg}") from None
    _defined_once(text, name)
    namespace: dict = {"__file__": str(path)}
    try:
        exec(code, namespace)  # noqa: S102 - group data is Python by pyinfra's design; pyinfra executes it too
    except Exception as exc:  # noqa: BLE001 - any error in the operator's file is reported as that file's
        line = next((f.lineno for f in reversed(traceback.extract_tb(exc.__traceback__)) if f.filename == str(path)),
                    0)
        source = text.splitlines()[line - 1].strip() if 0 < line <= len(text.splitlines()) else ""
        raise SettingError(f"{name} line {line}", source, what, f"{type(exc).__name__}: {exc}") from None
    return settings_of(namespace, text)


def settings_of(namespace: dict, text: str) -> dict:
    """The settings a group data file defines, as pyinfra keeps them (pyinfra_cli/inventory.py _get_group_data,
    pyinfra 3.10): the names in __all__ when the file sets it, else every name but those an import statement binds
    (`import os` is a helper of the file, not a setting named os); never a dunder."""
    if "__all__" in namespace:
        keep = set(namespace["__all__"])
    else:
        imported = _imported_names(ast.parse(text))
        keep = {k for k in namespace if k not in imported}
    return {k: v for k, v in namespace.items() if k in keep and not k.startswith("__")}


def _imported_names(tree: ast.Module) -> set[str]:
    """The names the file's top-level import statements bind (`import a.b` binds a; `from x import *` none that
    can be told)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names |= {alias.asname or alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            names |= {alias.asname or alias.name for alias in node.names if alias.name != "*"}
    return names


def _defined_once(text: str, name: str) -> None:
    """Each setting is assigned once at the top of a file: a second line would win silently over the first (and its
    comment), so which value runs is refused rather than guessed."""
    first: dict[str, int] = {}
    for node in ast.parse(text).body:
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) \
            else []
        for target in targets:
            if isinstance(target, ast.Name) and target.id in first:
                raise SettingError(f"{name} line {node.lineno}", target.id, "one definition of each setting per file",
                                   f"{target.id} is already set on line {first[target.id]}: the later line would "
                                   f"win silently; keep one")
            if isinstance(target, ast.Name):
                first[target.id] = node.lineno


def check_dir(folder: Path) -> None:
    """Every group data file pyinfra would load from `folder` reads cleanly (inventory.py runs this before pyinfra
    loads them itself, which would end in a traceback or wait on a FIFO forever)."""
    if not folder.is_dir():
        return
    for path in sorted(folder.glob("*.py")):
        read_file(path)


# --- `--data KEY=VALUE`, as pyinfra's CLI gives it to the deploy ---------------------------------------------------


def parse_data_value(text: str):
    """A --data value as pyinfra's CLI parses it (pyinfra_cli/util.py parse_cli_arg, pyinfra 3.10): true/false,
    an int, JSON, else the string. Copied, not imported: importing pyinfra_cli monkey-patches the stdlib (gevent);
    tests/check/test_check.py checks it against pyinfra's own function."""
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
