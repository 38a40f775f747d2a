"""slurm.conf-style configuration: parsed once into typed, immutable objects.

A file is a sequence of lines of ``Key=Value`` pairs; ``#`` starts a comment, keys are
case-insensitive as in Slurm, ``Include FILE`` pulls in another file. ``NodeName=`` and
``PartitionName=`` lines describe nodes and partitions (``NodeName=DEFAULT`` and
``PartitionName=DEFAULT`` set defaults for the lines that follow). Every unknown key and
every bad value is a :class:`ConfigError` naming the file, the line and the key.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from wattsched import cpufreq, energypolicy, gres, hostlist, licenses, powerbalance, rlimits, switching
from wattsched.confvalues import (
    AuthAltParams,
    SchedulerParams,
    auth_socket,
    bounded,
    choice,
    cpu_freq_spec,
    duration,
    duration_s,
    energy_policy,
    flags,
    fraction,
    governors,
    hosts,
    integer,
    license_list,
    memory,
    minutes,
    mpi_params,
    mpi_type,
    names,
    non_negative_number,
    opt_integer,
    over_subscribe,
    over_time_limit,
    parse_acctg_freq,
    parse_auth_alt,
    parse_freq_watts,
    parse_power_cap,
    parse_power_save_params,
    parse_scheduler_params,
    percent,
    period_s,
    plugin,
    plugin_list,
    port_range,
    positive,
    positive_number,
    power_save_types,
    preempt_mode,
    suspend_time,
    text,
    tres_names,
    yes_no,
)
from wattsched.gres import Device, Inventory
from wattsched.ratelimit import RateLimits, parse_slurmctld_params

ACCT_GATHER = "acct_gather.conf"
LOG_LEVELS = ("quiet", "fatal", "error", "info", "verbose", "debug", "debug2", "debug3")  # Slurm's, quietest first


class ConfigError(ValueError):
    """A configuration error, located at file:line and key."""

    def __init__(self, path: str, line: int, key: str, message: str):
        super().__init__(f"{path}:{line}: {key}: {message}")
        self.path, self.line, self.key = path, line, key


def rlimit_names(value: str) -> str:
    """PropagateResourceLimits(Except): ALL, NONE or Slurm's limit names (checked here)."""
    rlimits.names(value)
    return value.upper()


def setting(key: str, parse: Callable[[str], Any], default: Any, *, conf: str = "", aliases: tuple[str, ...] = (),
            path: bool = False, restart: bool = False) -> Any:
    """A field that a configuration key sets: the key's one declaration (its name, aliases, value
    parser, default, and whether it is a path resolved against the file's folder or a setting
    that needs a restart). ``conf``: "cgroup.conf" for that file's keys; "" for the file and
    lines the record comes from (slurm.conf, NodeName=, PartitionName=)."""
    return field(default=default, metadata={"key": key, "parse": parse, "conf": conf, "aliases": aliases,
                                            "path": path, "restart": restart})


@dataclass(frozen=True, slots=True)
class NodeConf:
    """One node as configured (NodeName lines are expanded into these)."""

    name: str
    cpus: int = setting("CPUs", integer, 1)
    sockets: int = setting("Sockets", integer, 1)
    cores_per_socket: int = setting("CoresPerSocket", integer, 1)
    threads_per_core: int = setting("ThreadsPerCore", integer, 1)
    real_memory_mb: int = setting("RealMemory", integer, 1)
    tmp_disk_mb: int = setting("TmpDisk", integer, 0)  # its temporary storage (TmpFS), for --tmp
    weight: int = setting("Weight", integer, 1)
    features: tuple[str, ...] = setting("Feature", names, (), aliases=("Features",))
    state: str = setting("State", choice("unknown", "idle", "down", "drain", "future", "cloud"), "UNKNOWN")
    # NodeAddr, NodeHostname and Port take a list on a line naming many nodes (one each, in order),
    # as Slurm's do: multiple slurmds of one host, each on a port of its own
    node_addr: str | None = setting("NodeAddr", text, None)
    node_hostname: str | None = setting("NodeHostname", text, None)
    port: int | None = setting("Port", text, None)
    idle_watts: int | None = setting("IdleWatts", integer, None)
    max_watts: int | None = setting("MaxWatts", integer, None)
    power_save_watts: int | None = setting("PowerSaveWatts", integer, None)
    down_watts: int | None = setting("DownWatts", integer, None)
    power_cap_priority: int | None = setting("PowerCapPriority", integer, None)
    # (kHz, watts while busy), highest frequency first
    cpu_freq_watts: tuple[tuple[int, int], ...] = setting("CpuFreqWatts", parse_freq_watts, ())
    bmc_addr: str = setting("BmcAddr", text, "")  # the node's BMC, host[:port]; %n stands for the node name
    # switching times and watts (ours; defaults from Poquet 2017), used by emulated nodes and the simulator
    switch_on_s: float = setting("SwitchOnTime", non_negative_number, switching.DEFAULT_ON_S)
    switch_off_s: float = setting("SwitchOffTime", non_negative_number, switching.DEFAULT_OFF_S)
    switch_on_watts: float = setting("SwitchOnWatts", non_negative_number, switching.DEFAULT_ON_WATTS)
    switch_off_watts: float = setting("SwitchOffWatts", non_negative_number, switching.DEFAULT_OFF_WATTS)
    # GPUs: Gres= (by type, in order), gres.conf's device files (type, file) and our power model of them
    gres: Inventory = setting("Gres", gres.parse_node, ())
    gpu_files: tuple[tuple[str, str], ...] = ()
    gpu_idle_watts: int = setting("GpuIdleWatts", integer, 30)
    gpu_max_watts: int = setting("GpuMaxWatts", integer, 250)

    @property
    def gpus(self) -> tuple[Device, ...]:
        return gres.devices(self.gres, self.gpu_files)

    @property
    def switching(self) -> switching.Switching:
        return switching.Switching(self.switch_on_s, self.switch_off_s, self.switch_on_watts, self.switch_off_watts)


@dataclass(frozen=True, slots=True)
class PartitionConf:
    """One partition as configured."""

    name: str
    nodes: tuple[str, ...] = ()
    node_expr: str = setting("Nodes", text, "")
    default: bool = setting("Default", yes_no, False)
    max_time_min: int | None = setting("MaxTime", duration, None)
    over_time_limit_min: float | None = setting("OverTimeLimit", over_time_limit, None)  # None: the cluster's
    default_time_min: int | None = setting("DefaultTime", duration, None)
    state: str = setting("State", choice("up", "down", "drain", "inactive"), "UP")
    max_nodes: int | None = setting("MaxNodes", opt_integer, None)
    priority_job_factor: int = setting("PriorityJobFactor", integer, 1)
    qos: str = setting("QOS", text, "")  # the partition's QOS: its limits hold the partition's jobs
    allow_qos: tuple[str, ...] = setting("AllowQos", names, ("ALL",))
    # who may use it, as Slurm's keys (checked at submission and on a move, as EnforcePartLimits=ALL does)
    allow_accounts: tuple[str, ...] = setting("AllowAccounts", names, ("ALL",))
    deny_accounts: tuple[str, ...] = setting("DenyAccounts", names, ())
    allow_groups: tuple[str, ...] = setting("AllowGroups", names, ("ALL",))
    deny_qos: tuple[str, ...] = setting("DenyQos", names, ())
    priority_tier: int = setting("PriorityTier", bounded(0, 65533), 1)
    preempt_mode: str = setting("PreemptMode", preempt_mode, "")  # "": the cluster's
    energy_policy: str = setting("EnergyPolicy", energy_policy, "")  # "": the cluster's
    # NO, or EXCLUSIVE: every job of the partition gets whole nodes, as with --exclusive (Shared= is
    # Slurm's old name for it)
    over_subscribe: str = setting("OverSubscribe", over_subscribe, "NO", aliases=("Shared",))
    min_nodes: int = setting("MinNodes", integer, 0)  # a smaller job pends (PartitionNodeLimit), as MaxNodes
    # who may submit, as Slurm's: root alone (RootOnly), anyone but root (DisableRootJobs), jobs that
    # name a reservation only (ReqResv)
    root_only: bool = setting("RootOnly", yes_no, False)
    disable_root_jobs: bool = setting("DisableRootJobs", yes_no, False)
    req_resv: bool = setting("ReqResv", yes_no, False)

    @property
    def whole_nodes(self) -> bool:
        return self.over_subscribe == "EXCLUSIVE"


@dataclass(frozen=True, slots=True)
class Config:
    """The effective configuration of a cluster."""

    source: str = "(defaults)"
    files: tuple[str, ...] = ()  # every file read: the source and what it includes
    cluster_name: str = setting("ClusterName", text, "cluster", restart=True)
    # SlurmctldHost may be given several times, primary first (as in Slurm): slurmctld_host and
    # slurmctld_addr are the primary's, slurmctld_hosts every controller's (name, address)
    slurmctld_host: str = setting("SlurmctldHost", text, "localhost", restart=True)
    slurmctld_addr: str = "127.0.0.1"
    slurmctld_hosts: tuple[tuple[str, str], ...] = (("localhost", "127.0.0.1"),)
    # how long the active controller may be silent before a backup takes over (its lease's length)
    slurmctld_timeout_s: int = setting("SlurmctldTimeout", bounded(3, 65533), 120)
    slurmctld_primary_on_prog: str = setting("SlurmctldPrimaryOnProg", text, "", path=True)
    slurmctld_primary_off_prog: str = setting("SlurmctldPrimaryOffProg", text, "", path=True)
    slurmctld_port: int = setting("SlurmctldPort", integer, 6817, restart=True)
    slurmd_port: int = setting("SlurmdPort", integer, 6818)
    state_save_location: str = setting("StateSaveLocation", text, "/var/spool/wattsched/ctld", path=True, restart=True)
    # wattsched's own: where the controller's state lives when it must outlive one host (a
    # postgresql:// URL); empty: state.db, SQLite in StateSaveLocation
    state_storage_loc: str = setting("StateStorageLoc", text, "", restart=True)
    slurmd_spool_dir: str = setting("SlurmdSpoolDir", text, "/var/spool/wattsched/d", path=True)
    # Slurm's file system for jobs' temporary storage: each agent reads it with its %n expanded, as
    # SlurmdSpoolDir; a node's TmpDisk (for --tmp) is configured on its NodeName line, not measured
    tmp_fs: str = setting("TmpFS", text, "/tmp", path=True)
    # the Slurm-named daemons' files (slurmctld, slurmd): their pid when in the background, and their
    # log (empty: standard error, or syslog in the background); slurmd's take %n, the node's name
    slurmctld_pid_file: str = setting("SlurmctldPidFile", text, "/var/run/slurmctld.pid", path=True)
    slurmd_pid_file: str = setting("SlurmdPidFile", text, "/var/run/slurmd.pid", path=True)
    slurmctld_log_file: str = setting("SlurmctldLogFile", text, "", path=True)
    slurmd_log_file: str = setting("SlurmdLogFile", text, "", path=True)
    # accounting_storage/slurmdbd, a Slurm site's value, names the same accounting: the controller
    # writes it to AccountingStorageLoc itself, where Slurm's would send it through slurmdbd
    accounting_storage_type: str = setting(
        "AccountingStorageType",
        choice("accounting_storage/sqlalchemy", "accounting_storage/slurmdbd", "accounting_storage/none"),
        "accounting_storage/sqlalchemy", restart=True)
    accounting_storage_loc: str = setting("AccountingStorageLoc", text, "", restart=True)
    scheduler_type: str = setting("SchedulerType", plugin("sched"), "sched/backfill")
    scheduler_parameters: SchedulerParams = setting("SchedulerParameters", parse_scheduler_params, SchedulerParams())
    priority_type: str = setting("PriorityType", plugin("priority"), "priority/basic")
    # site rules run on every submission and update (wattsched.plugins.job_submit)
    job_submit_plugins: tuple[str, ...] = setting("JobSubmitPlugins", plugin_list("job_submit"), ())
    select_type: str = setting("SelectType", plugin("select"), "select/cons_tres")
    # the consumable resources, as Slurm's: memory is one with a *_Memory value (the default with
    # cons_tres, CR_Core_Memory), not with CR_CPU or CR_Core; CPUs are given one by one either way
    select_type_parameters: tuple[str, ...] = setting(
        "SelectTypeParameters", flags("CR_CPU", "CR_CPU_Memory", "CR_Core", "CR_Core_Memory", "CR_Memory"), ())
    auth_alt: AuthAltParams = setting("AuthAltParameters", parse_auth_alt, AuthAltParams(), restart=True)
    # AuthInfo=socket=PATH; default: auth/auth.sock beside StateSaveLocation
    auth_socket: str = setting("AuthInfo", auth_socket, "", path=True, restart=True)
    admin_users: tuple[str, ...] = setting("AdminUsers", names, ("root",))
    kill_wait_s: int = setting("KillWait", integer, 30)
    # minutes a running job may go past its time limit (then a soft one) before it is cancelled; a
    # partition's own OverTimeLimit overrides it (Config.over_time_s)
    over_time_limit_min: float = setting("OverTimeLimit", over_time_limit, 0)
    min_job_age_s: int = setting("MinJobAge", integer, 300)
    slurmd_timeout_s: int = setting("SlurmdTimeout", integer, 300)
    message_timeout_s: int = setting("MessageTimeout", integer, 10)
    scheduler_interval_s: float = setting("SchedulerInterval", positive_number, 1.0)
    first_job_id: int = setting("FirstJobId", integer, 1)
    max_array_size: int = setting("MaxArraySize", bounded(1, 4_000_001), 1001)
    max_job_count: int = setting("MaxJobCount", bounded(1, 4_000_000), 10000)
    max_tasks_per_node: int = setting("MaxTasksPerNode", bounded(1, 65533), 512)  # a step's, on one node
    # which of the submitting shell's soft limits (ulimit) jobs and steps get (wattsched.rlimits)
    propagate_resource_limits: str = setting("PropagateResourceLimits", rlimit_names, "ALL")
    propagate_resource_limits_except: str = setting("PropagateResourceLimitsExcept", rlimit_names, "")
    # wattsched's own, under the QOS and association limits: the jobs one user may have pending or running
    # at once (administrators are exempt); 0: MaxJobCount alone bounds them
    max_submit_jobs_per_user: int = setting("MaxSubmitJobsPerUser", bounded(0, 4_000_000), 5000)
    slurmctld_parameters: RateLimits = setting("SlurmctldParameters", parse_slurmctld_params, RateLimits())
    def_mem_per_cpu_mb: int = setting("DefMemPerCPU", memory, 0)
    def_mem_per_node_mb: int = setting("DefMemPerNode", memory, 0)  # (one or the other, as Slurm's)
    # whether a job beyond its partition's MaxTime or MaxNodes is refused at submission (else it waits)
    enforce_part_limits: str = setting("EnforcePartLimits", choice("all", "any", "no", "yes"), "no")
    # Slurm's: the ports srun listens on; srun here listens on none (its streams go over its own
    # connections to the agents), so any range holds
    srun_port_range: tuple[int, int] | None = setting("SrunPortRange", port_range, None)
    # the TRES accounting keeps beyond Slurm's defaults: every one of these is kept here always
    accounting_storage_tres: tuple[str, ...] = setting(
        "AccountingStorageTRES", tres_names("cpu", "mem", "energy", "node", "billing", "gres/gpu", "fs/disk", "vmem",
                                            "pages"), ())
    # how jobs' use is gathered: both read each task's use from the kernel (/proc) on its node
    job_acct_gather_type: str = setting("JobAcctGatherType", choice("jobacct_gather/linux", "jobacct_gather/cgroup"),
                                        "jobacct_gather/linux")
    # e-mail on jobs' events (--mail-type): the program run as ``MailProg -s SUBJECT USER``, and the
    # domain added to a user name without one
    mail_prog: str = setting("MailProg", text, "/bin/mail", path=True)
    mail_domain: str = setting("MailDomain", text, "")
    # the cluster's licenses (wattsched.licenses), counted apart from any node: name[:count],...
    licenses: str = setting("Licenses", license_list, "")
    job_requeue: bool = setting("JobRequeue", yes_no, True)
    return_to_service: int = setting("ReturnToService", integer, 1)
    emulated_agents: int = setting("EmulatedAgents", integer, 1)
    # priority/multifactor
    priority_weight_age: int = setting("PriorityWeightAge", integer, 0)
    priority_weight_job_size: int = setting("PriorityWeightJobSize", integer, 0)
    priority_weight_partition: int = setting("PriorityWeightPartition", integer, 0)
    priority_weight_fairshare: int = setting("PriorityWeightFairshare", integer, 0)
    priority_weight_qos: int = setting("PriorityWeightQOS", integer, 0)
    priority_weight_energy: int = setting("PriorityWeightEnergy", integer, 0)
    # ours: flexible work (a --deadline with slack) ahead in the grid's greener hours (CarbonIntensity)
    priority_weight_carbon: int = setting("PriorityWeightCarbon", integer, 0)
    priority_max_age_min: int = setting("PriorityMaxAge", minutes, 7 * 1440)
    priority_favor_small: bool = setting("PriorityFavorSmall", yes_no, False)
    priority_decay_half_life_min: int = setting("PriorityDecayHalfLife", minutes, 7 * 1440)
    priority_calc_period_s: int = setting("PriorityCalcPeriod", period_s, 300)
    priority_usage_reset_period: str = setting(
        "PriorityUsageResetPeriod", choice( "none", "now", "daily", "weekly", "monthly", "quarterly", "yearly"), "none")
    fairshare_dampening_factor: int = setting("FairShareDampeningFactor", positive, 1)
    priority_flags: tuple[str, ...] = setting("PriorityFlags", flags("FAIR_TREE", "NO_FAIR_TREE"), ())
    # preemption (wattsched.preemption): preempt/qos; the mode of a QOS that says "cluster"
    preempt_type: str = setting("PreemptType", choice("preempt/none", "preempt/qos", "preempt/partition_prio"),
                                "preempt/none")
    preempt_mode: str = setting("PreemptMode", preempt_mode, "OFF")
    preempt_exempt_time_s: int = setting("PreemptExemptTime", duration_s, 0)
    accounting_storage_enforce: tuple[str, ...] = setting(
        "AccountingStorageEnforce", flags( "associations", "limits", "qos", "safe", "wckeys", "nojobs", "nosteps"), ())
    # ours: meeting a lowered cap (wattsched.capshed): the steps, in order, and the time they have
    power_cap_shed: tuple[str, ...] = setting("PowerCapShed", flags("cpufreq", "suspend", "requeue", "cancel"),
                                              ("cpufreq", "suspend"))
    power_cap_shed_time_s: int = setting("PowerCapShedTime", bounded(1, 3600), 30)
    # Slurm's keys of its power/cray_aries: PowerPlugin=power/balance (ours, on any node with a
    # powercap tree) moves the cap between the busy nodes' hardware limits (wattsched.powerbalance)
    power_plugin: str = setting("PowerPlugin", choice("power/none", "power/balance"), "power/none")
    power_parameters: powerbalance.Params = setting("PowerParameters", powerbalance.parse, powerbalance.Params())
    power_cap: float | None = setting("PowerCap", parse_power_cap,
                                      None)  # watts; math.inf for INFINITE; None: capping off
    # ours: jobs admitted under the cap at MaxWatts, or at what their earlier runs drew plus a margin
    power_cap_admission: str = setting("PowerCapAdmission", choice("maxwatts", "predicted"), "maxwatts")
    power_cap_margin: float = setting("PowerCapMargin", fraction, 0.2)
    # ours: the grid's carbon intensity over time, a file or an http(s) URL (wattsched.carbon)
    carbon_intensity: str = setting("CarbonIntensity", text, "")
    # ours: a file of the cap's scheduled steps (wattsched.capschedule), read at start and reconfigure
    power_cap_schedule: str = setting("PowerCapSchedule", text, "", path=True)
    acct_gather_energy_type: str = setting("AcctGatherEnergyType", plugin("acct_gather_energy"),
                                           "acct_gather_energy/none")
    acct_gather_node_freq_s: int = setting("AcctGatherNodeFreq", positive, 30)
    energy_sysfs_root: str = setting("EnergySysfsRoot", text, "", path=True)
    energy_emulated_lag_s: float = setting("EnergyEmulatedLag", non_negative_number, 0.0)
    energy_emulated_noise: float = setting("EnergyEmulatedNoise", non_negative_number, 0.0)
    # acct_gather.conf, as Slurm's: the BMCs' credentials are secrets, so the file is root's alone
    # (wattsched.bmcauth: without a password, emulated BMCs get a random one per cluster)
    energy_ipmi_username: str = setting("EnergyIPMIUsername", text, "", conf=ACCT_GATHER)
    energy_ipmi_password: str = setting("EnergyIPMIPassword", text, "", conf=ACCT_GATHER)
    energy_ipmi_frequency_s: int = setting("EnergyIPMIFrequency", integer, 0, conf=ACCT_GATHER)  # 0: AcctGatherNodeFreq
    energy_ipmi_calc_adjustment: bool = setting("EnergyIPMICalcAdjustment", yes_no, False, conf=ACCT_GATHER)
    energy_ipmi_power_sensors: tuple[str, ...] = setting("EnergyIPMIPowerSensors", names, (), conf=ACCT_GATHER)
    energy_ipmi_timeout_s: int = setting("EnergyIPMITimeout", positive, 10, conf=ACCT_GATHER)
    # ours, beside Slurm's IPMI keys: acct_gather_energy/redfish and Redfish power switching. Without a
    # user or password of its own, Redfish logs in with the IPMI ones (a BMC has one set of accounts);
    # its certificate is checked against EnergyRedfishCAFile, else the host's trust store (emulated
    # BMCs: the cluster's own authority, wattsched.bmcauth), and never not checked
    energy_redfish_username: str = setting("EnergyRedfishUsername", text, "", conf=ACCT_GATHER)
    energy_redfish_password: str = setting("EnergyRedfishPassword", text, "", conf=ACCT_GATHER)
    energy_redfish_ca_file: str = setting("EnergyRedfishCAFile", text, "", conf=ACCT_GATHER, path=True)
    energy_redfish_timeout_s: int = setting("EnergyRedfishTimeout", positive, 10, conf=ACCT_GATHER)
    emulated_nodes: bool = setting("EmulatedNodes", yes_no, False, restart=True)
    emulated_bmc_port: int = setting("EmulatedBMCPort", positive, 16230, restart=True)
    # ours: how the default Suspend/ResumeProgram (wattsched power) switches nodes; empty: Redfish
    # when the energy is read over Redfish, IPMI otherwise
    bmc_protocol: str = setting("BmcProtocol", choice("ipmi", "redfish"), "")
    cpu_freq_def: str = setting("CpuFreqDef", cpu_freq_spec, "")
    cpu_freq_governors: tuple[str, ...] = setting("CpuFreqGovernors", governors, cpufreq.DEFAULT_GOVERNORS)
    cpu_freq_sysfs_root: str = setting("CpuFreqSysfsRoot", text, "", path=True)
    # energy policies (wattsched.energypolicy; EAR's names): the default, its settings
    energy_policy: str = setting("EnergyPolicy", energy_policy, "monitoring")
    energy_policy_penalty: float = setting("EnergyPolicyPenalty", fraction, energypolicy.DEFAULT_PENALTY)
    energy_policy_min_gain: float = setting("EnergyPolicyMinGain", fraction, energypolicy.DEFAULT_MIN_GAIN)
    energy_policy_min_time_freq: int = setting("EnergyPolicyMinTimeFreq", integer, 0)  # kHz; 0: medium
    acct_gather_profile_type: str = setting(
        "AcctGatherProfileType", choice("acct_gather_profile/none", "acct_gather_profile/hdf5"),
        "acct_gather_profile/none")
    profile_hdf5_dir: str = setting("ProfileHDF5Dir", text, "", path=True)
    profile_hdf5_default: tuple[str, ...] = setting("ProfileHDF5Default", flags("None", "All", "Energy", "Task"), ())
    job_acct_gather_frequency: tuple[tuple[str, int], ...] = setting("JobAcctGatherFrequency", parse_acctg_freq, ())
    # power saving (Slurm's names, plus PowerSaveType and PowerSaveParameters of ours)
    suspend_time_s: int | None = setting("SuspendTime", suspend_time, None)  # None: NONE, no idle timeout
    suspend_timeout_s: int = setting("SuspendTimeout", positive, 30)
    resume_timeout_s: int = setting("ResumeTimeout", positive, 60)
    suspend_rate: int = setting("SuspendRate", integer, 60)
    resume_rate: int = setting("ResumeRate", integer, 300)
    suspend_program: str = setting("SuspendProgram", text, "")
    resume_program: str = setting("ResumeProgram", text, "")
    suspend_exc_nodes: tuple[str, ...] = setting("SuspendExcNodes", hosts, ())
    suspend_exc_parts: tuple[str, ...] = setting("SuspendExcParts", names, ())
    power_save_type: tuple[str, ...] = setting("PowerSaveType", power_save_types, ())
    power_save_parameters: tuple[tuple[str, float | str], ...] = setting("PowerSaveParameters", parse_power_save_params,
                                                                         ())
    log_level: str = setting("SlurmctldDebug", choice(*LOG_LEVELS), "info")
    slurmd_log_level: str = setting("SlurmdDebug", choice(*LOG_LEVELS), "info")
    # prologs and epilogs (admins' programs; Slurm's keys)
    prolog: str = setting("Prolog", text, "", path=True)
    epilog: str = setting("Epilog", text, "", path=True)
    prolog_slurmctld: str = setting("PrologSlurmctld", text, "", path=True)
    epilog_slurmctld: str = setting("EpilogSlurmctld", text, "", path=True)
    task_prolog: str = setting("TaskProlog", text, "", path=True)
    task_epilog: str = setting("TaskEpilog", text, "", path=True)
    prolog_epilog_timeout_s: int = setting("PrologEpilogTimeout", integer, 0)  # 0: no limit
    # MPI (Slurm's keys): the type srun uses without --mpi, and the ports steps may reserve
    mpi_default: str = setting("MpiDefault", mpi_type, "none")
    mpi_ports: tuple[int, int] | None = setting("MpiParams", mpi_params, None)
    kill_on_bad_exit: bool = setting("KillOnBadExit", yes_no, False)  # srun -K without the option
    wait_time_s: int = setting("WaitTime", integer, 0)  # srun -W without the option (0: no limit)
    # process tracking and confinement (Slurm's keys); cgroup.conf beside the file sets the cgroup_*
    proctrack_type: str = setting("ProctrackType", choice("proctrack/pgid", "proctrack/cgroup", "proctrack/linuxproc"),
                                  "proctrack/pgid")
    task_plugin: tuple[str, ...] = setting("TaskPlugin", plugin_list("task", "none", "cgroup", "affinity"),
                                           ("task/none",))
    task_plugin_param: tuple[str, ...] = setting(
        "TaskPluginParam", flags("None", "Cores", "Sockets", "Threads", "Verbose", "Autobind=Cores",
                                 "Autobind=Sockets", "Autobind=Threads"), ())
    cgroup_plugin: str = setting("CgroupPlugin", choice("autodetect", "cgroup/v1", "cgroup/v2"),
                                 "autodetect", conf="cgroup.conf")
    cgroup_mountpoint: str = setting("CgroupMountpoint", text, "/sys/fs/cgroup", conf="cgroup.conf")
    constrain_cores: bool = setting("ConstrainCores", yes_no, False, conf="cgroup.conf")
    constrain_ram_space: bool = setting("ConstrainRAMSpace", yes_no, False, conf="cgroup.conf")
    allowed_ram_space: float = setting("AllowedRAMSpace", percent, 100.0, conf="cgroup.conf")
    constrain_swap_space: bool = setting("ConstrainSwapSpace", yes_no, False, conf="cgroup.conf")
    allowed_swap_space: float = setting("AllowedSwapSpace", percent, 0.0, conf="cgroup.conf")
    max_ram_percent: float = setting("MaxRAMPercent", percent, 100.0, conf="cgroup.conf")
    min_ram_space_mb: int = setting("MinRAMSpace", integer, 30, conf="cgroup.conf")
    constrain_devices: bool = setting("ConstrainDevices", yes_no, False, conf="cgroup.conf")
    # wattsched's own: the processes and threads a job may have on a node (the job cgroup's pids.max),
    # whenever jobs live in cgroups, so a fork bomb fails inside its job; 0: no limit
    max_pids_per_job: int = setting("MaxPidsPerJob", bounded(0, 4_194_304), 8192, conf="cgroup.conf")
    # GPUs (Slurm's GresTypes; gres.conf beside the file names devices, AutoDetect=nvml reads them)
    gres_types: tuple[str, ...] = setting("GresTypes", flags("gpu"), ())
    gres_autodetect: str = "off"
    # metrics (Slurm 25.11's keys): served when MetricsType=metrics/openmetrics
    metrics_type: str = setting("MetricsType", choice("metrics/openmetrics", "metrics/none"), "metrics/none")
    metrics_auth_users: tuple[str, ...] = setting("MetricsAuthUsers", names, ())
    metrics_parameters: tuple[str, ...] = setting("MetricsParameters", flags("ignore_private_data"), ())
    # what users may see only of their own (administrators see all), as Slurm's PrivateData:
    # jobs (squeue, scontrol, sacct, sstat, the REST API), usage (sshare), users and accounts (sacctmgr)
    private_data: tuple[str, ...] = setting("PrivateData", flags("accounts", "jobs", "usage", "users"), ())
    nodes: tuple[NodeConf, ...] = ()
    partitions: tuple[PartitionConf, ...] = ()

    @property
    def memory_consumable(self) -> bool:
        """Whether jobs' memory is held against their nodes' (SelectTypeParameters)."""
        if not self.select_type_parameters:
            return self.select_type != "select/linear"
        return any(p.endswith("Memory") for p in self.select_type_parameters)

    @property
    def license_totals(self) -> dict[str, int]:
        """Each configured license's count."""
        return dict(licenses.parse(self.licenses))

    @property
    def accounting_url(self) -> str:
        """The SQLAlchemy URL of the accounting database (SQLite in the state dir by default)."""
        if self.accounting_storage_loc:
            return self.accounting_storage_loc
        return f"sqlite:///{os.path.join(self.state_save_location, 'accounting.db')}"

    @property
    def profile_dir(self) -> str:
        """ProfileHDF5Dir, by default ``profile`` beside the agents' spool folder."""
        return self.profile_hdf5_dir or os.path.join(os.path.dirname(self.slurmd_spool_dir.rstrip("/")), "profile")

    @property
    def suspend_excluded(self) -> frozenset[str]:
        """The nodes power saving never switches: SuspendExcNodes and the nodes of SuspendExcParts."""
        return frozenset(self.suspend_exc_nodes).union(
            *(p.nodes for p in self.partitions if p.name in self.suspend_exc_parts))

    @property
    def cgroups(self) -> bool:
        """Whether jobs live in control groups (proctrack/cgroup or task/cgroup)."""
        return self.proctrack_type == "proctrack/cgroup" or "task/cgroup" in self.task_plugin

    @property
    def gpus_hidden(self) -> bool:
        """Whether a job's device cgroup hides the node's other GPUs (task/cgroup, ConstrainDevices):
        its GPU runtime then numbers its own from 0."""
        return self.constrain_devices and "task/cgroup" in self.task_plugin

    @property
    def power_saving(self) -> bool:
        """Whether anything may switch nodes off: an idle timeout or a power-saving policy."""
        return self.suspend_time_s is not None or bool(self.power_save_type)

    @property
    def emulated_bmcs(self) -> bool:
        """Whether virtual nodes need their emulated BMCs: read by acct_gather_energy/ipmi or
        /redfish, or switched by the default Suspend/ResumeProgram (``wattsched power``)."""
        return bool(self.emulated_bmc_protocols)

    @property
    def switching_protocol(self) -> str:
        """How the default Suspend/ResumeProgram reach the BMCs: BmcProtocol, else the energy's."""
        if self.bmc_protocol:
            return self.bmc_protocol
        return "redfish" if self.acct_gather_energy_type == "acct_gather_energy/redfish" else "ipmi"

    @property
    def emulated_bmc_protocols(self) -> frozenset[str]:
        """What the emulated BMCs of virtual nodes must speak: the energy plugin's protocol, and the
        switching one where power saving uses the default programs."""
        if not self.emulated_nodes:
            return frozenset()
        wanted = {kind for kind in ("ipmi", "redfish") if self.acct_gather_energy_type == f"acct_gather_energy/{kind}"}
        if self.power_saving and not (self.suspend_program and self.resume_program):
            wanted.add(self.switching_protocol)
        return frozenset(wanted)

    @property
    def auth_socket_path(self) -> str:
        """The token service's socket: outside StateSaveLocation, which no user may enter."""
        return self.auth_socket or os.path.join(os.path.dirname(self.state_save_location.rstrip("/")), "auth",
                                                "auth.sock")

    @property
    def key_file(self) -> str:
        """AuthAltParameters' jwt_key (relative to the file's folder), else jwt_hs256.key in StateSaveLocation."""
        if self.auth_alt.jwt_key:
            return os.path.normpath(os.path.join(os.path.dirname(self.source), self.auth_alt.jwt_key))
        return os.path.join(self.state_save_location, "jwt_hs256.key")

    @property
    def controller_url(self) -> str:
        return f"http://{self.slurmctld_addr}:{self.slurmctld_port}"

    @property
    def controller_urls(self) -> tuple[str, ...]:
        """Every controller's URL, primary first: the order clients try them in."""
        return tuple(f"http://{addr}:{self.slurmctld_port}" for _name, addr in self.slurmctld_hosts)

    def node_partitions(self) -> dict[str, tuple[str, ...]]:
        """Each node's partitions, in the configuration's order: one pass over the partitions (a
        membership test per node and partition costs 20,000 x 20,000 on the largest machines)."""
        member: dict[str, dict[str, None]] = {}  # ordered sets: a node listed twice is in it once
        for part in self.partitions:
            for name in part.nodes:
                member.setdefault(name, {})[part.name] = None
        return {name: tuple(parts) for name, parts in member.items()}

    def whole_node_partitions(self) -> frozenset[str]:
        """The partitions whose jobs get whole nodes (OverSubscribe=EXCLUSIVE)."""
        return frozenset(p.name for p in self.partitions if p.whole_nodes)

    def pass_interval_s(self) -> float:
        """Seconds between periodic scheduling passes: SchedulerParameters' sched_interval (Slurm's
        key, whole seconds), else SchedulerInterval (ours, fractions allowed)."""
        given = self.scheduler_parameters.sched_interval_s
        return self.scheduler_interval_s if given is None else given

    def over_time_s(self, partition: str) -> float:
        """How long a job of ``partition`` may run past its time limit before it is cancelled: the
        partition's OverTimeLimit, else the cluster's (math.inf: UNLIMITED)."""
        minutes = next((p.over_time_limit_min for p in self.partitions if p.name == partition), None)
        return (self.over_time_limit_min if minutes is None else minutes) * 60

    def default_partition(self) -> PartitionConf | None:
        for part in self.partitions:
            if part.default:
                return part
        return self.partitions[0] if self.partitions else None

    def as_pairs(self) -> list[tuple[str, str]]:
        """The global settings as (Slurm key, value) pairs, for ``scontrol show config``."""
        keys = {**_GLOBAL_KEYS, **_CGROUP_KEYS, **_ACCT_GATHER_KEYS}
        pairs = []
        for key, (attr, _p) in sorted(keys.items(), key=lambda kv: kv[0]):
            if key == "SlurmctldHost":  # one per controller, numbered, as Slurm shows them
                pairs += [(f"SlurmctldHost[{i}]", f"{name}({addr})")
                          for i, (name, addr) in enumerate(self.slurmctld_hosts)]
            else:
                pairs.append((key, _masked(key, _show(getattr(self, attr)))))
        return pairs


# what every user may read of the configuration (scontrol show config) leaves out secrets: the BMCs'
# password, and the password a database URL may carry
_SECRET_KEYS = frozenset({"EnergyIPMIPassword", "EnergyRedfishPassword"})
_URL_PASSWORD = re.compile(r"(://[^:/@]*:)[^@/]*@")


def _masked(key: str, shown: str) -> str:
    if key in _SECRET_KEYS and shown != "(null)":
        return "*****"
    return _URL_PASSWORD.sub(r"\1*****@", shown) if key.endswith("StorageLoc") else shown


def _show(value: Any) -> str:
    if isinstance(value, float) and math.isinf(value):
        return "INFINITE"
    if isinstance(value, SchedulerParams | powerbalance.Params):
        return ",".join(f"{k}={getattr(value, k)}" for k in value.__slots__)
    if isinstance(value, AuthAltParams):  # as Slurm shows it
        return ",".join(filter(None, (f"jwt_key={value.jwt_key}" if value.jwt_key else "",
                                      f"max_token_lifespan={value.max_token_lifespan_s}",
                                      "disable_token_creation" if value.disable_token_creation else "")))
    if isinstance(value, RateLimits):
        return (f"rl_enable,rl_table_size={value.table_size},rl_bucket_size={value.bucket_size},"
                f"rl_refill_rate={value.refill_rate},rl_refill_period={value.refill_period_s},"
                f"rl_log_freq={value.log_freq_s}") if value.enabled else "(null)"
    if value is None:
        return "(null)"
    if isinstance(value, bool):
        return "Yes" if value else "No"
    if isinstance(value, tuple):
        return ",".join(f"{v[0]}={v[1]}" if isinstance(v, tuple) else v for v in value) or "(null)"
    return str(value) if value != "" else "(null)"


def _table(cls: type, conf: str) -> dict[str, tuple[str, Callable[[str], Any]]]:
    """The keys of one kind of line, each with its aliases, from the fields' declarations."""
    table = {}
    for f in fields(cls):
        if f.metadata.get("conf") == conf:
            for key in (f.metadata["key"], *f.metadata["aliases"]):
                table[key] = (f.name, f.metadata["parse"])
    return table


_GLOBAL_KEYS = _table(Config, "")
_CGROUP_KEYS = _table(Config, "cgroup.conf")
_ACCT_GATHER_KEYS = _table(Config, ACCT_GATHER)
_NODE_KEYS = _table(NodeConf, "")
_PARTITION_KEYS = _table(PartitionConf, "")
# Keys whose value is a path resolved against the config file's folder when relative.
_PATH_ATTRS = frozenset(f.name for f in fields(Config) if f.metadata.get("path"))
# settings the running controller cannot take without a restart (scontrol reconfigure refuses them);
# of SlurmctldHost, what matters is the address the controller listens on
RESTART_ONLY = {f.metadata["key"]: f.name for f in fields(Config) if f.metadata.get("restart")} | \
    {"SlurmctldHost": "slurmctld_hosts"}

_LOWER_GLOBAL = {k.lower(): k for k in _GLOBAL_KEYS}
_LOWER_CGROUP = {k.lower(): k for k in _CGROUP_KEYS}
_LOWER_ACCT_GATHER = {k.lower(): k for k in _ACCT_GATHER_KEYS}
_LOWER_NODE = {k.lower(): k for k in _NODE_KEYS}
_LOWER_PART = {k.lower(): k for k in _PARTITION_KEYS}


def _pairs(text: str, path: str, lineno: int) -> list[tuple[str, str]]:
    try:
        tokens = shlex.split(text, comments=False, posix=True)
    except ValueError as exc:
        raise ConfigError(path, lineno, text.split("=")[0], f"cannot parse line: {exc}") from exc
    pairs = []
    for token in tokens:
        key, sep, value = token.partition("=")
        if not sep:
            raise ConfigError(path, lineno, key, "expected Key=Value")
        pairs.append((key, value))
    return pairs


def _set(target: dict, table: dict, lower: dict, key: str, value: str, path: str, lineno: int,
         what: str) -> None:
    canonical = lower.get(key.lower())
    if canonical is None and key.lower() in _LOWER_ACCT_GATHER:
        raise ConfigError(path, lineno, key, f"belongs in {ACCT_GATHER} beside it (readable by root alone), "
                          "as in Slurm: the BMCs' credentials are secrets every user could read here")
    if canonical is None:
        raise ConfigError(path, lineno, key, f"unknown {what} key")
    attr, parser = table[canonical]
    try:
        target[attr] = parser(value)
    except ValueError as exc:
        raise ConfigError(path, lineno, canonical, str(exc)) from exc


def load(path: str | os.PathLike[str], globals_only: bool = False, switches_nodes: bool = False) -> Config:
    """Read and validate a configuration file (and the files it includes).

    ``switches_nodes``: the reader will switch nodes (the controller, not the simulator), so power
    saving must have a way to do it.

    ``globals_only`` skips node and partition lines: the CLI needs only the controller's
    address and the key, and a 5,000-node file would otherwise cost it start-up time.
    """
    path = os.path.abspath(os.fspath(path))
    globals_: dict[str, Any] = {}
    nodes: dict[str, NodeConf] = {}
    node_lines: dict[str, int] = {}
    partitions: list[tuple[dict[str, Any], str, int]] = []
    node_default: dict[str, Any] = {}
    part_default: dict[str, Any] = {}
    files: list[str] = []
    _read(path, globals_, nodes, node_lines, partitions, node_default, part_default, depth=0,
          globals_only=globals_only, files=files)

    base = os.path.dirname(path)
    if not globals_only:
        _read_cgroup_conf(os.path.join(base, "cgroup.conf"), globals_, files)
        _read_acct_gather_conf(os.path.join(base, ACCT_GATHER), globals_, files)
        _read_gres_conf(os.path.join(base, "gres.conf"), globals_, nodes, files)
        with_gpus = [name for name, node in nodes.items() if node.gres]
        if with_gpus and "gpu" not in globals_.get("gres_types", ()):
            raise ConfigError(path, node_lines[with_gpus[0]], "Gres",
                              f"node {with_gpus[0]} has GPUs but GresTypes does not name gpu")
    for attr in _PATH_ATTRS:
        if attr in globals_ and not os.path.isabs(globals_[attr]):
            globals_[attr] = os.path.normpath(os.path.join(base, globals_[attr]))
    hosts = tuple(_controller_host(h) for h in globals_.pop("_ctld_hosts", None) or ["localhost"])
    if len({name for name, _ in hosts}) < len(hosts):
        where_host: tuple[str, int] = globals_["_where"]["SlurmctldHost"]
        raise ConfigError(*where_host, "SlurmctldHost", "a controller is listed twice")
    globals_["slurmctld_hosts"] = hosts
    globals_["slurmctld_host"], globals_["slurmctld_addr"] = hosts[0]

    part_objs: list[PartitionConf] = []
    seen_parts: set[str] = set()
    for values, ppath, lineno in partitions:
        name = values.pop("name")
        if name in seen_parts:
            raise ConfigError(ppath, lineno, "PartitionName", f"duplicate partition '{name}'")
        seen_parts.add(name)
        expr = values.get("node_expr", "")
        if expr.upper() == "ALL":
            members = tuple(nodes)
        else:
            try:
                members = tuple(hostlist.expand(expr))
            except hostlist.HostlistError as exc:
                raise ConfigError(ppath, lineno, "Nodes", str(exc)) from exc
            unknown = [n for n in members if n not in nodes]
            if unknown:
                raise ConfigError(ppath, lineno, "Nodes",
                                  f"node {unknown[0]} is not defined by a NodeName line")
        values["state"] = values.get("state", "up").upper()
        part_objs.append(PartitionConf(name=name, nodes=members, **values))
    where: dict[str, tuple[str, int]] = globals_.pop("_where", {})
    for key, attr, known in (("SuspendExcNodes", "suspend_exc_nodes", nodes),
                             ("SuspendExcParts", "suspend_exc_parts", seen_parts)):
        unknown = [n for n in globals_.get(attr, ()) if n not in known]
        if unknown and not globals_only:
            raise ConfigError(*where[key], key, f"'{unknown[0]}' is not a configured "
                              f"{'node' if known is nodes else 'partition'}")
    defaults = [p for p in part_objs if p.default]
    if len(defaults) > 1:
        values, ppath, lineno = partitions[part_objs.index(defaults[1])]
        raise ConfigError(ppath, lineno, "Default", "more than one partition has Default=YES")
    config = Config(source=path, files=tuple(files), nodes=tuple(nodes.values()), partitions=tuple(part_objs),
                    **globals_)
    if switches_nodes:
        _check_power_programs(config, where)
    if config.def_mem_per_cpu_mb and config.def_mem_per_node_mb:
        raise ConfigError(*where["DefMemPerNode"], "DefMemPerNode", "DefMemPerCPU and DefMemPerNode are mutually "
                          "exclusive")
    if config.constrain_cores and config.emulated_nodes and not globals_only:
        raise ConfigError(*where.get("EmulatedNodes", (path, 0)), "EmulatedNodes",
                          "ConstrainCores (cgroup.conf) needs real nodes: virtual nodes' CPUs are not the host's")
    return config


def _read_cgroup_conf(path: str, globals_: dict, files: list[str]) -> None:
    """cgroup.conf: ``Key=Value`` lines, beside the main file (absent: Slurm's defaults)."""
    if not os.path.exists(path):
        return
    for lineno, line in _lines(path, files):
        for key, value in _pairs(line, path, lineno):
            _set(globals_, _CGROUP_KEYS, _LOWER_CGROUP, key, value, path, lineno, "cgroup.conf")


def _read_acct_gather_conf(path: str, globals_: dict, files: list[str]) -> None:
    """acct_gather.conf beside the main file, as Slurm's: the energy plugins' settings, the BMCs'
    credentials among them. Since it holds secrets it must be the reader's (or root's) and readable
    by no one else; a reader who cannot open it (a user's simulator) goes without it."""
    if not os.path.exists(path) or not os.access(path, os.R_OK):
        return
    private_file(path)
    for lineno, line in _lines(path, files):
        for key, value in _pairs(line, path, lineno):
            _set(globals_, _ACCT_GATHER_KEYS, _LOWER_ACCT_GATHER, key, value, path, lineno, ACCT_GATHER)


def private_file(path: str) -> None:
    """Refuse a file of secrets that another user could read or change (nothing a user can write
    is trusted by root)."""
    info = os.stat(path)
    if info.st_uid not in (0, os.geteuid()) or info.st_mode & 0o077:
        raise ConfigError(path, 0, ACCT_GATHER, f"holds secrets, so it must be readable by its owner (root) "
                          f"alone: owner uid {info.st_uid}, mode {info.st_mode & 0o777:04o} (chmod 600 it)")


_GRES_CONF_KEYS = {"nodename", "name", "type", "file", "count", "cores", "autodetect", "links", "flags"}


def _read_gres_conf(path: str, globals_: dict, nodes: dict[str, NodeConf], files: list[str]) -> None:
    """gres.conf beside the main file: ``[NodeName=...] Name=gpu [Type=...] File=/dev/nvidia[0-3]``
    lines give the GPUs of Gres= their device files (type by type, in order); ``AutoDetect=nvml``
    has the agent read them from NVML instead. Counts must agree with each node's Gres=."""
    if not os.path.exists(path):
        return
    found: dict[str, list[tuple[str, str]]] = {}
    last_line: dict[tuple[str, str], int] = {}  # (node, type) -> the last line that named its files
    for lineno, line in _lines(path, files):
        values = {}
        for key, value in _pairs(line, path, lineno):
            if key.lower() not in _GRES_CONF_KEYS:
                raise ConfigError(path, lineno, key, "unknown gres.conf key")
            values[key.lower()] = value
        if "autodetect" in values:
            mode = values["autodetect"].lower()
            if mode not in ("nvml", "off"):
                raise ConfigError(path, lineno, "AutoDetect", "expected nvml or off")
            if "name" not in values:
                globals_["gres_autodetect"] = mode
                continue
        if values.get("name", "").lower() != "gpu":
            raise ConfigError(path, lineno, "Name", "only Name=gpu is supported")
        try:
            targets = hostlist.expand(values["nodename"]) if "nodename" in values else \
                [n for n, node in nodes.items() if node.gres]
            paths = hostlist.expand(values["file"]) if "file" in values else []
        except hostlist.HostlistError as exc:
            raise ConfigError(path, lineno, "NodeName" if "nodename" in values else "File", str(exc)) from exc
        kind = values.get("type", "")
        if "count" in values and paths and int(values["count"] or 0) != len(paths):
            raise ConfigError(path, lineno, "Count", f"{values['count']} GPUs but {len(paths)} files")
        for name in targets:
            if name not in nodes:
                raise ConfigError(path, lineno, "NodeName", f"node {name} is not defined by a NodeName line")
            if not any(k == kind for k, _c in nodes[name].gres):
                raise ConfigError(path, lineno, "Type", f"node {name} has no Gres=gpu{':' + kind if kind else ''}")
            found.setdefault(name, []).extend((kind, p) for p in paths)
            last_line[(name, kind)] = lineno
    for name, listed in found.items():
        for kind, count in nodes[name].gres:
            given = sum(1 for k, _p in listed if k == kind)
            if given and given != count:
                raise ConfigError(path, last_line[(name, kind)], "File", f"node {name}: {given} files for "
                                  f"{count} GPUs of type '{kind or '(none)'}'")
        nodes[name] = replace(nodes[name], gpu_files=tuple(listed))


def _lines(path: str, files: list[str]) -> list[tuple[int, str]]:
    """A configuration file's lines with their numbers, comments and blank lines left out."""
    files.append(path)
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(path, 0, "(file)", f"cannot read configuration: {exc.strerror}") from exc
    return [(lineno, line) for lineno, raw in enumerate(text.splitlines(), start=1)
            if (line := raw.split("#", 1)[0].strip())]


def _check_power_programs(config: Config, where: dict[str, tuple[str, int]]) -> None:
    """Real nodes switched by power saving need a way to be switched: Suspend/ResumeProgram, or
    (the default programs, IPMI chassis control) a BmcAddr each. Virtual nodes have their
    emulated BMCs. Found at start-up rather than as a node that never comes back."""
    if not config.power_saving or config.emulated_nodes or (config.suspend_program and config.resume_program):
        return
    excluded = config.suspend_excluded
    missing = [n.name for n in config.nodes if not n.bmc_addr and n.name not in excluded]
    if missing:
        key = "SuspendTime" if "SuspendTime" in where else "PowerSaveType"
        raise ConfigError(*where.get(key, (config.source, 0)), key,
                          "power saving needs SuspendProgram and ResumeProgram, or a BmcAddr for every node it "
                          f"may switch (the default programs use its BMC); none for {hostlist.compress(missing)}")


def _read(path: str, globals_: dict, nodes: dict, node_lines: dict, partitions: list,
          node_default: dict, part_default: dict, depth: int, globals_only: bool, files: list[str]) -> None:
    if depth > 8:
        raise ConfigError(path, 0, "Include", "includes nested too deeply")
    for lineno, line in _lines(path, files):
        if line.lower().startswith("include "):
            target = line.split(None, 1)[1].strip()
            target = target if os.path.isabs(target) else os.path.join(os.path.dirname(path), target)
            _read(target, globals_, nodes, node_lines, partitions, node_default, part_default, depth + 1,
                  globals_only, files)
            continue
        if globals_only and line[:9].lower() in ("nodename=", "partition"):
            continue
        pairs = _pairs(line, path, lineno)
        head_key, head_value = pairs[0]
        if head_key.lower() == "nodename":
            values: dict[str, Any] = dict(node_default)
            for key, value in pairs[1:]:
                _set(values, _NODE_KEYS, _LOWER_NODE, key, value, path, lineno, "NodeName")
            if head_value.upper() == "DEFAULT":
                for attr, key in (("node_hostname", "NodeHostname"), ("node_addr", "NodeAddr")):
                    if attr in values:
                        raise ConfigError(path, lineno, key, f"{key} not allowed with NodeName=DEFAULT")
                node_default.clear()
                node_default.update(values)
                continue
            _add_nodes(head_value, values, nodes, node_lines, path, lineno)
        elif head_key.lower() == "partitionname":
            values = dict(part_default)
            for key, value in pairs[1:]:
                _set(values, _PARTITION_KEYS, _LOWER_PART, key, value, path, lineno, "PartitionName")
            if head_value.upper() == "DEFAULT":
                part_default.clear()
                part_default.update(values)
                continue
            values["name"] = head_value
            partitions.append((values, path, lineno))
        else:
            for key, value in pairs:
                _set(globals_, _GLOBAL_KEYS, _LOWER_GLOBAL, key, value, path, lineno, "configuration")
                globals_.setdefault("_where", {})[_LOWER_GLOBAL.get(key.lower(), key)] = (path, lineno)
                if key.lower() == "slurmctldhost":  # repeated: the primary, then the backups
                    globals_.setdefault("_ctld_hosts", []).append(globals_["slurmctld_host"])


def _controller_host(entry: str) -> tuple[str, str]:
    """``name(address)`` or ``name`` (its own address; localhost is 127.0.0.1) as (name, address)."""
    if "(" in entry and entry.endswith(")"):
        name, addr = entry[:-1].split("(", 1)
        return name, addr
    return entry, "127.0.0.1" if entry == "localhost" else entry


def _add_nodes(expr: str, values: dict, nodes: dict, node_lines: dict, path: str, lineno: int) -> None:
    try:
        names = hostlist.expand(expr)
    except hostlist.HostlistError as exc:
        raise ConfigError(path, lineno, "NodeName", str(exc)) from exc
    if "cpus" not in values:  # (given on the line or by NodeName=DEFAULT, it stands)
        values["cpus"] = values.get("sockets", 1) * values.get("cores_per_socket", 1) * \
            values.get("threads_per_core", 1)
    values["state"] = values.get("state", "unknown").upper()
    if values["cpus"] < 1:
        raise ConfigError(path, lineno, "CPUs", "a node needs at least one CPU")
    each = _per_node(names, values, path, lineno)
    for index, name in enumerate(names):
        if name in nodes:
            raise ConfigError(path, lineno, "NodeName", f"node {name} defined twice "
                              f"(first at line {node_lines[name]})")
        nodes[name] = NodeConf(name=name, **values, **{attr: listed[min(index, len(listed) - 1)]
                                                       for attr, listed in each.items()})
        node_lines[name] = lineno


def _per_node(names: list[str], values: dict, path: str, lineno: int) -> dict[str, list[Any]]:
    """NodeAddr, NodeHostname and Port of a line naming ``names``: each one value for every node,
    or one per node in order (Slurm's rules and words, as built for many slurmds on a host). The
    values are taken out of ``values``."""
    each: dict[str, list[Any]] = {}
    for attr, key in (("node_addr", "NodeAddr"), ("node_hostname", "NodeHostname"), ("port", "Port")):
        given = values.pop(attr, None)
        if given is None:
            continue
        # a port list without brackets (6819-6822) is a range too, as Slurm reads it
        bracketed = f"[{given}]" if attr == "port" and given[:1] != "[" and ("-" in given or "," in given) else given
        try:
            listed: list[Any] = hostlist.expand(bracketed)
        except hostlist.HostlistError as exc:
            raise ConfigError(path, lineno, key, str(exc)) from exc
        if len(listed) not in (1, len(names)):
            message = (f"Port count must equal that of NodeName records or there must be no more than one "
                       f"({len(listed)} != {len(names)})" if attr == "port" else
                       f"{key} count must equal that of NodeName records of there must be no more than one")
            raise ConfigError(path, lineno, key, message)
        if attr == "port":
            if not all(p.isdigit() and 0 < int(p) <= 0xFFFF for p in listed):
                raise ConfigError(path, lineno, key, f"Invalid Port {given}")
            listed = [int(p) for p in listed]
        each[attr] = listed
    return each


def change_partition(part: PartitionConf, settings: Sequence[tuple[str, str]],
                     node_names: Sequence[str]) -> PartitionConf:
    """``part`` with the settings of ``scontrol create|update PartitionName=`` applied, each read as
    the same key of a PartitionName line is. Nodes takes ALL, a list (empty: none), entries prefixed
    ``+`` or ``-`` that add and remove, and ``Nodes+=``/``Nodes-=``, as Slurm's scontrol. ValueError
    says, in Slurm's words, what is wrong."""
    values: dict[str, Any] = {}
    members = list(part.nodes)
    for given_key, value in settings:
        sign = given_key[-1] if given_key.endswith(("+", "-")) else ""
        key = given_key.removesuffix(sign)
        canonical = _LOWER_PART.get(key.lower())
        if canonical is None:
            raise ValueError(f"Update of this parameter is not supported: {given_key}={value}")
        attr, parser = _PARTITION_KEYS[canonical]
        if attr == "node_expr":
            members = _members(members, value, sign, node_names)
            continue
        if sign:
            raise ValueError(f"Invalid input: {given_key}={value}")
        try:
            values[attr] = parser(value)
        except ValueError as exc:
            raise ValueError(f"Invalid input: {given_key}={value} ({exc})") from exc
    if "state" in values:
        values["state"] = values["state"].upper()
    return replace(part, nodes=tuple(members), node_expr=hostlist.compress(members), **values)


def _members(members: list[str], value: str, sign: str, node_names: Sequence[str]) -> list[str]:
    """A partition's nodes after ``Nodes[+-]=value``: in the configuration's order, each once."""
    if not sign and value.upper() == "ALL":
        return list(node_names)
    entries = [e for e in re.split(r",(?![^\[]*\])", value) if e]  # commas outside brackets
    relative = bool(sign) or any(e[0] in "+-" for e in entries)
    keep, known = set(members) if relative else set(), set(node_names)
    for entry in entries:
        op = sign or (entry[0] if entry[0] in "+-" else "+")
        try:
            named = hostlist.expand(entry.lstrip("+-"), len(node_names))
        except hostlist.HostlistError as exc:
            raise ValueError(f"Invalid node name specified: {entry}") from exc
        unknown = [n for n in named if n not in known]
        if unknown:
            raise ValueError(f"Invalid node name specified: {unknown[0]}")
        keep = keep | set(named) if op == "+" else keep - set(named)
    return [n for n in node_names if n in keep]


def with_overrides(config: Config, **changes: Any) -> Config:
    """A copy of ``config`` with some settings replaced (used by tests and emulation)."""
    return replace(config, **changes)


__all__ = ["RESTART_ONLY", "Config", "ConfigError", "NodeConf", "PartitionConf", "change_partition", "load", "setting",
           "with_overrides"]
