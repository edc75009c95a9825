"""tasks/pyinfra_fast.py: pyinfra's operation order and global arguments, made cheap, give pyinfra's own results.

Each deploy runs twice in its own process (pyinfra keeps global state) against the @fake connector: once with
pyinfra's own get_operation_order_from_stack (install() disabled), once as deploy.py runs it (installed). Every
host's every operation must get the same order (the line-number list pyinfra sorts by, and its hash), and the run
must do the same; each run also says which function pyinfra used, so a run that silently kept pyinfra's own cannot
pass for the replacement."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap

import pytest
from pyinfra.api import arguments, facts, util

from sparkctl import REPO_ROOT
from tasks import pyinfra_fast
from tests.conftest import API_TOKEN, SCRAPE_TOKEN

# runs deploy_runner.main with pyinfra's own operation order (argv[1] == "original") or deploy.py's install
RUNNER = textwrap.dedent("""
    import importlib, sys
    sys.path.insert(0, "{standins}")
    import deploy_runner
    from tasks import pyinfra_fast
    if sys.argv[1] == "original":
        pyinfra_fast.install = lambda *args, **kwargs: False
    deploy_runner.main(sys.argv[2:])
    used = importlib.import_module("pyinfra.api.operation").get_operation_order_from_stack
    print("ORDER-FUNCTION " + used.__module__ + "." + used.__name__)
""").format(standins=REPO_ROOT / "tests" / "standins")

ORIGINAL = "pyinfra.api.util.get_operation_order_from_stack"
FAST = "tasks.pyinfra_fast.operation_order_from_stack"


def run(which: str, cwd, inventory, env: dict) -> dict:
    env = dict(os.environ, PYINFRA_FAKE_DELAY="0", PYINFRA_FAKE_DELAY_JITTER="0", PYTHONPATH=str(REPO_ROOT), **env)
    r = subprocess.run([sys.executable, "-c", RUNNER, which, str(inventory)], cwd=cwd, env=env, capture_output=True,
                       text=True, timeout=300)
    lines = r.stdout.splitlines()
    result = next((json.loads(x.split(" ", 1)[1]) for x in lines if x.startswith("FAKE-DRIVER-JSON ")), None)
    assert result is not None, r.stdout[-3000:] + r.stderr[-3000:]
    result["used"] = next(x.split(" ", 1)[1] for x in lines if x.startswith("ORDER-FUNCTION "))
    return result


def assert_same_run(original: dict, fast: dict) -> None:
    assert (original["used"], fast["used"]) == (ORIGINAL, FAST)
    assert original["error"] == fast["error"]
    assert fast["op_orders"] == original["op_orders"]  # every host, every operation: its hash and line numbers
    assert fast["ops_by_host"] == original["ops_by_host"] and fast["op_names"] == original["op_names"]
    assert fast["by_host"] == original["by_host"]  # and so the same commands, in the same order


@pytest.fixture(scope="module")
def secrets(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("secrets")
    env = {"SPARKCTL_TEST_SECRETS": str(tmp / "secrets"), "GX10_HOSTS": "", "FAKE_KIND": "dgx"}
    for var, token in (("SPARK_API_TOKEN_FILE", API_TOKEN), ("SPARK_SCRAPE_TOKEN_FILE", SCRAPE_TOKEN)):
        path = tmp / var.lower()
        path.write_text(token)
        path.chmod(0o600)
        env[var] = str(path)
    return env


def test_the_real_deploy_gets_pyinfras_own_order_for_every_operation_of_every_host(tmp_path, secrets):
    inventory = tmp_path / "inventory_two.py"
    inventory.write_text("from tests.standins.gx10_inventory import _data\n"
                         "gx10 = [(f'@fake/spark-{i}', dict(_data)) for i in (1, 2)]\n")
    original, fast = (run(which, REPO_ROOT, inventory, secrets) for which in ("original", "fast"))
    assert_same_run(original, fast)
    assert original["error"] == "No hosts remaining!"  # the whole deploy, up to the health step no fake box passes
    counts = [len(ops) for ops in fast["op_orders"].values()]
    assert len(counts) == 2 and counts[0] == counts[1] > 80, counts  # both hosts, every step up to health


# Operations reached the ways pyinfra's line-number ordering has to follow: from nested functions called in an
# order other than their definitions', in loops (with and without host.loop, pyinfra 3's preserve_loop_order, inside a function:
# pyinfra #814), from a context manager's __enter__/__exit__ around a function call (#795), from nested @deploy functions,
# and as a call spanning several lines. The names say the order they must run in.
NESTED_DEPLOY = '''
from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import server

from tasks import pyinfra_fast

pyinfra_fast.install()


def later(n):
    server.shell(name=f"{n:02d} later", commands=["true"])


def looped(start):
    for i in host.loop([0, 1, 2]):
        later(start + i)


class Around:
    def __enter__(self):
        server.shell(name="06 enter", commands=["true"])

    def __exit__(self, *exc):
        server.shell(name="08 exit", commands=["true"])


@deploy("inner")
def inner():
    server.shell(name="10 inner", commands=["true"])


@deploy("outer")
def outer():
    server.shell(name="09 outer", commands=["true"])
    inner()
    server.shell(
        name="11 outer again",
        commands=["true"],
    )


server.shell(name="00 first", commands=["true"])
later(1)
looped(2)
server.shell(name="05 top", commands=["true"])
with Around():
    later(7)
outer()
for n in (12, 13):
    server.shell(name=f"{n:02d} loop", commands=["true"])
'''


def test_operations_from_nested_functions_loops_and_deploys_keep_pyinfras_order(tmp_path):
    (tmp_path / "deploy.py").write_text(NESTED_DEPLOY)
    (tmp_path / "inventory.py").write_text("hosts = ['@fake/a', '@fake/b']\n")
    original, fast = (run(which, tmp_path, tmp_path / "inventory.py", {}) for which in ("original", "fast"))
    assert_same_run(original, fast)
    names = [n.split(" | ")[-1] for n in fast["ops"]]
    assert names == sorted(names) and len(names) == 14, names  # as the code reads (the loops' three times each)


def test_the_replacement_returns_the_originals_list_called_from_anywhere():
    """Called directly from a test (not from pyinfra's operation code), with and without a deploy file on the
    stack: the same list as pyinfra's own (whose own frame never counts)."""

    class State:
        current_op_file_number = 3
        current_deploy_filename = None

    state, both = State(), (util.get_operation_order_from_stack, pyinfra_fast.operation_order_from_stack)
    for deploy_file in (None, __file__):
        state.current_deploy_filename = deploy_file
        original, fast = [f(state) for f in both]  # one line: both called from the same frames
        assert fast == original and len(fast) >= 2, (deploy_file, fast, original)


def test_global_arguments_are_pyinfras_and_each_call_gets_its_own_list():
    first = pyinfra_fast.global_arguments()
    assert first == pyinfra_fast._ORIGINAL_ARGUMENTS()
    first.clear()
    assert pyinfra_fast.global_arguments() == pyinfra_fast._ORIGINAL_ARGUMENTS() != []


@pytest.fixture
def pyinfras_own(monkeypatch):
    """pyinfra's own functions in place, restored after the test whatever it installs."""
    operation_module = importlib.import_module("pyinfra.api.operation")
    monkeypatch.setattr(operation_module, "get_operation_order_from_stack", util.get_operation_order_from_stack)
    monkeypatch.setattr(arguments, "all_global_arguments", pyinfra_fast._ORIGINAL_ARGUMENTS)
    monkeypatch.setattr(facts, "all_global_arguments", pyinfra_fast._ORIGINAL_ARGUMENTS)
    return operation_module


def test_install_replaces_pyinfras_functions_only_on_the_pinned_version(pyinfras_own, caplog):
    pinned = pyinfra_fast.pinned_version()
    assert pinned == "3.10.0"  # requirements.txt's pin (the version the replacement was written against)
    caplog.set_level("INFO", logger="pyinfra")
    assert pyinfra_fast.install(installed="3.11.0") is False
    assert pyinfras_own.get_operation_order_from_stack is util.get_operation_order_from_stack
    assert arguments.all_global_arguments is facts.all_global_arguments is pyinfra_fast._ORIGINAL_ARGUMENTS
    assert "pyinfra 3.11.0 is not the pinned 3.10.0" in caplog.text
    assert pyinfra_fast.install() is True  # the installed pyinfra is the pinned one
    assert pyinfras_own.get_operation_order_from_stack is pyinfra_fast.operation_order_from_stack
    assert arguments.all_global_arguments is facts.all_global_arguments is pyinfra_fast.global_arguments
