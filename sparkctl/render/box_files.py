"""The system files the deploy writes besides the vLLM units and env files (sparkctl/render/units.py) and the
monitoring ones (monitoring.py): the proxy's nginx site and token file, earlyoom's arguments, sshd's memory floor,
the CX7 link's netplan file (the Ray units: ray.py). The tasks upload what these render; `python -m sparkctl check` renders
the same and runs the real validators on it (sparkctl/check/render.py). Pure functions of the typed settings.
"""

from __future__ import annotations

from collections.abc import Sequence

from sparkctl.config.schema import GroupData
from sparkctl.render.monitoring import scrape_targets
from sparkctl.render.units import render_template

NGINX_DIR = "/etc/nginx"  # Debian/Ubuntu layout: sites-available/, sites-enabled/
TLS_DIR = f"{NGINX_DIR}/sparkctl-tls"
TOKEN_FILE = f"{NGINX_DIR}/sparkctl-token.conf"
SITE = f"{NGINX_DIR}/sites-available/sparkctl.conf"
CERT_PATH, KEY_PATH = f"{TLS_DIR}/server.pem", f"{TLS_DIR}/server.key"
EARLYOOM_DEFAULTS = "/etc/default/earlyoom"  # the Debian/Ubuntu package's unit reads $EARLYOOM_ARGS from it
SSHD_DROPIN = "/etc/systemd/system/ssh.service.d/sparkctl-memory.conf"


def site(cfg: GroupData, services, token_file: str = TOKEN_FILE, cert_path: str = CERT_PATH,
         key_path: str = KEY_PATH) -> str:
    """The proxy's nginx site for these services (the API ones: a tensor-parallel worker's has no proxy)."""
    return render_template("nginx-sparkctl.conf.j2", d=cfg, services=services,
                           scrape_targets=scrape_targets(cfg, services), token_file=token_file, cert_path=cert_path,
                           key_path=key_path)


def each_token(tokens: str | Sequence[str]) -> tuple[str, ...]:
    """One token, or the tokens a proxy accepts during a rotation window (secrets.Tokens.accepted)."""
    return (tokens,) if isinstance(tokens, str) else tuple(tokens)


def tokens(cfg: GroupData, api_token: str | Sequence[str], scrape_token: str | Sequence[str]) -> str:
    """The root-only file of both token maps: the API token(s), and the scrape token(s) (never an API token); two of
    each during a rotation window (docs/operating.md "Rotating a secret")."""
    return render_template("nginx-token.conf.j2", d=cfg, tokens=each_token(api_token),
                           scrape_tokens=each_token(scrape_token))


# /proc/<pid>/comm names (the kernel keeps 15 characters) earlyoom's regexes are held to (sparkctl/check/render.py):
EARLYOOM_VLLM = ("vllm", "VLLM::EngineCor", "VLLM::Worker_TP")  # vLLM's API server, engine, workers: killed first
EARLYOOM_VITAL = ("systemd", "systemd-journal", "systemd-logind", "systemd-udevd", "dbus-daemon", "sshd",
                  "sshd-session", "nginx")  # what keeps the box reachable and serving: --avoid covers each
# never preferred: the vital ones, and the python the deploy's own helpers (rollout.py, fetch_checkpoint.py) run as
EARLYOOM_NEVER_PREFER = (*EARLYOOM_VITAL, "python3", "python")


def earlyoom(cfg: GroupData) -> str:
    return render_template("earlyoom.j2", d=cfg)


def sshd_dropin(cfg: GroupData) -> str:
    return render_template("sshd-memory.conf.j2", d=cfg)


def netplan(cfg: GroupData, host_name: str) -> str:
    return render_template("netplan-cx7.yaml.j2", d=cfg, addresses=cfg.CX7_ADDRESSES[host_name])

