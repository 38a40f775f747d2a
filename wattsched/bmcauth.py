"""The BMCs' credentials: the site's, from acct_gather.conf (root's alone), or, for the emulated
BMCs of a cluster that names no password, a random one made once per cluster and kept private
in StateSaveLocation, so no user of the host can log in to a virtual node's BMC and switch it off.
"""

from __future__ import annotations

import contextlib
import os

from wattsched.config import Config

DEFAULT_USER = "admin"
DEFAULT_PASSWORD = "admin"  # a real BMC's factory setting, used only where the site names none
PASSWORD_FILE = "bmc_password"


def credentials(config: Config) -> tuple[str, str]:
    """(user, password) for the cluster's BMCs, as the agents, the power-saving programs and the
    emulated BMCs all use them."""
    user = config.energy_ipmi_username or DEFAULT_USER
    if config.energy_ipmi_password:
        return user, config.energy_ipmi_password
    if config.emulated_nodes:
        return user, emulated_password(config.state_save_location)
    return user, DEFAULT_PASSWORD


def emulated_password(folder: str) -> str:
    """The cluster's random BMC password, made on first use: written whole to a file of its own,
    then linked into place (0600, in the 0700 folder), so that daemons starting at once all read
    the one that won and none reads a half-written one."""
    import secrets

    path = os.path.join(folder, PASSWORD_FILE)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    if not os.path.exists(path):
        draft = f"{path}.{os.getpid()}.{secrets.token_hex(4)}"
        fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(secrets.token_urlsafe(18) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
            with contextlib.suppress(FileExistsError):  # another daemon's won
                os.link(draft, path)
        finally:
            os.unlink(draft)
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd) as handle:
        return handle.read().strip()
