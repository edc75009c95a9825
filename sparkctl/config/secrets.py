"""Secrets on the control machine: read from files named by environment variables, else from secrets/.

SPARK_API_TOKEN_FILE  bearer token every client sends to the proxy (required, non-empty)
SPARK_HF_TOKEN_FILE   Hugging Face token for gated/private repos (optional)
TLS certificate/key come from the TLS_CERT_FILE / TLS_KEY_FILE settings, or a local CA generated in secrets/pki.
Nothing here is ever put in argv, in pyinfra output or in the repository; on the box they land root-only 0600.
"""

from __future__ import annotations

import os
import secrets as _stdlib_secrets
from pathlib import Path

from sparkctl import REPO_ROOT
from sparkctl.config import schema
from sparkctl.errors import SettingError

API_TOKEN_ENV = "SPARK_API_TOKEN_FILE"
HF_TOKEN_ENV = "SPARK_HF_TOKEN_FILE"


def secrets_dir(cfg: schema.GroupData) -> Path:
    """SECRETS_DIR, relative to the repository unless absolute. cfg: the typed settings (TRANSITIONAL: or the raw
    group data the e2e scenarios and measure/quick.py still pass)."""
    d = Path(schema.as_group_data(cfg).SECRETS_DIR)
    return d if d.is_absolute() else REPO_ROOT / d


def api_token_path(cfg: schema.GroupData) -> Path:
    return Path(os.environ.get(API_TOKEN_ENV) or secrets_dir(cfg) / "api_token")


def hf_token_path(cfg: schema.GroupData) -> Path:
    return Path(os.environ.get(HF_TOKEN_ENV) or secrets_dir(cfg) / "hf_token")


def check_private(path: Path, setting: str) -> None:
    """A secret readable by group or others on the control machine is refused (README "Secrets")."""
    mode = path.stat().st_mode & 0o777
    if mode & 0o077:
        raise SettingError(setting, str(path), "a file only its owner can read (mode 0600 or 0400)",
                           f"It is mode {mode:04o}: chmod 600 {path}")


def _read(path: Path, setting: str) -> str:
    try:
        check_private(path, setting)
        return path.read_text().strip()
    except FileNotFoundError:
        raise SettingError(setting, str(path), "a readable file holding the secret",
                           f"Create it (mode 0600) or point {setting} at one") from None
    except OSError as exc:
        raise SettingError(setting, str(path), "a readable file holding the secret", str(exc)) from None


def read_api_token(cfg: schema.GroupData) -> str:
    path = api_token_path(cfg)
    token = _read(path, API_TOKEN_ENV)
    if not token:
        raise SettingError(API_TOKEN_ENV, str(path), "a file with a non-empty bearer token",
                           "An empty token would leave the proxy open")
    if any(c.isspace() or c in '"\\;' for c in token):
        raise SettingError(API_TOKEN_ENV, str(path), "a token without whitespace, quotes, backslashes or ';'")
    return token


def read_hf_token(cfg: schema.GroupData) -> str:
    """The HF token, or "" when no token file exists (public repositories need none); an empty file is refused
    (it would silently mean "no token")."""
    path = hf_token_path(cfg)
    if not path.exists() and not os.environ.get(HF_TOKEN_ENV):
        return ""
    token = _read(path, HF_TOKEN_ENV)
    if not token:
        raise SettingError(HF_TOKEN_ENV, str(path), "a file with a non-empty Hugging Face token",
                           "Delete it to download public repositories without a token")
    if any(c.isspace() for c in token):
        raise SettingError(HF_TOKEN_ENV, str(path), "a token without whitespace")
    return token


def _ensure_random_token(path: Path) -> Path:
    """Create a random token file (0600, in a 0700 folder) unless one exists: the simulated Spark's `sim up`."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_stdlib_secrets.token_urlsafe(32) + "\n")
    return path


def ensure_api_token(cfg: schema.GroupData) -> Path:
    return _ensure_random_token(api_token_path(cfg))


# --- the operator's TLS pair (TLS_CERT_FILE / TLS_KEY_FILE), checked here before nginx -t would fail on the box ---


def tls_file(value: str) -> Path:
    """TLS_CERT_FILE / TLS_KEY_FILE on the control machine: relative to the repository unless absolute."""
    p = Path(value)
    return p if p.is_absolute() else REPO_ROOT / p


def _tls_path(value: str, setting: str) -> Path:
    path = tls_file(value)
    if not os.access(path, os.R_OK):
        raise SettingError(setting, value, "a readable PEM file on the control machine")
    return path


def _names_in(cert) -> list[str]:
    from cryptography import x509

    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return []
    return [str(n) for n in san.get_values_for_type(x509.DNSName)] + \
        [str(n) for n in san.get_values_for_type(x509.IPAddress)]


def _name_matches(pattern: str, address: str) -> bool:
    pattern, address = pattern.lower().rstrip("."), address.lower().rstrip(".")
    if pattern.startswith("*."):
        head, _, rest = address.partition(".")
        return bool(head) and rest == pattern[2:]
    return pattern == address


def check_tls_pair(cfg: schema.GroupData, address: str, now=None) -> None:
    """With TLS_CERT_FILE/TLS_KEY_FILE set: the key is unencrypted, private and matches the certificate, the chain
    is in order (each certificate signed by the next), every certificate is valid now, and the box's address is in
    the server certificate's subjectAltName. Nothing to check when both are empty (a local CA is generated)."""
    if not cfg.TLS_CERT_FILE and not cfg.TLS_KEY_FILE:
        return
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    cert_name, key_name = cfg.TLS_CERT_FILE, cfg.TLS_KEY_FILE
    cert_path, key_path = _tls_path(cert_name, "TLS_CERT_FILE"), _tls_path(key_name, "TLS_KEY_FILE")
    check_private(key_path, "TLS_KEY_FILE")
    try:
        chain = x509.load_pem_x509_certificates(cert_path.read_bytes())
    except ValueError as exc:
        raise SettingError("TLS_CERT_FILE", cert_name, "a PEM certificate chain, the server's certificate first",
                           str(exc)) from None
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except TypeError:
        raise SettingError("TLS_KEY_FILE", key_name, "an unencrypted PEM private key",
                           "nginx cannot ask for a passphrase at boot") from None
    except ValueError as exc:
        raise SettingError("TLS_KEY_FILE", key_name, "a PEM private key", str(exc)) from None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    leaf = chain[0]
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise SettingError("TLS_KEY_FILE", key_name, f"the private key of TLS_CERT_FILE's certificate "
                           f"({leaf.subject.rfc4514_string()})", "This key belongs to another certificate: nginx -t "
                           "would fail on the box and the proxy would not come back after a restart")
    now = now or dt.datetime.now(dt.timezone.utc)
    for i, cert in enumerate(chain):
        subject = cert.subject.rfc4514_string()
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise SettingError("TLS_CERT_FILE", cert_name, "certificates valid now",
                               f"certificate {i + 1} ({subject}) is valid from {cert.not_valid_before_utc:%Y-%m-%d} "
                               f"to {cert.not_valid_after_utc:%Y-%m-%d}")
        if i + 1 < len(chain):
            try:
                cert.verify_directly_issued_by(chain[i + 1])
            except Exception as exc:  # noqa: BLE001 - ValueError, TypeError or InvalidSignature: not its issuer
                raise SettingError("TLS_CERT_FILE", cert_name, "a chain in order, each certificate issued by the next",
                                   f"certificate {i + 1} ({subject}) is not issued by certificate {i + 2} "
                                   f"({chain[i + 1].subject.rfc4514_string()}): {type(exc).__name__}") from None
    names = _names_in(leaf)
    if not any(_name_matches(n, address) for n in names):
        raise SettingError("TLS_CERT_FILE", cert_name, f"a certificate whose subjectAltName includes {address}",
                           f"It names {names or 'nothing'}; clients connect to https://{address}")


# --- scrape token (issue 11): what the cluster's Prometheus sends to /<served>/metrics and /node/metrics ---
SCRAPE_TOKEN_ENV = "SPARK_SCRAPE_TOKEN_FILE"


def scrape_token_path(cfg: schema.GroupData) -> Path:
    return Path(os.environ.get(SCRAPE_TOKEN_ENV) or secrets_dir(cfg) / "scrape_token")


def read_scrape_token(cfg: schema.GroupData, api_token: str = "") -> str:
    """The scrape token: required, safe inside an nginx map string, and never the API token (each opens only its
    own paths)."""
    path = scrape_token_path(cfg)
    token = _read(path, SCRAPE_TOKEN_ENV)
    if not token or any(c.isspace() or c in '"\\;' for c in token):
        raise SettingError(SCRAPE_TOKEN_ENV, str(path), "a file with a non-empty token without whitespace, quotes, "
                           "backslashes or ';'")
    if api_token and token == api_token:
        raise SettingError(SCRAPE_TOKEN_ENV, str(path), "a token different from the API token",
                           "The scrape token must not open the API, nor the API token the metrics")
    return token


def ensure_scrape_token(cfg: schema.GroupData) -> Path:
    return _ensure_random_token(scrape_token_path(cfg))
