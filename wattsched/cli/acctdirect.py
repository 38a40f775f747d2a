"""sacctmgr's own way to the accounting database, for root while no controller answers.

Slurm's sacctmgr needs only slurmdbd, never slurmctld: a site adds its cluster, accounts and users
before it first starts the controller, and scripts (Slurm's own test suite among them) ask
``sacctmgr show cluster`` before any controller runs. Here the controller keeps the accounting; with
it down, root (who may read the database the configuration names) reads and changes the
associations in the database itself, through the same code the controller's routes run. The
controller reads them at its start, as it reads every change.
"""

from __future__ import annotations

import time
from typing import Any

from wattsched.accounting.assoc import AssocError
from wattsched.accounting.store import AccountingStore
from wattsched.api import AssocRequest
from wattsched.cli.common import CLIError, load_config


def request(method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
    """What the controller would answer to sacctmgr's ``method path`` (the associations, the
    wckeys, a change), as root sees it."""
    config = load_config()
    if config.accounting_storage_type == "accounting_storage/none":
        raise CLIError("Accounting storage is disabled (AccountingStorageType=accounting_storage/none)")
    store = AccountingStore(config.accounting_url)
    try:
        now = time.time()
        store.setup(config.cluster_name, now)
        if path == "/v1/wckeys":
            return {"wckeys": store.wckeys(config.cluster_name)}
        assocs = store.assocs(config.cluster_name)
        if method == "GET":
            return {"time": now, **assocs.listing()}
        change = AssocRequest.model_validate(body)
        assocs.apply(change, now)
        return {"done": change.names}
    except AssocError as exc:
        raise CLIError(str(exc)) from exc
    finally:
        store.close()
