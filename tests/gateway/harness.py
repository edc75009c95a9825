"""A gateway on loopback, every part real but vLLM: two box proxies rendered from the project's own template
(templates/nginx-sparkctl.conf.j2), each in front of a stand-in vLLM (tests/standins/vllm_openai.py); the real
vllm-router from PyPI in a cached venv; the gateway's nginx front + bridge rendered by sparkctl/render/router.py."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx

from sparkctl.config import pki
from sparkctl.render import box_files, router
from tests.render.test_proxy import free_port
from tests.standins import vllm_openai

BOXES = ("box-a", "box-b")
SERVED = "coder"
PIP_TIMEOUT_S = 300  # installing the router wheel from PyPI into the cache, s
START_TIMEOUT_S = 30  # nginx or the router answering after start, s
# the test's router: checks every second, out after 2 failures, back after 1 success (production: group_data/all.py)
FAST_HEALTH = dict(ROUTER_HEALTH_INTERVAL_S=1, ROUTER_HEALTH_TIMEOUT_S=1, ROUTER_HEALTH_FAILURE_THRESHOLD=2,
                   ROUTER_HEALTH_SUCCESS_THRESHOLD=1, ROUTER_RETRY_MAX_BACKOFF_MS=500)


def cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sparkctl-tests"


def router_venv(version: str) -> tuple[Path | None, str]:
    """(the vllm-router executable, "") from a venv cached per version, installed from PyPI on first use; or
    (None, why) when it cannot be installed here (PyPI unreachable, no wheel for this platform)."""
    venv = cache_dir() / f"vllm-router-{version}"
    exe = venv / "bin" / "vllm-router"
    if exe.exists():
        return exe, ""
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
        r = subprocess.run([str(venv / "bin/pip"), "install", "--disable-pip-version-check", "-q",
                            f"vllm-router=={version}"], capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as exc:
        return None, f"cannot create the router venv: {exc}"
    if r.returncode or not exe.exists():
        subprocess.run(["rm", "-rf", str(venv)], check=False)
        return None, f"pip install vllm-router=={version} failed (PyPI unreachable?): {r.stderr.strip()[-300:]}"
    return exe, ""


def nginx_conf(tmp: Path, site: str) -> Path:
    (tmp / "site.conf").write_text(site)
    temp = "".join(f"    {k}_temp_path {tmp}/{k};\n" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    conf = tmp / "nginx.conf"
    conf.write_text(f"daemon off;\nuser root;\npid {tmp}/nginx.pid;\nerror_log {tmp}/error.log;\nevents {{}}\n"
                    f"http {{\n    access_log off;\n{temp}    include {tmp}/site.conf;\n}}\n")
    return conf


def nginx_test(tmp: Path, site: str) -> subprocess.CompletedProcess:
    """The real validator: nginx -t on the site in a private prefix."""
    return subprocess.run(["nginx", "-t", "-p", str(tmp), "-c", str(nginx_conf(tmp, site))], capture_output=True,
                          text=True, timeout=60)


def wait_for(what: str, ok, timeout: float = START_TIMEOUT_S, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while True:
        try:
            got = ok()
            if got:
                return got
        except (OSError, httpx.HTTPError):
            pass
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not within {timeout} s")
        time.sleep(0.1)


@dataclasses.dataclass
class Box:
    name: str
    port: int
    standin: object
    tmp: Path
    drain_dir: Path
    proc: subprocess.Popen | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(["nginx", "-p", str(self.tmp), "-c", str(self.tmp / "nginx.conf")],
                                     stderr=subprocess.DEVNULL)
        wait_for(f"{self.name}'s proxy", lambda: _listening(self.port), proc=self.proc)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=10)

    def reload(self) -> None:
        self.proc.send_signal(signal.SIGHUP)
        time.sleep(0.5)  # nginx starts new workers; the old ones finish what they hold

    def drain(self, on: bool) -> None:
        """What the box's rollout does (sparkctl/box/drain.py): the drain file, then a graceful reload."""
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "sparkctl" / "box"))
        try:
            import drain
        finally:
            sys.path.pop(0)
        f = Path(drain.drain_file(str(self.drain_dir), SERVED))
        if on:
            f.write_text(f"add_header Retry-After 30 always;\nreturn 503 \"{SERVED} is restarting\\n\";\n")
        else:
            f.unlink(missing_ok=True)
        self.reload()


def _listening(port: int) -> bool:
    import socket

    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@dataclasses.dataclass
class Gateway:
    url: str
    ctx: ssl.SSLContext
    boxes: dict[str, Box]
    pool: router.Pool
    site: str
    exe: Path
    log: Path
    cfg: object
    procs: dict = dataclasses.field(default_factory=dict)  # standby (bool) -> its router process

    @property
    def router_proc(self) -> subprocess.Popen | None:
        return self.procs.get(False)

    def client(self, token: str | None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.Client(base_url=self.url, verify=self.ctx, headers=headers, timeout=30)

    def start_router(self, standby: bool = False) -> None:
        """The primary (or standby) router as its unit runs it: the rendered argv, this venv's executable."""
        argv = [str(self.exe), *router.router_argv(self.cfg, self.pool, standby)[1:]]
        self.procs[standby] = subprocess.Popen(argv, stdout=self.log.open("ab"), stderr=subprocess.STDOUT)

    def stop_router(self, standby: bool = False, sig: int = signal.SIGTERM) -> None:
        proc = self.procs.get(standby)
        if proc and proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)

    def wait_listening(self, standby: bool = False) -> None:
        port, _metrics = self.pool.ports(standby)
        wait_for(f"router (standby={standby}) listening", lambda: _listening(port), proc=self.procs[standby])


def _settings(tmp: Path, overrides: dict):
    """The shipped group data with loopback ports and a private drain folder, validated as the deploy does."""
    from sparkctl.config import groupdata
    from tests.conftest import API_TOKEN, FAKE_LOCK, SCRAPE_TOKEN
    from tests.render.test_render import settings_for

    data = groupdata.load(["all", "gx10"])
    data.update(MODEL_LOCK_FILE=FAKE_LOCK, SECRETS_DIR=str(tmp / "secrets"), **overrides)
    for name, token in (("SPARK_API_TOKEN_FILE", API_TOKEN), ("SPARK_SCRAPE_TOKEN_FILE", SCRAPE_TOKEN)):
        path = tmp / name.lower()
        path.write_text(token + "\n")
        path.chmod(0o600)
        os.environ[name] = str(path)
    os.environ["GX10_HOSTS"] = ""
    return settings_for(data)


def _box(tmp: Path, name: str, settings, ca_pki: Path) -> Box:
    """One box: a stand-in vLLM behind the project's own proxy site, on its own port and drain folder."""
    from tests.conftest import API_TOKEN, SCRAPE_TOKEN

    btmp = tmp / name
    btmp.mkdir()
    standin = vllm_openai.start(name, SERVED)
    port, drain = free_port(), btmp / "drain"
    drain.mkdir()
    cfg = settings.cfg.model_copy(update={"PROXY_PORT": port, "DRAIN_DIR": str(drain)})
    coder = next(s for s in settings.services if s.served_name == SERVED)
    coder = dataclasses.replace(coder, port=standin.server_port)
    cert, key, _ca = pki.ensure_server_cert(ca_pki, name, ["127.0.0.1", name])
    (btmp / "token.conf").write_text(box_files.tokens(cfg, API_TOKEN, SCRAPE_TOKEN))
    site = box_files.site(cfg, [coder], token_file=str(btmp / "token.conf"), cert_path=str(cert), key_path=str(key))
    nginx_conf(btmp, site)
    box = Box(name, port, standin, btmp, drain)
    box.start()
    return box


@contextlib.contextmanager
def gateway(tmp: Path, exe: Path, **overrides):
    """The whole gateway on loopback; yields a Gateway with the router running and both boxes in rotation."""
    from tests.conftest import API_TOKEN, SCRAPE_TOKEN

    ports = dict(GATEWAY_FRONT_PORT=free_port(), ROUTER_PORT_BASE=free_port(), ROUTER_METRICS_PORT_BASE=free_port(),
                 ROUTER_STANDBY_PORT_BASE=free_port(), ROUTER_STANDBY_METRICS_PORT_BASE=free_port(),
                 ROUTER_BRIDGE_PORT=free_port())
    settings = _settings(tmp, {**FAST_HEALTH, **ports, **overrides})
    cfg = settings.cfg
    ca_pki = tmp / "pki"
    boxes: dict[str, Box] = {}
    gw: Gateway | None = None
    gproc = None
    try:
        for name in BOXES:
            boxes[name] = _box(tmp, name, settings, ca_pki)
        workers = tuple(router.Worker(b.name, "127.0.0.1", b.port) for b in boxes.values())
        pool = router.Pool(SERVED, "coder", workers, cfg.ROUTER_PORT_BASE, cfg.ROUTER_METRICS_PORT_BASE,
                           cfg.ROUTER_STANDBY_PORT_BASE, cfg.ROUTER_STANDBY_METRICS_PORT_BASE)
        gtmp = tmp / "gateway"
        gtmp.mkdir()
        cert, key, ca = pki.ensure_server_cert(ca_pki, "gateway", ["127.0.0.1", "gateway"])
        (gtmp / "token.conf").write_text(router.tokens(cfg, API_TOKEN, SCRAPE_TOKEN))
        (gtmp / "bridge-auth.conf").write_text(router.bridge_auth(API_TOKEN))
        site = router.site(cfg, [pool], token_file=str(gtmp / "token.conf"),
                           bridge_auth_file=str(gtmp / "bridge-auth.conf"), ca_file=str(ca), cert_path=str(cert),
                           key_path=str(key))
        checked = nginx_test(gtmp, site)
        assert checked.returncode == 0, checked.stderr
        gproc = subprocess.Popen(["nginx", "-p", str(gtmp), "-c", str(gtmp / "nginx.conf")], stderr=subprocess.DEVNULL)
        wait_for("the gateway's nginx", lambda: _listening(cfg.GATEWAY_FRONT_PORT), proc=gproc)
        gw = Gateway(f"https://127.0.0.1:{cfg.GATEWAY_FRONT_PORT}", ssl.create_default_context(cafile=str(ca)),
                     boxes, pool, site, exe, gtmp / "router.log", cfg)
        for standby in (False, True):
            gw.start_router(standby)
        for standby in (False, True):
            gw.wait_listening(standby)
        wait_until_routed(gw)
        yield gw
    finally:
        if gw is not None:
            for standby in (False, True):
                gw.stop_router(standby)
        if gproc is not None:
            gproc.terminate()
            gproc.wait(timeout=10)
        for b in boxes.values():
            b.stop()
            b.standin.shutdown()
            b.standin.server_close()


def chat(client: httpx.Client, prompt: str = "hello", stream: bool = False) -> httpx.Response:
    return client.post(f"/{SERVED}/v1/chat/completions", json={"model": SERVED, "stream": stream,
                                                               "messages": [{"role": "user", "content": prompt}]})


def wait_until_routed(gw: Gateway, timeout: float = START_TIMEOUT_S) -> None:
    """Until a chat request through the front succeeds (the router found a healthy box)."""
    from tests.conftest import API_TOKEN

    with gw.client(API_TOKEN) as c:
        wait_for("a request routed through the gateway", lambda: chat(c).status_code == 200, timeout,
                 proc=gw.router_proc)
