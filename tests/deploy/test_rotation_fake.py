"""A rotation window through the deploy against pyinfra's @fake connector: the gateway asks the boxes with the new
token before its bridge sends it (after every box's steps), and no token reaches a command line."""

from __future__ import annotations

import pytest

from tests.conftest import API_TOKEN, SCRAPE_TOKEN
from tests.deploy.test_gateway_fake import GW, fake_with

NEW = "nEw-" + "0123456789abcdefABCDEF_" * 2  # the window's API token (api_token.next)


@pytest.fixture(scope="module")
def window(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("rotation")
    nxt = tmp / "api_token.next"
    nxt.write_text(NEW + "\n")
    nxt.chmod(0o600)
    return fake_with("dgx", tmp, "1")


def test_the_gateway_asks_every_box_before_its_bridge_sends_the_new_token(window):
    ops = window["ops_by_host"][GW]
    ask = ops.index("Gateway: vLLM's router | Every box accepts the new API token (rotation window)")
    bridge = ops.index("Gateway: vLLM's router | Bridge's bearer for the boxes (root-only)")
    assert ask < bridge, ops
    started = [ln.split("Starting operation: ", 1)[1].strip() for ln in window["log"].splitlines()
               if "Starting operation: " in ln]
    assert started.index(ops[ask]) > max(i for i, op in enumerate(started) if op.startswith("TLS proxy | "))


def test_no_token_of_the_window_reaches_a_command_line(window):
    commands = "\n".join(window["commands"])
    for token in (API_TOKEN, NEW, SCRAPE_TOKEN):
        assert token not in commands


def test_without_a_window_the_gateway_asks_nothing(tmp_path):
    out = fake_with("dgx", tmp_path, "1")
    assert not any("rotation window" in op for op in out["ops_by_host"][GW])
