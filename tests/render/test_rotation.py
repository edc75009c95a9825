"""A secret's rotation window (sparkctl/config/rotation.py): `secrets rotate` writes the new token beside the current
one, the deploy's files then accept both (the box's proxy and the gateway's front, run by the real nginx), the
bridge sends the new one; `secrets finish` leaves the new one alone and the old one is refused with 401 everywhere.
The same on the simulated fleet, with requests through the VIP: tests/e2e/test_rotation.py."""

from __future__ import annotations

import dataclasses
import os
import re
import shutil
import signal
import ssl
import stat
import time
import types
from pathlib import Path

import pytest

from sparkctl.__main__ import main
from sparkctl.config import groupdata, pki, rotation, secrets
from sparkctl.errors import SettingError
from sparkctl.render import box_files, router
from tests.conftest import API_TOKEN, FAKE_LOCK, SCRAPE_TOKEN, typed
from tests.gateway import harness
from tests.render.test_proxy import echo_server, free_port, nginx_running, request
from tests.render.test_render import settings_for

nginx = pytest.mark.skipif(shutil.which("nginx") is None, reason="nginx not installed (apt-get install nginx-light)")
RELOAD_S = 1.0  # nginx's new workers answer after a SIGHUP within this, s
OTHER = "a" * 20 + "0123456789abcdef0123456789abcdef"  # a valid token nobody configured


@pytest.fixture
def data(tmp_path, monkeypatch):
    """Group data of a real box with its secrets in tmp (api_token, scrape_token, vrrp_password), none open."""
    for env in (secrets.API_TOKEN_ENV, secrets.SCRAPE_TOKEN_ENV, secrets.HF_TOKEN_ENV):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("GX10_HOSTS", "")
    folder = tmp_path / "secrets"
    folder.mkdir(mode=0o700)
    for name, value in (("api_token", API_TOKEN), ("scrape_token", SCRAPE_TOKEN), ("vrrp_password", "0a1b2c3d")):
        (folder / name).write_text(value + "\n")
        (folder / name).chmod(0o600)
    d = groupdata.load(["all", "gx10"])
    d.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(folder))
    return d


def _next(cfg, name: str) -> str:
    return secrets.next_path(rotation.ROTATABLE[name].path(cfg)).read_text().strip()


def test_rotate_opens_a_window_the_readers_see_and_finish_closes_it(data):
    cfg = typed(data)
    assert secrets.read_api_tokens(cfg) == secrets.Tokens(API_TOKEN)
    path = rotation.open_window(cfg, "api_token")
    assert path.name == "api_token.next" and stat.S_IMODE(path.stat().st_mode) == 0o600
    new = _next(cfg, "api_token")
    api = secrets.read_api_tokens(cfg)
    assert api.accepted == (API_TOKEN, new) and api.sent == new and secrets.read_api_token(cfg) == API_TOKEN
    assert rotation.state(cfg) == {"api_token": True, "scrape_token": False, "vrrp_password": False}
    with pytest.raises(SettingError, match=r"secrets finish api_token.*rm .*api_token\.next"):
        rotation.open_window(cfg, "api_token")  # one window at a time: the second would lose the first's token
    assert rotation.finish_window(cfg, "api_token") == secrets.api_token_path(cfg)
    assert secrets.read_api_tokens(cfg) == secrets.Tokens(new) and not path.exists()
    with pytest.raises(SettingError, match="secrets rotate api_token"):
        rotation.finish_window(cfg, "api_token")
    with pytest.raises(SettingError, match="api_token, scrape_token, vrrp_password, tls"):
        rotation.open_window(cfg, "api-token")


@pytest.mark.parametrize("text,mode,match", [
    ("short", 0o600, "at least 128 random bits"), (API_TOKEN, 0o600, "different from the current one"),
    (OTHER + " x", 0o600, "no whitespace"), (OTHER, 0o640, "mode 0640"), ("", 0o600, "non-empty")])
def test_a_bad_successor_is_refused_by_every_reader_naming_its_file(data, text, mode, match):
    """`check` and the preflight read the API token with read_api_token: a bad .next fails there, before a proxy."""
    cfg = typed(data)
    nxt = secrets.next_path(secrets.api_token_path(cfg))
    nxt.write_text(text + "\n")
    nxt.chmod(mode)
    with pytest.raises(SettingError, match=match) as exc:
        secrets.read_api_token(cfg)
    assert "api_token.next" in str(exc.value)


def test_a_scrape_token_is_never_an_api_token_in_or_out_of_either_window(data):
    cfg = typed(data)
    rotation.open_window(cfg, "api_token")
    nxt = secrets.next_path(secrets.scrape_token_path(cfg))
    nxt.write_text(_next(cfg, "api_token") + "\n")
    nxt.chmod(0o600)
    with pytest.raises(SettingError, match="different from the API token"):
        secrets.read_scrape_tokens(cfg, secrets.read_api_tokens(cfg))
    with pytest.raises(SettingError, match="different from the API token"):
        rotation.finish_window(cfg, "scrape_token")


def test_vrrp_password_changes_only_when_the_window_closes(data):
    """Peers must agree: keepalived keeps the current password through the window and takes the new one at finish
    (every gateway in the same deploy step)."""
    cfg = typed(data)
    rotation.open_window(cfg, "vrrp_password")
    new = _next(cfg, "vrrp_password")
    assert re.fullmatch(r"[0-9a-f]{8}", new) and secrets.read_vrrp_password(cfg) == "0a1b2c3d"
    rotation.finish_window(cfg, "vrrp_password")
    assert secrets.read_vrrp_password(cfg) == new


def test_tls_reissues_every_generated_leaf_under_the_same_ca(data):
    cfg = typed(data)
    folder = secrets.secrets_dir(cfg) / "pki"
    leaf, _key, ca = pki.ensure_server_cert(folder, "spark-1", ["10.0.0.11", "spark-1"])
    before, ca_before = leaf.read_bytes(), ca.read_bytes()
    assert rotation.reissue_leaves(cfg) == [leaf]
    assert leaf.read_bytes() != before and ca.read_bytes() == ca_before
    from cryptography import x509

    new = x509.load_pem_x509_certificates(leaf.read_bytes())[0]  # verifies against the CA clients already trust
    new.verify_directly_issued_by(x509.load_pem_x509_certificate(ca_before))
    assert sorted(rotation._leaf_names(leaf)) == ["10.0.0.11", "spark-1"]
    with pytest.raises(SettingError, match="TLS_CERT_FILE"):
        rotation.reissue_leaves(typed({**data, "TLS_CERT_FILE": str(leaf), "TLS_KEY_FILE": str(_key)}))


def test_the_command_opens_and_finishes_a_window(data, tmp_path, monkeypatch, capsys):
    """`python -m sparkctl secrets rotate|status|finish` on the files the deploy reads (here through the token's
    environment variable, as an operator with SPARK_API_TOKEN_FILE has it)."""
    token = tmp_path / "secrets" / "api_token"
    monkeypatch.setenv(secrets.API_TOKEN_ENV, str(token))
    monkeypatch.setenv(secrets.SCRAPE_TOKEN_ENV, str(tmp_path / "secrets" / "scrape_token"))
    assert main(["secrets", "rotate", "api_token"]) == 0
    assert "api_token.next" in capsys.readouterr().out and token.with_name("api_token.next").exists()
    assert main(["secrets", "status"]) == 0 and "api_token      OPEN" in capsys.readouterr().out
    assert main(["secrets", "rotate", "api_token"]) == 2  # already open: refused, nothing overwritten
    assert main(["secrets", "finish", "api_token"]) == 0
    assert token.read_text().strip() != API_TOKEN and not token.with_name("api_token.next").exists()


# --- the rendered files, run by the real nginx -----------------------------------------------------------------


def _box_site(data, tmp: Path):
    """The box's proxy as tasks/proxy.py renders it now (its token file from the secrets' current state)."""
    from tasks.proxy import render_tokens

    data = {**data, "PROXY_PORT": free_port()}
    s = settings_for(data)
    upstream = echo_server()
    services = [dataclasses.replace(svc, port=upstream.server_port) for svc in s.services if not svc.headless]
    cert, key, ca = pki.ensure_server_cert(tmp / "pki", "test-box", ["127.0.0.1"])
    tokens = tmp / "token.conf"

    def write_tokens():
        tokens.write_text(render_tokens(types.SimpleNamespace(cfg=s.cfg)))

    write_tokens()
    site = box_files.site(s.cfg, services, token_file=str(tokens), cert_path=str(cert), key_path=str(key))
    served = services[0].served_name
    return site, write_tokens, ssl.create_default_context(cafile=str(ca)), served, s.cfg


def _statuses(address, ctx, served: str, tokens: dict[str, str]) -> dict[str, tuple[int, int]]:
    """Each named token: (status of the API route, status of the scrape path) through the proxy."""
    return {name: (request(address, ctx, "GET", f"/{served}/v1/models", t)[0],
                   request(address, ctx, "GET", f"/{served}/metrics", t)[0]) for name, t in tokens.items()}


@nginx
def test_the_box_proxy_accepts_both_tokens_in_the_window_and_only_the_new_after(data, tmp_path):
    cfg = typed(data)
    site, write_tokens, ctx, served, box_cfg = _box_site(data, tmp_path)
    with nginx_running(tmp_path, site) as address:
        proc_pid = int((tmp_path / "nginx.pid").read_text())

        def reload():  # the deploy's `systemctl reload nginx`: the master rereads the token file
            write_tokens()
            os.kill(proc_pid, signal.SIGHUP)
            time.sleep(RELOAD_S)

        rotation.open_window(cfg, "api_token")
        rotation.open_window(cfg, "scrape_token")
        new_api, new_scrape = _next(cfg, "api_token"), _next(cfg, "scrape_token")
        tokens = {"old api": API_TOKEN, "new api": new_api, "old scrape": SCRAPE_TOKEN, "new scrape": new_scrape,
                  "other": OTHER}
        assert _statuses(address, ctx, served, tokens)["new api"] == (401, 401)  # not deployed yet
        reload()
        assert _statuses(address, ctx, served, tokens) == {
            "old api": (200, 401), "new api": (200, 401), "old scrape": (401, 200), "new scrape": (401, 200),
            "other": (401, 401)}
        # what the gateway asks before its bridge sends the new token: this box accepts it, not a stranger's
        url = f"https://127.0.0.1:{box_cfg.PROXY_PORT}/{served}/v1/models"
        assert rotation.refusing(rotation.ask_boxes([("box", url)], new_api, ctx, 5)) == []
        assert [a.box for a in rotation.refusing(rotation.ask_boxes([("box", url)], OTHER, ctx, 5))] == ["box"]
        rotation.finish_window(cfg, "api_token")
        rotation.finish_window(cfg, "scrape_token")
        reload()
        assert _statuses(address, ctx, served, tokens) == {
            "old api": (401, 401), "new api": (200, 401), "old scrape": (401, 401), "new scrape": (401, 200),
            "other": (401, 401)}


def _gateway_site(data, tmp: Path):
    """The gateway's front and bridge as tasks/gateway.py renders them from the secrets' current state, on free
    loopback ports (its routers are not running: an accepted request answers 503, a refused one 401)."""
    cfg = typed({**data, "GATEWAY_FRONT_PORT": free_port(), "ROUTER_BRIDGE_PORT": free_port()})
    pools = router.pools(cfg, [("spark-1", "127.0.0.1", free_port(), [types.SimpleNamespace(
        served_name="coder", role="coder", headless=False)])])
    cert, key, ca = pki.ensure_server_cert(tmp / "pki", "gateway", ["127.0.0.1"])

    def write_tokens():
        api = secrets.read_api_tokens(cfg)
        (tmp / "gw-token.conf").write_text(router.tokens(cfg, api.accepted,
                                                         secrets.read_scrape_tokens(cfg, api).accepted))
        (tmp / "bridge.conf").write_text(router.bridge_auth(api.sent))

    write_tokens()
    site = router.site(cfg, pools, token_file=str(tmp / "gw-token.conf"), bridge_auth_file=str(tmp / "bridge.conf"),
                       ca_file=str(ca), cert_path=str(cert), key_path=str(key))
    site = site.replace(f"listen [::]:{cfg.GATEWAY_FRONT_PORT} ssl http2;", "")  # no IPv6 needed here
    site = site.replace(f"listen {cfg.GATEWAY_FRONT_PORT} ssl http2;", f"listen {cfg.GATEWAY_FRONT_PORT} ssl;")
    return site, write_tokens, ssl.create_default_context(cafile=str(ca))


@nginx
def test_the_gateway_front_accepts_both_in_the_window_its_bridge_sends_the_new_and_only_the_new_after(data, tmp_path):
    cfg = typed(data)
    site, write_tokens, ctx = _gateway_site(data, tmp_path)
    rotation.open_window(cfg, "api_token")
    new = _next(cfg, "api_token")
    write_tokens()
    r = harness.nginx_test(tmp_path, site)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "bridge.conf").read_text().splitlines()[-1] == f'proxy_set_header Authorization "Bearer {new}";'
    with nginx_running(tmp_path, site) as address:
        got = {name: request(address, ctx, "GET", "/coder/v1/models", t)[0]
               for name, t in (("old", API_TOKEN), ("new", new), ("other", OTHER))}
    assert got == {"old": 503, "new": 503, "other": 401}  # 503: accepted, its router is not running here
    rotation.finish_window(cfg, "api_token")
    write_tokens()
    assert harness.nginx_test(tmp_path, site).returncode == 0
    assert f'"Bearer {new}";' in (tmp_path / "bridge.conf").read_text()  # the bridge's token does not change
    with nginx_running(tmp_path, site) as address:
        got = {name: request(address, ctx, "GET", "/coder/v1/models", t)[0] for name, t in (("old", API_TOKEN),
                                                                                            ("new", new))}
    assert got == {"old": 401, "new": 503}
