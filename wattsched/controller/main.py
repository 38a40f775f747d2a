"""Starting the controller: config, key, state, plugins, accounting, HTTP server."""

from __future__ import annotations

import gc
import logging
import os
import socket
import time
from dataclasses import replace

from wattsched import auth, logs
from wattsched import config as config_mod
from wattsched.accounting.store import AccountingStore
from wattsched.controller import failover, triggerctl
from wattsched.controller.acctsync import AccountingSync
from wattsched.controller.app import create_app
from wattsched.controller.loop import Controller
from wattsched.controller.startup import load_plugins, open_state
from wattsched.controller.store import StateStore
from wattsched.private import private_dir
from wattsched.service import authsocket, httpserve
from wattsched.service.daemonstart import Start

log = logging.getLogger("wattsched.controller")

STORE_RETRY_S = 2


def build(config: config_mod.Config, this: failover.Me, sock: socket.socket, clear_state: bool = False) -> Controller:
    """The active controller, once this one holds the lease (a standby until then); with
    ``clear_state`` (slurmctld -c), without the saved jobs and reservations (:func:`forget_state`)."""
    plugins = load_plugins(config)
    private_dir(config.state_save_location)
    key = auth.ensure_key(config.key_file)
    store = open_store(config.state_storage_loc or config.state_save_location)
    if len(config.slurmctld_hosts) > 1 and not (config.state_storage_loc and config.accounting_storage_loc):
        log.warning("several controllers share no state: StateStorageLoc and AccountingStorageLoc should name "
                    "a database every controller reaches (a replicated PostgreSQL)")
    failover.wait_for_lease(config, key, this, store, sock)
    if clear_state:  # only once in charge: a standby must not erase the active controller's state
        forget_state(store)
    failover.run_program(config.slurmctld_primary_on_prog, "SlurmctldPrimaryOnProg")
    state = open_state(config, store, plugins, key, time.time())
    # which controller held control before this one: a takeover is an event of strigger's
    triggerctl.took_control(state, this.index, store.get_meta("active_controller", "") or "", this.name)
    store.commit([], meta={"active_controller": this.name})
    accounting = sync = None
    if config.accounting_storage_type != "accounting_storage/none":
        accounting = AccountingStore(config.accounting_url)
        try:
            accounting.setup(config.cluster_name, time.time())
        except Exception as exc:  # start anyway; the outbox keeps records until the database is back
            log.error("accounting database unavailable at start-up: %s", exc)
        sync = AccountingSync(store, accounting, config.cluster_name, config.accounting_storage_enforce)
    authsocket.TokenService(config.auth_socket_path, key,
                            min(authsocket.TOKEN_LIFESPAN_S, config.auth_alt.max_token_lifespan_s)).start()
    return Controller(state, accounting, sync, this)


def forget_state(store: StateStore) -> None:
    """slurmctld -c: start without the jobs and reservations of the saved state. They are marked
    purged rather than deleted, so that accounting still receives what it has not yet written;
    the job id counter is kept, so that no new job takes an id accounting already holds."""
    jobs, reservations = store.forget_jobs_and_reservations()
    log.warning("started without the saved state (-c)", extra={"jobs": jobs, "reservations": reservations})


def open_store(location: str) -> StateStore:
    """The state store, waited for while its database cannot be reached (it may be failing over
    itself): a controller without its state can be neither in charge nor a standby."""
    if not location.startswith("postgresql"):  # a local file: an error there is the site's to fix
        return StateStore(location)
    failing = ""
    while True:
        try:
            return StateStore(location)
        except Exception as exc:  # psycopg's errors: the server is away, or refuses us
            if str(exc) != failing:
                log.error("cannot reach the state store; trying again every %d s", STORE_RETRY_S,
                          extra={"error": str(exc).strip()[:500]})
                failing = str(exc)
            time.sleep(STORE_RETRY_S)


def tune_collector() -> None:
    """Full collections took 116-160 ms each, several a minute, in a controller holding 4,000 jobs
    while a user listed them without a pause (measured): every other request waited for them. The
    objects of start-up (the libraries, the restored state) are frozen out of the collections, and
    the young generation is collected every 20,000 allocations rather than 700, so a listing's
    short-lived records are gone before they would be promoted. Measured after: no collection
    over 20 ms, and the other user's sbatch at p50 0.15 s, max 0.20 s (before: max 0.37 s)."""
    gc.set_threshold(20_000, 10, 10)
    gc.freeze()


def run(config_path: str, port: int | None = None, name: str | None = None, start: Start = Start()) -> None:
    """Run the controller named ``name`` in SlurmctldHost (by default, the one named like this host)."""
    os.umask(0o077)  # state, databases, WAL files, logs and keys are created private
    config = config_mod.load(config_path, switches_nodes=True)
    if port:
        config = replace(config, slurmctld_port=port)
    this = failover.me(config, name)
    logs.setup(logs.louder(config.log_level, start.verbose), start.log_file or config.slurmctld_log_file or None,
               start.syslog)
    sock = httpserve.listen(this.addr, config.slurmctld_port)  # before the lease: see failover._holder_gone
    controller = build(config, this, sock, start.clear_state)
    tune_collector()
    start.ready()
    httpserve.serve_on(httpserve.server(create_app(controller), this.addr, config.slurmctld_port,
                                        config.message_timeout_s), sock)
