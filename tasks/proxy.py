"""TLS proxy: nginx from the distribution, one TLS port, a path prefix per served model, bearer token everywhere,
only the API routes of PROXY_ROUTES published (everything else 404), and the scrape paths behind their own token."""

from __future__ import annotations

from io import StringIO

from pyinfra import host
from pyinfra.api import deploy
from pyinfra.operations import files, server, systemd
from pyinfra.operations.util import any_changed

from sparkctl.config.secrets import read_api_tokens, read_scrape_tokens
from sparkctl.config.settings import Settings
from sparkctl.errors import Refused, SparkctlError
from sparkctl.render import box_files
from sparkctl.render.box_files import NGINX_DIR, SITE, TLS_DIR, TOKEN_FILE
from tasks.common import tls_material

__all__ = ["proxy", "render_site", "render_tokens"]


def render_site(settings: Settings, service_list) -> str:
    return box_files.site(settings.cfg, service_list)


def render_tokens(settings: Settings) -> str:
    """The root-only file of both token maps: the API token, and the scrape token (never the API token); during a
    rotation window each map accepts the current token and the new one (docs/operating.md "Rotating a secret")."""
    api = read_api_tokens(settings.cfg)
    return box_files.tokens(settings.cfg, api.accepted, read_scrape_tokens(settings.cfg, api).accepted)


@deploy("TLS proxy")
def proxy(settings: Settings, service_list: list | None = None) -> None:
    cfg = settings.cfg
    if not settings.role.serves_api:
        return  # a tensor-parallel worker has no API: only the head is behind the proxy
    service_list = [s for s in (service_list if service_list is not None else settings.services) if not s.headless]
    try:  # checked while pyinfra prepares, before any command reaches the box
        tokens = render_tokens(settings)
        site = render_site(settings, service_list)
    except SparkctlError as exc:
        raise Refused(f"{settings.host_name}: {exc}") from None
    cert, key, ca = tls_material(settings)
    files.directory(name=f"Create {TLS_DIR}", path=TLS_DIR, user="root", group="root", mode="0700")
    files.directory(name=f"Create {cfg.DRAIN_DIR} (drain files of the rollouts)", path=cfg.DRAIN_DIR, user="root",
                    group="root", mode="0755")
    changes = [
        files.put(name="TLS certificate chain", src=str(cert), dest=f"{TLS_DIR}/server.pem", user="root",
                  group="root", mode="0644"),
        files.put(name="TLS private key (root-only)", src=str(key), dest=f"{TLS_DIR}/server.key", user="root",
                  group="root", mode="0600", _temp_dir=TLS_DIR),
        files.put(name="Bearer tokens for the proxy: API and scrape (root-only)", src=StringIO(tokens),
                  dest=TOKEN_FILE, user="root", group="root", mode="0600", _temp_dir=TLS_DIR),
        files.put(name="nginx site sparkctl", src=StringIO(site), dest=SITE,
                  user="root", group="root", mode="0644"),
        files.link(name="Enable site sparkctl", path=f"{NGINX_DIR}/sites-enabled/sparkctl.conf", target=SITE),
        files.link(name="Disable the distribution's default site", path=f"{NGINX_DIR}/sites-enabled/default",
                   present=False),
    ]
    changed = any_changed(*changes)
    systemd.service(name="nginx enabled and running", service="nginx.service", running=True, enabled=True)
    server.shell(name="Check the nginx configuration, then reload nginx", commands=["nginx -t -q",
                 "systemctl reload nginx"], _if=changed)
    if ca is not None:
        host.noop(f"clients verify the proxy with the generated CA: {ca}")
