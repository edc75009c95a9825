"""A local certificate authority for the proxy when the operator gives no certificate (TLS_CERT_FILE empty).

Generated once on the control machine under <SECRETS_DIR>/pki/: ca.pem (give this to clients), ca.key (0600),
and per box <host>.pem (leaf + CA chain) / <host>.key (0600). A leaf is reissued when its names change or it is
within 30 days of expiry; the CA is kept.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from sparkctl.box.boxio import write_atomic  # the one atomic write, the box's and the control side's

CA_DAYS = 3650
LEAF_DAYS = 825
RENEW_BEFORE = dt.timedelta(days=30)


def _write_private(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    write_atomic(str(path), data, 0o600)


def _key_pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _san(names: list[str]) -> list[x509.GeneralName]:
    out = []
    for n in names:
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return out


def ensure_ca(pki: Path) -> tuple[Path, Path]:
    ca_pem, ca_key = pki / "ca.pem", pki / "ca.key"
    if ca_pem.exists() and ca_key.exists():
        return ca_pem, ca_key
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sparkctl local CA")])
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(days=CA_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .sign(key, hashes.SHA256()))
    _write_private(ca_key, _key_pem(key))
    ca_pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return ca_pem, ca_key


def _leaf_ok(path: Path, names: list[str]) -> bool:
    if not path.exists():
        return False
    cert = x509.load_pem_x509_certificates(path.read_bytes())[0]
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    have = {str(v) for v in san.get_values_for_type(x509.DNSName)} | \
        {str(v) for v in san.get_values_for_type(x509.IPAddress)}
    fresh = cert.not_valid_after_utc - dt.datetime.now(dt.timezone.utc) > RENEW_BEFORE
    return fresh and have == set(names)


def ensure_server_cert(pki: Path, host: str, names: list[str]) -> tuple[Path, Path, Path]:
    """(chain.pem, key.pem, ca.pem) for a box; names are the DNS names / IPs clients use."""
    names = sorted(set(names))
    ca_pem, ca_key_path = ensure_ca(pki)
    leaf, leaf_key = pki / f"{host}.pem", pki / f"{host}.key"
    if _leaf_ok(leaf, names) and leaf_key.exists():
        return leaf, leaf_key, ca_pem
    ca_cert = x509.load_pem_x509_certificate(ca_pem.read_bytes())
    ca_key = serialization.load_pem_private_key(ca_key_path.read_bytes(), password=None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.timezone.utc)
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0])]))
            .issuer_name(ca_cert.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=LEAF_DAYS))
            .add_extension(x509.SubjectAlternativeName(_san(names)), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_private(leaf_key, _key_pem(key))
    leaf.write_bytes(cert.public_bytes(serialization.Encoding.PEM) + ca_pem.read_bytes())
    return leaf, leaf_key, ca_pem


def ensure_ssh_keypair(path: Path, comment: str) -> tuple[Path, str]:
    """An ed25519 OpenSSH key pair at path (0600) and path.pub; returns (private key path, public key line)."""
    pub = path.with_suffix(".pub")
    if not (path.exists() and pub.exists()):
        key = ed25519.Ed25519PrivateKey.generate()
        _write_private(path, key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                               serialization.NoEncryption()))
        write_atomic(str(pub), key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                                             serialization.PublicFormat.OpenSSH).decode()
                     + f" {comment}\n", 0o644)
    return path, pub.read_text().strip()
