"""Tasks as rooms: each tasks/ module is one step of deploy.py (or a named helper module), no step reaches
into another, and the text that describes the layout names what exists."""

from __future__ import annotations

import ast
import re

from sparkctl import REPO_ROOT

TASKS = REPO_ROOT / "tasks"
# tasks/ modules that are not steps of deploy.py (tasks/__init__.py says what each is; retire: retire.py's glue)
HELPERS = {"common", "facts", "rollout", "retire", "pyinfra_fast"}
STEPS = {p.stem for p in TASKS.glob("*.py")} - HELPERS - {"__init__"}


def tasks_imports(path) -> list[tuple[str, str]]:
    """(tasks module, name) of every `from tasks.X import name` in a file."""
    tree = ast.parse(path.read_text())
    return [(n.module.split(".", 1)[1], a.name) for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("tasks.") for a in n.names]


def test_no_step_imports_another_step():
    """What one step needs from another is returned by it and handed on in deploy.py; shared helpers live in the
    helper modules, errors in sparkctl/errors.py, box paths in sparkctl/render/."""
    for step in sorted(STEPS):
        reached = [f"tasks.{mod}.{name}" for mod, name in tasks_imports(TASKS / f"{step}.py") if mod not in HELPERS]
        assert reached == [], f"tasks/{step}.py imports another step: {reached}"


def test_no_private_name_crosses_a_module():
    for path in [*TASKS.glob("*.py"), REPO_ROOT / "deploy.py"]:
        private = [f"tasks.{mod}.{name}" for mod, name in tasks_imports(path) if name.startswith("_")]
        assert private == [], f"{path.name} imports private names: {private}"


def deploy_calls() -> list[tuple[str, str]]:
    """(function, tasks module) of every step deploy.py calls, in its order (a group's steps: one `if`)."""
    tree = ast.parse((REPO_ROOT / "deploy.py").read_text())
    body = [x for n in tree.body for x in (n.body if isinstance(n, ast.If) else [n])]
    calls = [n.value.func.id for n in body if isinstance(n, (ast.Expr, ast.Assign))
             and isinstance(getattr(n, "value", None), ast.Call) and isinstance(n.value.func, ast.Name)]
    imported = {a.name: n.module.split(".", 1)[1] for n in tree.body if isinstance(n, ast.ImportFrom)
                and n.module.startswith("tasks.") for a in n.names}
    return [(c, imported[c]) for c in calls if c in imported]


def documented_steps(text: str) -> list[tuple[str, str]]:
    """(function, tasks module) of each numbered item of docs/layout.md's "The steps", in its order."""
    section = text.split("\n### The steps\n", 1)[1].split("\n#", 1)[0]
    return re.findall(r"^\d+\. `(\w+)` \(`tasks/(\w+)\.py`\)", section, re.M)


def test_deploy_py_calls_every_step_and_docs_layout_lists_them_in_its_order():
    """The step order is written once, in docs/layout.md; README.md, deploy.py and tasks/__init__.py link to it."""
    calls = deploy_calls()
    assert {module for _, module in calls} == STEPS  # every step module runs, nothing else does
    listed = documented_steps((REPO_ROOT / "docs" / "layout.md").read_text())
    assert listed == [c for c in calls if c[0] != "settings_for_host"]
    for path in ("README.md", "deploy.py", "tasks/__init__.py"):
        assert "layout.md" in (REPO_ROOT / path).read_text(), f"{path} does not point to the one list"


def test_a_step_out_of_order_in_the_list_is_found():
    text = "x\n### The steps\n\n1. `proxy` (`tasks/proxy.py`): a\n2. `vllm` (`tasks/vllm.py`): b\n"
    assert documented_steps(text) == [("proxy", "proxy"), ("vllm", "vllm")]
    assert documented_steps(text) != [c for c in deploy_calls() if c[0] in ("proxy", "vllm")]


def test_the_documented_layout_names_every_tasks_module_and_sparkctl_folder():
    layout = (REPO_ROOT / "docs" / "layout.md").read_text().split("## Layout", 1)[1].split("\n## ", 1)[0]
    for path in TASKS.glob("*.py"):
        if path.stem != "__init__":
            assert f"`{path.name}`" in layout or f"`tasks/{path.name}`" in layout, path.name
    for folder in (REPO_ROOT / "sparkctl").iterdir():
        if folder.is_dir() and (folder / "__init__.py").exists():
            assert f"`sparkctl/{folder.name}/`" in layout, folder.name
