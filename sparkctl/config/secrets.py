"""Secrets on the control machine: read from files named by environment variables, else from secrets/.

SPARK_API_TOKEN_FILE     bearer token every client sends to the proxy (required, at least 128 random bits)
SPARK_SCRAPE_TOKEN_FILE  the token the cluster's Prometheus sends to the scrape paths (the same, not the API token)
SPARK_HF_TOKEN_FILE      Hugging Face token for gated/private repos (optional)
During a rotation window (sparkctl/config/rotation.py) a token file has its successor beside it, <file>.next, read
by the same rules: the proxies accept both (`read_api_tokens`, `read_scrape_tokens`), the bridge sends the new one.
TLS certificate/key come from the TLS_CERT_FILE / TLS_KEY_FILE settings (at least RSA-2048 or P-256, a leaf usable
for serverAuth), or a local CA generated in secrets/pki.
Every file is read defensively (sparkctl/config/files.py): a regular, private, UTF-8 file, inside the secrets
directory when it is named there.
Nothing here is ever put in argv, in pyinfra output or in the repository; on the box they land root-only 0600.
"""

from __future__ import annotations

import math
import os
import re
import secrets as _stdlib_secrets
import stat
import string
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm

from sparkctl import REPO_ROOT
from sparkctl.config import files, schema
from sparkctl.errors import SettingError

API_TOKEN_ENV = "SPARK_API_TOKEN_FILE"
HF_TOKEN_ENV = "SPARK_HF_TOKEN_FILE"


def secrets_dir(cfg: schema.GroupData) -> Path:
    """SECRETS_DIR, relative to the repository unless absolute."""
    d = Path(cfg.SECRETS_DIR)
    return d if d.is_absolute() else REPO_ROOT / d


def api_token_path(cfg: schema.GroupData) -> Path:
    return Path(os.environ.get(API_TOKEN_ENV) or secrets_dir(cfg) / "api_token")


def hf_token_path(cfg: schema.GroupData) -> Path:
    return Path(os.environ.get(HF_TOKEN_ENV) or secrets_dir(cfg) / "hf_token")


TOKEN_MIN_BITS = 128  # randomness a bearer or scrape token must carry: its length times log2 of its alphabet
TOKEN_MIN_DISTINCT = 8  # different characters a random token of that length always has ("aaaa..." is not one)
TOKEN_HOW = "Make one with: openssl rand -hex 32 > FILE; chmod 600 FILE"
# what openssl rand -hex/-base64 and secrets.token_urlsafe write: nothing the proxy's nginx map (a quoted string
# holding the token) could read as syntax
TOKEN_CHARS = re.compile(r"[A-Za-z0-9._~+/=-]+")


def check_private(path: Path, setting: str, st=None) -> None:
    """A secret readable by group or others on the control machine is refused (docs/operating.md "Secrets")."""
    mode = (st or path.stat()).st_mode & 0o777
    if mode & 0o077:
        raise SettingError(setting, str(path), "a file only its owner can read (mode 0600 or 0400)",
                           f"It is mode {mode:04o}: chmod 600 {path}")


def check_secrets_dir(cfg: schema.GroupData) -> None:
    """SECRETS_DIR, when it exists, is a directory no one but its owner can write: whoever can write it can swap
    the token or the TLS key the deploy uploads."""
    path = secrets_dir(cfg)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        raise SettingError("SECRETS_DIR", str(path), "a directory (or none yet: the deploy creates it, mode 0700)")
    mode = st.st_mode & 0o777
    if mode & 0o022:
        raise SettingError("SECRETS_DIR", str(path), "a directory only its owner can write (mode 0700)",
                           f"It is mode {mode:04o}: anyone who can write it can replace a token or the TLS key. "
                           f"chmod 700 {path}")


def _read(path: Path, setting: str, root: Path | None = None, how: str = "") -> str:
    """A secret file's text, stripped: a regular, private, UTF-8 file (inside `root` when it is named there)."""
    what = "a readable file holding the secret"
    if root is not None and root in path.parents:
        files.check_inside(path, root, setting)
    try:
        text, st = files.read_text(path, setting, what, how)
    except FileNotFoundError:
        raise SettingError(setting, str(path), what, f"Create it (mode 0600) or point {setting} at one"
                           + (f". {how}" if how else "")) from None
    check_private(path, setting, st)
    return text.strip()


def _alphabet(token: str) -> int:
    """The size of the alphabet a token's characters come from (hex, decimal, or the classes it uses)."""
    if set(token) <= set("0123456789"):
        return 10
    if set(token) <= set("0123456789abcdef") or set(token) <= set("0123456789ABCDEF"):
        return 16
    classes = ((string.ascii_lowercase, 26), (string.ascii_uppercase, 26), (string.digits, 10))
    size = sum(n for chars, n in classes if any(c in chars for c in token))
    return size + len({c for c in token if c not in string.ascii_letters + string.digits})


def token_bits(token: str) -> float:
    """Bits of randomness a token can carry at most: its length times log2 of its alphabet."""
    return len(token) * math.log2(_alphabet(token)) if token else 0.0


def check_token(setting: str, path: Path, token: str, what: str) -> None:
    """A bearer token an attacker cannot guess: non-empty, nginx-safe, at least TOKEN_MIN_BITS of randomness."""
    if not token:
        raise SettingError(setting, str(path), f"a file with a non-empty {what}",
                           f"An empty token would leave the proxy open. {TOKEN_HOW}")
    if not TOKEN_CHARS.fullmatch(token):
        raise SettingError(setting, str(path), f"a {what} of letters, digits and . _ ~ + / = - only (no whitespace, "
                                               f"quotes, $ or ;)", TOKEN_HOW)
    bits = token_bits(token)
    if bits < TOKEN_MIN_BITS or len(set(token)) < TOKEN_MIN_DISTINCT:
        raise SettingError(setting, str(path), f"a {what} of at least {TOKEN_MIN_BITS} random bits (e.g. 32 hex "
                                               f"characters)", f"It has {len(token)} characters from an alphabet of "
                                                               f"{_alphabet(token)} ({bits:.0f} bits at most, "
                           f"{len(set(token))} different characters). {TOKEN_HOW}")


def read_api_token(cfg: schema.GroupData) -> str:
    """The current API token (what clients send today); during a rotation window its successor is checked too, so
    that everything validating the secrets (`check`, the preflight) refuses a bad .next before a proxy reads it."""
    return read_api_tokens(cfg).current


def next_path(path: Path) -> Path:
    """Where a secret's successor waits during a rotation window: <file>.next beside it."""
    return path.with_name(path.name + ".next")


@dataclass(frozen=True)
class Tokens:
    """A bearer token and, during a rotation window, its successor: a proxy accepts both, a sender (the gateway's
    bridge towards the boxes) sends the successor (docs/operating.md "Rotating a secret")."""

    current: str
    next: str = ""

    @property
    def accepted(self) -> tuple[str, ...]:
        return (self.current, self.next) if self.next else (self.current,)

    @property
    def sent(self) -> str:
        return self.next or self.current


def _read_next(path: Path, setting: str, root: Path, current: str, what: str) -> str:
    """The successor of the token at `path` ("" outside a rotation window), checked as the token itself is."""
    nxt = next_path(path)
    if not os.path.lexists(nxt):
        return ""
    token = _read(nxt, setting, root=root, how=TOKEN_HOW)
    check_token(setting, nxt, token, what)
    if token == current:
        raise SettingError(setting, str(nxt), f"a new {what}, different from the current one in {path.name}",
                           "A rotation to the same token rotates nothing: python -m sparkctl secrets rotate "
                           "writes a fresh one")
    return token


def read_api_tokens(cfg: schema.GroupData) -> Tokens:
    """The API token and, during a rotation window, its successor (api_token.next)."""
    path = api_token_path(cfg)
    token = _read(path, API_TOKEN_ENV, root=secrets_dir(cfg), how=TOKEN_HOW)
    check_token(API_TOKEN_ENV, path, token, "bearer token")
    return Tokens(token, _read_next(path, API_TOKEN_ENV, secrets_dir(cfg), token, "bearer token"))


def read_hf_token(cfg: schema.GroupData) -> str:
    """The HF token, or "" when no token file exists (public repositories need none); an empty file is refused
    (it would silently mean "no token")."""
    path = hf_token_path(cfg)
    if not os.path.lexists(path) and not os.environ.get(HF_TOKEN_ENV):
        return ""
    token = _read(path, HF_TOKEN_ENV, root=secrets_dir(cfg))
    if not token:
        raise SettingError(HF_TOKEN_ENV, str(path), "a file with a non-empty Hugging Face token",
                           "Delete it to download public repositories without a token")
    if any(c.isspace() for c in token) or not token.isprintable():
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


def _tls_bytes(value: str, setting: str) -> tuple[bytes, os.stat_result]:
    try:
        return files.read_bytes(tls_file(value), setting, "a readable PEM file on the control machine")
    except FileNotFoundError:
        raise SettingError(setting, value, "a readable PEM file on the control machine", "It does not exist") from None


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


def _load_chain(name: str) -> list:
    from cryptography import x509

    data, _ = _tls_bytes(name, "TLS_CERT_FILE")
    try:
        chain = x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise SettingError("TLS_CERT_FILE", name, "a PEM certificate chain, the server's certificate first",
                           str(exc)) from None
    return chain


def _load_key(name: str):
    from cryptography.hazmat.primitives import serialization

    data, st = _tls_bytes(name, "TLS_KEY_FILE")
    check_private(tls_file(name), "TLS_KEY_FILE", st)
    try:
        return serialization.load_pem_private_key(data, password=None)
    except TypeError:
        raise SettingError("TLS_KEY_FILE", name, "an unencrypted PEM private key",
                           "nginx cannot ask for a passphrase at boot") from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SettingError("TLS_KEY_FILE", name, "a PEM private key", str(exc)) from None


def key_strength_problem(key) -> str:
    """Why a TLS key is too weak ("" when it is at least RSA-2048 or an elliptic curve of 256 bits or more)."""
    from cryptography.hazmat.primitives.asymmetric import ec, ed448, ed25519, rsa

    if isinstance(key, rsa.RSAPrivateKey):
        return "" if key.key_size >= 2048 else f"it is RSA-{key.key_size}"
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return "" if key.curve.key_size >= 256 else f"it is the {key.curve.name} curve ({key.curve.key_size} bits)"
    if isinstance(key, (ed25519.Ed25519PrivateKey, ed448.Ed448PrivateKey)):
        return ""
    return f"it is a {type(key).__name__.removeprefix('_')} key"


def server_auth_problem(leaf, key) -> str:
    """Why the leaf certificate cannot serve TLS ("" when it can): extendedKeyUsage without serverAuth, or a
    keyUsage without the bit its key type signs the handshake with."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.x509.oid import ExtendedKeyUsageOID

    ext = leaf.extensions
    try:
        eku = ext.get_extension_for_class(x509.ExtendedKeyUsage).value
        if not {ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE} & set(eku):
            return f"its extendedKeyUsage ({', '.join(u._name for u in eku)}) has no serverAuth"
    except x509.ExtensionNotFound:
        pass
    try:
        ku = ext.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return ""
    if ku.digital_signature or (isinstance(key, rsa.RSAPrivateKey) and ku.key_encipherment):
        return ""
    return "its keyUsage has no digitalSignature (nor keyEncipherment for RSA)"


def _check_key(cfg: schema.GroupData, chain: list, key) -> None:
    from cryptography.hazmat.primitives import serialization

    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    leaf = chain[0]
    if key.public_key().public_bytes(*spki) != leaf.public_key().public_bytes(*spki):
        raise SettingError("TLS_KEY_FILE", cfg.TLS_KEY_FILE, f"the private key of TLS_CERT_FILE's certificate "
                           f"({leaf.subject.rfc4514_string()})", "This key belongs to another certificate: nginx -t "
                           "would fail on the box and the proxy would not come back after a restart")
    weak = key_strength_problem(key)
    if weak:
        raise SettingError("TLS_KEY_FILE", cfg.TLS_KEY_FILE, "a key of at least RSA-2048 or P-256", weak)
    unusable = server_auth_problem(leaf, key)
    if unusable:
        raise SettingError("TLS_CERT_FILE", cfg.TLS_CERT_FILE, "a server certificate usable for TLS serverAuth",
                           f"certificate 1 ({leaf.subject.rfc4514_string()}): {unusable}")


def _check_chain(name: str, chain: list, now) -> None:
    for i, cert in enumerate(chain):
        subject = cert.subject.rfc4514_string()
        if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
            raise SettingError("TLS_CERT_FILE", name, "certificates valid now",
                               f"certificate {i + 1} ({subject}) is valid from {cert.not_valid_before_utc:%Y-%m-%d} "
                               f"to {cert.not_valid_after_utc:%Y-%m-%d}")
        digest = cert.signature_hash_algorithm
        if i + 1 < len(chain) and digest is not None and digest.name in ("md5", "sha1"):
            raise SettingError("TLS_CERT_FILE", name, "certificates signed with SHA-256 or stronger",
                               f"certificate {i + 1} ({subject}) is signed with {digest.name}: clients refuse it")
        if i + 1 < len(chain):
            try:
                cert.verify_directly_issued_by(chain[i + 1])
            except Exception as exc:  # noqa: BLE001 - ValueError, TypeError or InvalidSignature: not its issuer
                raise SettingError("TLS_CERT_FILE", name, "a chain in order, each certificate issued by the next",
                                   f"certificate {i + 1} ({subject}) is not issued by certificate {i + 2} "
                                   f"({chain[i + 1].subject.rfc4514_string()}): {type(exc).__name__}") from None


def check_tls_pair(cfg: schema.GroupData, address: str, now=None) -> None:
    """With TLS_CERT_FILE/TLS_KEY_FILE set: the key is unencrypted, private, strong (RSA-2048, P-256) and matches
    the certificate, the leaf is usable for serverAuth, the chain is in order (each certificate signed by the next),
    every certificate is valid now, and the box's address is in the server certificate's subjectAltName. Nothing
    to check when both are empty (a local CA is generated)."""
    if not cfg.TLS_CERT_FILE and not cfg.TLS_KEY_FILE:
        return
    import datetime as dt

    chain, key = _load_chain(cfg.TLS_CERT_FILE), _load_key(cfg.TLS_KEY_FILE)
    _check_key(cfg, chain, key)
    _check_chain(cfg.TLS_CERT_FILE, chain, now or dt.datetime.now(dt.timezone.utc))
    names = _names_in(chain[0])
    if not any(_name_matches(n, address) for n in names):
        raise SettingError("TLS_CERT_FILE", cfg.TLS_CERT_FILE, f"a certificate whose subjectAltName includes "
                           f"{address}", f"It names {names or 'nothing'}; clients connect to https://{address}")


# --- scrape token: what the cluster's Prometheus sends to /<served>/metrics and /node/metrics ---
SCRAPE_TOKEN_ENV = "SPARK_SCRAPE_TOKEN_FILE"


def scrape_token_path(cfg: schema.GroupData) -> Path:
    return Path(os.environ.get(SCRAPE_TOKEN_ENV) or secrets_dir(cfg) / "scrape_token")


def read_scrape_token(cfg: schema.GroupData, api_token: str = "") -> str:
    """The scrape token: required, safe inside an nginx map string, random enough, and never the API token (each
    opens only its own paths). During a rotation window its successor is checked too."""
    return read_scrape_tokens(cfg, Tokens(api_token) if api_token else None).current


def read_scrape_tokens(cfg: schema.GroupData, api: Tokens | None = None) -> Tokens:
    """The scrape token and, during a rotation window, its successor (scrape_token.next); none of them is one of
    the API tokens `api` accepts (in or out of either window)."""
    path = scrape_token_path(cfg)
    token = _read(path, SCRAPE_TOKEN_ENV, root=secrets_dir(cfg), how=TOKEN_HOW)
    check_token(SCRAPE_TOKEN_ENV, path, token, "scrape token")
    tokens = Tokens(token, _read_next(path, SCRAPE_TOKEN_ENV, secrets_dir(cfg), token, "scrape token"))
    for name, value in zip((path, next_path(path)), tokens.accepted):
        if api is not None and value in api.accepted:
            raise SettingError(SCRAPE_TOKEN_ENV, str(name), "a token different from the API token (current and "
                               "next)", "The scrape token must not open the API, nor the API token the metrics")
    return tokens


def ensure_scrape_token(cfg: schema.GroupData) -> Path:
    return _ensure_random_token(scrape_token_path(cfg))


# --- VRRP's password: keepalived's PASS authentication between the front doors (GATEWAY_VIP) -----------------------

VRRP_PASSWORD_MAX = 8  # keepalived's auth_pass: VRRP's PASS authentication carries 8 characters (more are cut off)
VRRP_PASSWORD_HOW = "Make one with: openssl rand -hex 4 > FILE; chmod 600 FILE"
VRRP_PASSWORD_CHARS = re.compile(r"[A-Za-z0-9._~+/=-]+")  # nothing keepalived.conf's parser could read as syntax


def vrrp_password_path(cfg: schema.GroupData) -> Path:
    return secrets_dir(cfg) / cfg.VRRP_PASSWORD_FILE


def read_vrrp_password(cfg: schema.GroupData) -> str:
    """The front doors' VRRP password (secrets/<VRRP_PASSWORD_FILE>): 1-8 characters keepalived.conf reads as one
    word; missing, empty, longer or readable by others is refused naming the file to create."""
    path = vrrp_password_path(cfg)
    password = _read_vrrp(cfg, path)
    if os.path.lexists(next_path(path)):  # a rotation waiting to finish: its password is checked now, used then
        _read_vrrp(cfg, next_path(path))
    return password


def _read_vrrp(cfg: schema.GroupData, path: Path) -> str:
    how = f"{VRRP_PASSWORD_HOW.replace('FILE', str(path))} (the same file for every gateway)"
    password = _read(path, "VRRP_PASSWORD_FILE", root=secrets_dir(cfg), how=how)
    if not VRRP_PASSWORD_CHARS.fullmatch(password) or len(password) > VRRP_PASSWORD_MAX:
        raise SettingError("VRRP_PASSWORD_FILE", str(path), f"a file holding 1 to {VRRP_PASSWORD_MAX} letters, "
                                                            "digits or . _ ~ + / = -", how)
    return password


def ensure_vrrp_password(cfg: schema.GroupData) -> Path:
    """A random VRRP password unless one exists (the simulated Spark's `sim up` with two gateways)."""
    path = vrrp_password_path(cfg)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(_stdlib_secrets.token_hex(VRRP_PASSWORD_MAX // 2) + "\n")
    return path
