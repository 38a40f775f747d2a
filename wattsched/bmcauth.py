"""The BMCs' credentials: the site's, from acct_gather.conf (root's alone), or, for the emulated
BMCs of a cluster that names no password, a random one made once per cluster and kept private
in StateSaveLocation, so no user of the host can log in to a virtual node's BMC and switch it off.

Emulated BMCs serve Redfish over HTTPS with a certificate of the cluster's own authority, made
once beside the password: its key stays private, and the agents check the BMCs against it as
they would check real ones against the site's CA file.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Callable

from wattsched.config import Config

DEFAULT_USER = "admin"
DEFAULT_PASSWORD = "admin"  # a real BMC's factory setting, used only where the site names none
PASSWORD_FILE = "bmc_password"
TLS_FILE = "bmc_tls"  # the emulated BMCs' authority, certificate and key, made together


def credentials(config: Config, protocol: str = "ipmi") -> tuple[str, str]:
    """(user, password) for the cluster's BMCs over IPMI or Redfish, as the agents, the
    power-saving programs and the emulated BMCs all use them: Redfish's own where the site names
    them, else the IPMI ones (one BMC, one set of accounts)."""
    user = config.energy_ipmi_username or DEFAULT_USER
    password = config.energy_ipmi_password
    if protocol == "redfish":
        user = config.energy_redfish_username or user
        password = config.energy_redfish_password or password
    if password:
        return user, password
    if config.emulated_nodes:
        return user, emulated_password(config.state_save_location)
    return user, DEFAULT_PASSWORD


def emulated_password(folder: str) -> str:
    """The cluster's random BMC password, made on first use."""
    import secrets

    path = _made_once(folder, PASSWORD_FILE, lambda: (secrets.token_urlsafe(18) + "\n").encode())
    return _read(path).decode().strip()


def emulated_tls(folder: str) -> tuple[str, str, str]:
    """(authority certificate, server certificate, server key) of the emulated BMCs' HTTPS, made
    on first use: the server's certificate names 127.0.0.1 and localhost and is signed by an
    authority of this cluster alone, whose key is thrown away once it has signed."""
    made = _made_once(folder, TLS_FILE, _tls_bundle)
    parts = _read(made).split(b"\n\n")
    paths = [_made_once(folder, f"bmc_tls_{name}", functools.partial(bytes, part))
             for name, part in zip(("ca.pem", "cert.pem", "key.pem"), parts, strict=True)]
    return paths[0], paths[1], paths[2]


def _tls_bundle() -> bytes:
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "wattsched emulated BMC authority")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(days=1))
          .not_valid_after(now + datetime.timedelta(days=3650))
          .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
          .sign(ca_key, hashes.SHA256()))
    cert = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")]))
            .issuer_name(ca_name).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1)).not_valid_after(now + datetime.timedelta(days=3650))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost"),
                                                        x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                           critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .sign(ca_key, hashes.SHA256()))
    pem = serialization.Encoding.PEM
    key_pem = key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return b"\n".join([ca.public_bytes(pem), cert.public_bytes(pem), key_pem])


def _made_once(folder: str, name: str, content: Callable[[], bytes]) -> str:
    """A private file made on first use: written whole to a file of its own, then linked into place
    (0600, in the 0700 folder), so that daemons starting at once all read the one that won and
    none reads a half-written one."""
    import secrets

    path = os.path.join(folder, name)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        draft = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(content())
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):  # another daemon's won
                os.link(draft, path)
        finally:
            os.unlink(draft)
    return path


def _read(path: str) -> bytes:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as handle:
        return handle.read()
