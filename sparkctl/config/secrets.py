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
from sparkctl.errors import SettingError

API_TOKEN_ENV = "SPARK_API_TOKEN_FILE"
HF_TOKEN_ENV = "SPARK_HF_TOKEN_FILE"


def secrets_dir(data: dict | None = None) -> Path:
    d = Path((data or {}).get("SECRETS_DIR", "secrets"))
    return d if d.is_absolute() else REPO_ROOT / d


def api_token_path(data: dict | None = None) -> Path:
    return Path(os.environ.get(API_TOKEN_ENV) or secrets_dir(data) / "api_token")


def hf_token_path(data: dict | None = None) -> Path:
    return Path(os.environ.get(HF_TOKEN_ENV) or secrets_dir(data) / "hf_token")


def _read(path: Path, setting: str) -> str:
    try:
        return path.read_text().strip()
    except FileNotFoundError:
        raise SettingError(setting, str(path), "a readable file holding the secret",
                           f"Create it (mode 0600) or point {setting} at one") from None
    except OSError as exc:
        raise SettingError(setting, str(path), "a readable file holding the secret", str(exc)) from None


def read_api_token(data: dict | None = None) -> str:
    path = api_token_path(data)
    token = _read(path, API_TOKEN_ENV)
    if not token:
        raise SettingError(API_TOKEN_ENV, str(path), "a file with a non-empty bearer token",
                           "An empty token would leave the proxy open")
    if any(c.isspace() or c in '"\\;' for c in token):
        raise SettingError(API_TOKEN_ENV, str(path), "a token without whitespace, quotes, backslashes or ';'")
    return token


def read_hf_token(data: dict | None = None) -> str:
    """The HF token, or "" when no token file exists (public repositories need none)."""
    path = hf_token_path(data)
    if not path.exists() and not os.environ.get(HF_TOKEN_ENV):
        return ""
    return _read(path, HF_TOKEN_ENV)


def ensure_api_token(data: dict | None = None) -> Path:
    """Create a random bearer token (0600) if none exists; used by the simulated Spark's `sim up`."""
    path = api_token_path(data)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_stdlib_secrets.token_urlsafe(32) + "\n")
    return path


# --- scrape token (issue 11): what the cluster's Prometheus sends to /<served>/metrics and /node/metrics ---
SCRAPE_TOKEN_ENV = "SPARK_SCRAPE_TOKEN_FILE"


def scrape_token_path(data: dict | None = None) -> Path:
    return Path(os.environ.get(SCRAPE_TOKEN_ENV) or secrets_dir(data) / "scrape_token")


def read_scrape_token(data: dict | None = None, api_token: str = "") -> str:
    """The scrape token: required, safe inside an nginx map string, and never the API token (each opens only its
    own paths)."""
    path = scrape_token_path(data)
    token = _read(path, SCRAPE_TOKEN_ENV)
    if not token or any(c.isspace() or c in '"\\;' for c in token):
        raise SettingError(SCRAPE_TOKEN_ENV, str(path), "a file with a non-empty token without whitespace, quotes, "
                           "backslashes or ';'")
    if api_token and token == api_token:
        raise SettingError(SCRAPE_TOKEN_ENV, str(path), "a token different from the API token",
                           "The scrape token must not open the API, nor the API token the metrics")
    return token


def ensure_scrape_token(data: dict | None = None) -> Path:
    """Create a random scrape token (0600) if none exists (the simulated Spark's `sim up`, the e2e tests)."""
    path = scrape_token_path(data)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_stdlib_secrets.token_urlsafe(32) + "\n")
    return path
