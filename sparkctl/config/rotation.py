"""Rotating a secret without a refused request: a window the operator opens and closes (docs/operating.md
"Rotating a secret").

The state is the secret files themselves, never a setting: while `<file>.next` lies beside `<file>` (both private,
in SECRETS_DIR), the rotation of that secret is open. What the deploy does with it:

- api_token, scrape_token: every box's proxy and every gateway's front accept both tokens; the gateway's bridge
  sends the new one (every box accepts it: the boxes' steps run before the gateway's, tasks/gateway.py). Finishing
  moves `.next` over the file: the next deploy accepts the new token alone, everywhere, in the same run.
- vrrp_password: keepalived's peers must agree on it (a VRRP advert with another password is dropped, and a backup
  that hears no advert for 3 intervals takes the VIP too), so the window changes nothing on the gateways and
  finishing changes the password on every gateway in one operation, which pyinfra runs on all of them at once.
- tls: a new leaf under the same CA needs no window (nginx reloads gracefully; clients trust the CA, not the
  leaf): `reissue_leaves` issues every generated leaf again, the next deploy installs them.

Pure file logic on the control machine; nothing here reaches a host.
"""

from __future__ import annotations

import datetime as dt
import os
import secrets as _stdlib_secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sparkctl.config import pki, schema, secrets
from sparkctl.errors import SettingError


@dataclass(frozen=True)
class Rotatable:
    """A secret with a rotation window: where it lives, how a fresh one is made, how it is read (and checked)."""

    path: Callable[[schema.GroupData], Path]
    fresh: Callable[[], str]
    check: Callable[[schema.GroupData], object]  # reads the secret and its .next, refusing a bad one
    window: str  # what the deploy does while the window is open (printed by `secrets rotate`)


def _check_scrape(cfg: schema.GroupData) -> object:
    return secrets.read_scrape_tokens(cfg, secrets.read_api_tokens(cfg))


ROTATABLE = {
    "api_token": Rotatable(secrets.api_token_path, lambda: _stdlib_secrets.token_urlsafe(32), _check_scrape,
                           "every box and gateway accepts the current and the new token; the bridge sends the new"),
    "scrape_token": Rotatable(secrets.scrape_token_path, lambda: _stdlib_secrets.token_urlsafe(32), _check_scrape,
                              "every box's and gateway's scrape paths accept the current and the new token"),
    "vrrp_password": Rotatable(secrets.vrrp_password_path,
                               lambda: _stdlib_secrets.token_hex(secrets.VRRP_PASSWORD_MAX // 2),
                               secrets.read_vrrp_password,
                               "nothing changes yet: keepalived's peers must agree, so the new password is installed "
                               "on every gateway at once by the deploy after `secrets finish`"),
}
TLS = "tls"  # the generated leaves: reissued in one step (no window)
NAMES = (*ROTATABLE, TLS)


def _rotatable(name: str) -> Rotatable:
    if name not in ROTATABLE:
        raise SettingError("secret", name, f"one of {', '.join(NAMES)}",
                           "tls has no window: `secrets rotate tls` reissues the leaves in one step")
    return ROTATABLE[name]


def is_open(cfg: schema.GroupData, name: str) -> bool:
    return os.path.lexists(secrets.next_path(_rotatable(name).path(cfg)))


def open_window(cfg: schema.GroupData, name: str) -> Path:
    """Write a fresh successor beside the secret (0600, never over an existing one); returns its path. Refused when
    the secret itself is missing or bad (nothing to rotate from) or a window is already open."""
    spec = _rotatable(name)
    current, nxt = spec.path(cfg), secrets.next_path(spec.path(cfg))
    if os.path.lexists(nxt):
        since = dt.datetime.fromtimestamp(nxt.lstat().st_mtime, dt.timezone.utc)
        raise SettingError("secret", name, "a secret with no rotation open",
                           f"{nxt} exists (written {since:%Y-%m-%d %H:%M} UTC): finish it with `python -m sparkctl "
                           f"secrets finish {name}`, or abandon it with `rm {nxt}` and a deploy")
    if not current.exists():
        raise SettingError("secret", name, f"a secret that exists ({current})", "There is nothing to rotate from: "
                           "create it (docs/operating.md \"Secrets\") and deploy")
    spec.check(cfg)  # the current one must be readable and valid before a window opens beside it
    fd = os.open(nxt, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(spec.fresh() + "\n")
    try:
        spec.check(cfg)
    except SettingError:
        nxt.unlink()
        raise
    return nxt


def finish_window(cfg: schema.GroupData, name: str) -> Path:
    """Close the window: the successor, checked, replaces the secret (one atomic rename; the old one is gone from
    the control machine). Returns the secret's path. Refused when no window is open."""
    spec = _rotatable(name)
    current, nxt = spec.path(cfg), secrets.next_path(spec.path(cfg))
    if not os.path.lexists(nxt):
        raise SettingError("secret", name, f"a secret whose rotation is open ({nxt} exists)",
                           f"Open one first: python -m sparkctl secrets rotate {name}")
    spec.check(cfg)
    os.replace(nxt, current)
    return current


def state(cfg: schema.GroupData) -> dict[str, bool]:
    """Each rotatable secret: is its window open?"""
    return {name: is_open(cfg, name) for name in ROTATABLE}


def _leaf_names(leaf: Path) -> list[str]:
    """The DNS names and addresses a generated leaf's subjectAltName carries (what it is issued for again)."""
    from cryptography import x509

    cert = x509.load_pem_x509_certificates(leaf.read_bytes())[0]
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    return [str(n) for n in san.get_values_for_type(x509.DNSName)] + \
        [str(n) for n in san.get_values_for_type(x509.IPAddress)]


def reissue_leaves(cfg: schema.GroupData) -> list[Path]:
    """Every leaf of the generated CA (<SECRETS_DIR>/pki/<host>.pem) issued again with the names it had, a new key
    each; the CA is kept, so clients notice nothing once the deploy reloads nginx. Refused with the operator's own
    certificate (TLS_CERT_FILE): its files are replaced by the operator."""
    if cfg.TLS_CERT_FILE:
        raise SettingError("TLS_CERT_FILE", cfg.TLS_CERT_FILE, "empty (the generated CA) for `secrets rotate tls`",
                           "Your own certificate rotates by replacing TLS_CERT_FILE and TLS_KEY_FILE's files, then "
                           "deploying (docs/operating.md \"Rotating a secret\")")
    folder = secrets.secrets_dir(cfg) / "pki"
    leaves = sorted(p for p in folder.glob("*.pem") if p.name != "ca.pem" and p.with_suffix(".key").exists())
    out = []
    for leaf in leaves:
        names = _leaf_names(leaf)
        leaf.unlink()
        out.append(pki.ensure_server_cert(folder, leaf.stem, names)[0])
    return out


@dataclass(frozen=True)
class Answer:
    box: str
    url: str
    status: int | None  # None: no answer (down, unreachable)
    error: str = ""


def ask_boxes(targets: list[tuple[str, str]], token: str, verify, timeout_s: float) -> list[Answer]:
    """Each box's proxy asked with `token` (targets: (box, https URL of a route its proxy publishes)): what the
    gateway's bridge will send it. verify: the CA file (or ssl context) its certificate is checked against."""
    import httpx

    out = []
    with httpx.Client(verify=verify, timeout=timeout_s) as client:
        for box, url in targets:
            try:
                r = client.get(url, headers={"Authorization": f"Bearer {token}"})
                out.append(Answer(box, url, r.status_code))
            except httpx.HTTPError as exc:
                out.append(Answer(box, url, None, f"{type(exc).__name__}: {exc}"))
    return out


def refusing(answers: list[Answer]) -> list[Answer]:
    """The boxes that answered 401: their proxy does not accept the token (yet)."""
    return [a for a in answers if a.status == 401]
