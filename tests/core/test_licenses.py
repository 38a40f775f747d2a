"""Licenses in the pure core: Slurm's list grammar, the book over time, and both schedulers
holding jobs back while the licenses they ask for are taken (reason Licenses)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from wattsched import licenses, states
from wattsched.config import ConfigError
from wattsched.licenses import Book, Holding, LicenseSnap
from wattsched.plugins.priority.basic import BasicPriority
from wattsched.plugins.sched.backfill import BackfillScheduler
from wattsched.plugins.sched.builtin import BuiltinScheduler
from wattsched.plugins.select.cons_tres import ConsTresSelect
from wattsched.scheduling.cycle import schedule
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, RunningJob, Snapshot

NOW = 1_000_000.0
HOUR = 3600.0


# --- the grammar --------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "counts"), [
    ("fluent", (("fluent", 1),)),
    ("fluent:30,ansys:2", (("fluent", 30), ("ansys", 2))),
    ("a=3;b", (("a", 3), ("b", 1))),  # '=' and ';' as Slurm's parser takes them
    ("a:2,a:3", (("a", 5),)),  # a name given twice counts once, summed
    ("a:0", (("a", 0),)),
    ("matlab@slurmdb:4", (("matlab@slurmdb", 4),)),
    ("", ()),
])
def test_parse_reads_slurms_grammar(spec: str, counts: licenses.Counts) -> None:
    assert licenses.parse(spec) == counts


@pytest.mark.parametrize("spec", ["a b", "a:-1", ":3", "a:x", "a:1x", "a:99999999999", "a:"])
def test_parse_refuses_what_slurm_refuses(spec: str) -> None:
    with pytest.raises(licenses.LicenseError):
        licenses.parse(spec)


def test_parse_is_bounded_before_work() -> None:
    with pytest.raises(licenses.LicenseError):
        licenses.parse(",".join(f"l{i}" for i in range(licenses.MAX_NAMES + 1)))


def test_validate_needs_configured_names_and_counts_within_totals() -> None:
    configured = {"fluent": 4}
    licenses.validate((("fluent", 4),), configured)
    for asked in ((("fluent", 5),), (("ansys", 1),)):
        with pytest.raises(licenses.LicenseError):
            licenses.validate(asked, configured)


def test_text_is_slurms_form() -> None:
    assert licenses.text(licenses.parse("a,b:2")) == "a:1,b:2"


# --- the book -------------------------------------------------------------------------------------

def test_book_counts_holders_until_their_ends_and_plans_over_their_windows() -> None:
    book = Book(LicenseSnap({"lic": 4}, (Holding((("lic", 3),), NOW + HOUR),)), NOW)
    assert book.fits((("lic", 1),), NOW, NOW + 2 * HOUR)
    assert not book.fits((("lic", 2),), NOW, NOW + 60)
    assert book.fits((("lic", 4),), NOW + HOUR, NOW + 2 * HOUR)  # the holder gave them back
    book.hold((("lic", 2),), NOW + 2 * HOUR, NOW + 3 * HOUR)  # a reservation for later
    assert book.fits((("lic", 4),), NOW + HOUR, NOW + 2 * HOUR)
    assert not book.fits((("lic", 3),), NOW + HOUR, NOW + 2.5 * HOUR)  # overlaps the reservation
    assert book.release_times(NOW + 10 * HOUR) == [NOW + HOUR, NOW + 3 * HOUR]


def test_book_never_fits_a_license_not_configured_or_beyond_its_total() -> None:
    book = Book(LicenseSnap({"lic": 2}), NOW)
    assert not book.fits((("other", 1),), NOW, NOW + 1)
    assert not book.fits((("lic", 3),), NOW, NOW + 1)


def test_a_holder_past_its_limit_gives_back_just_after_now_and_one_without_limit_never() -> None:
    book = Book(LicenseSnap({"lic": 2}, (Holding((("lic", 1),), NOW - 10), Holding((("lic", 1),), None))), NOW)
    assert not book.fits((("lic", 1),), NOW, NOW + 1)
    assert book.fits((("lic", 1),), NOW + 1, NOW + 100)
    assert not book.fits((("lic", 2),), NOW + 1, NOW + 100)


def test_used_sums_the_holdings() -> None:
    snap = LicenseSnap({"a": 5, "b": 1}, (Holding((("a", 2),), None), Holding((("a", 1), ("b", 1)), NOW)))
    assert snap.used() == {"a": 3, "b": 1}


# --- the schedulers -------------------------------------------------------------------------------

def snapshot(pending: list[JobRequest], held: tuple[Holding, ...] = (), running: tuple[RunningJob, ...] = (),
             totals: dict[str, int] | None = None, cpus: int = 8) -> Snapshot:
    nodes = tuple(NodeSnap(f"n{i}", cpus, cpus - sum(r.cpus.get(f"n{i}", 0) for r in running), 1000, 1000)
                  for i in (1, 2))
    return Snapshot(now=NOW, nodes=nodes, partitions={"p": PartitionSnap("p", ("n1", "n2"))}, pending=tuple(pending),
                    running=running, licenses=LicenseSnap(totals if totals is not None else {"lic": 2}, held))


def job(job_id: int, lic: int = 0, minutes: int = 60, ntasks: int = 1) -> JobRequest:
    return JobRequest(job_id=job_id, user="u", partition="p", submit_time=job_id, ntasks=ntasks,
                      time_limit_min=minutes, licenses=(("lic", lic),) if lic else ())


def plan(snap: Snapshot, scheduler=None):
    return schedule(snap, BasicPriority(), scheduler or BackfillScheduler(), ConsTresSelect())


@pytest.mark.parametrize("scheduler", [BuiltinScheduler, BackfillScheduler])
def test_jobs_start_while_licenses_last_and_the_rest_wait_for_licenses(scheduler) -> None:
    decided = plan(snapshot([job(1, 1), job(2, 1), job(3, 1), job(4)]), scheduler())
    assert sorted(j for j, _a in decided.starts) == [1, 2, 4]  # a job asking for none is not held back
    assert decided.reasons[3] == states.R_LICENSES


@pytest.mark.parametrize("scheduler", [BuiltinScheduler, BackfillScheduler])
def test_licenses_held_by_running_jobs_are_not_free(scheduler) -> None:
    held = (Holding((("lic", 2),), NOW + HOUR),)
    decided = plan(snapshot([job(1, 1), job(2)], held), scheduler())
    assert [j for j, _a in decided.starts] == [2]
    assert decided.reasons[1] == states.R_LICENSES


def test_backfill_plans_a_license_bound_job_for_when_its_licenses_come_back() -> None:
    """Job 1 waits for the licenses a running job gives back in an hour; job 2 (2 h, one license)
    would take one past that time and waits; job 3 (30 min) fits before and starts."""
    held = (Holding((("lic", 2),), NOW + HOUR),)
    decided = plan(snapshot([job(1, 2), job(2, 1, minutes=120), job(3, 0, minutes=30)], held))
    assert decided.expected_start[1] == NOW + HOUR
    assert decided.reasons[1] == states.R_LICENSES
    assert [j for j, _a in decided.starts] == [3]


def test_a_backfilled_job_takes_no_license_a_reserved_job_was_promised() -> None:
    """Three licenses, one held for three more hours. Job 1 needs both nodes, planned in an hour
    when a running job gives n1 back, with two licenses. Job 2 (one license, 2 h) would make four
    licenses held at that hour: it waits for licenses. Job 3 (one license, 30 min) gives its
    license back in time: it starts on n2."""
    busy = (RunningJob(99, {"n1": 8}, {"n1": 0}, NOW + HOUR),)
    held = (Holding((("lic", 1),), NOW + 3 * HOUR),)
    queue = [job(1, 2, ntasks=16), job(2, 1, minutes=120), job(3, 1, minutes=30)]
    decided = plan(snapshot(queue, held, busy, totals={"lic": 3}), BackfillScheduler())
    assert decided.expected_start[1] == NOW + HOUR
    assert [j for j, _a in decided.starts] == [3]
    assert decided.reasons[2] == states.R_LICENSES


def test_a_license_the_configuration_no_longer_has_holds_the_job() -> None:
    decided = plan(replace(snapshot([job(1, 1)]), licenses=None), BuiltinScheduler())
    assert decided.reasons[1] == states.R_LICENSES and not decided.starts


# --- the configuration ----------------------------------------------------------------------------

def test_licenses_setting_is_kept_as_written_and_checked(tmp_path) -> None:
    from wattsched import config

    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=c\nLicenses=fluent:30,ansys\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n")
    loaded = config.load(conf)
    assert loaded.licenses == "fluent:30,ansys"
    assert loaded.license_totals == {"fluent": 30, "ansys": 1}
    assert ("Licenses", "fluent:30,ansys") in loaded.as_pairs()
    conf.write_text("ClusterName=c\nLicenses=fluent:many\nNodeName=n1 CPUs=1\nPartitionName=p Nodes=n1\n")
    with pytest.raises(ConfigError, match="Licenses"):
        config.load(conf)
