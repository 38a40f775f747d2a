"""The grid's carbon intensity (wattsched.carbon): the series' formats, a job's emissions, the
hour's greenness, and the priority factor that favours flexible work in greener hours."""

from __future__ import annotations

import json

import pytest

from wattsched import carbon
from wattsched.carbon import CarbonError
from wattsched.plugins.priority.multifactor import MultifactorPriority, Weights, flexibility
from wattsched.scheduling.records import JobRequest, NodeSnap, PartitionSnap, Snapshot

T0 = 1_800_000_000.0  # 2027-01-15T08:00:00Z
HOUR = 3600.0


def test_csv_with_a_header_iso_times_and_comments() -> None:
    series = carbon.parse("time,gco2_per_kwh\n# the day\n2027-01-15T08:00:00Z,400\n"
                          "2027-01-15T09:00:00+00:00, 100\n1800007200,250\n")
    assert series.times == (T0, T0 + HOUR, T0 + 2 * HOUR) and series.values == (400, 100, 250)
    assert series.at(T0 - 10) == 400 and series.at(T0 + HOUR) == 100 and series.at(T0 + 99 * HOUR) == 250
    assert carbon.parse("2027-01-15T08:00:00,400").times == (T0,)  # no offset: UTC


def test_electricity_maps_json_and_a_plain_list() -> None:
    history = {"zone": "FR", "history": [{"datetime": "2027-01-15T09:00:00.000Z", "carbonIntensity": 100},
                                         {"datetime": "2027-01-15T08:00:00.000Z", "carbonIntensity": 400}]}
    series = carbon.parse(json.dumps(history))
    assert series.times == (T0, T0 + HOUR) and series.values == (400, 100)
    listed = carbon.parse(json.dumps([{"time": T0, "carbon_intensity": 55.5}]))
    assert listed.at(T0) == 55.5


@pytest.mark.parametrize(("text", "message"), [
    ("", "no point"),
    ("1800000000,400,5", "line 1: expected TIME,INTENSITY"),
    ("1800000000,400\nyesterday,300", "line 2: 'yesterday' is not a time"),
    ("1800000000,-4", "out of range"),
    ("1800000000,400\n1800000000,300", "appears twice"),
    ('{"history": 5}', "expected a 'history' or 'forecast' list"),
    ('[{"datetime": "2027-01-15T08:00:00Z"}]', "needs a datetime"),
    ("{not json", "not JSON"),
])
def test_bad_series_say_where(text: str, message: str) -> None:
    with pytest.raises(CarbonError, match=message):
        carbon.parse(text)


def test_emissions_weigh_the_intensity_over_the_run() -> None:
    series = carbon.parse(f"{T0},400\n{T0 + HOUR},100\n")
    # 2 kWh over half an hour at 400 and half an hour at 100: the mean is 250 g/kWh
    assert series.mean(T0 + HOUR / 2, T0 + 1.5 * HOUR) == pytest.approx(250)
    assert series.emissions_g(2 * carbon.JOULES_PER_KWH, T0 + HOUR / 2, T0 + 1.5 * HOUR) == pytest.approx(500)
    assert series.emissions_g(carbon.JOULES_PER_KWH, T0 + 5, T0 + 5) == pytest.approx(400)  # an instant


def test_greenness_places_the_hour_within_its_day() -> None:
    series = carbon.parse("\n".join(f"{T0 + h * HOUR},{v}" for h, v in enumerate((400, 300, 100, 400))))
    assert series.greenness(T0) == 0.0 and series.greenness(T0 + 2 * HOUR) == 1.0
    assert series.greenness(T0 + HOUR) == pytest.approx(1 / 3)
    assert carbon.parse(f"{T0},200").greenness(T0) == 0.0  # a flat day: no hour greener than another


def _snapshot(now: float, greenness: float, *jobs: JobRequest) -> Snapshot:
    return Snapshot(now=now, nodes=(NodeSnap("n1", 4, 4, 1000, 1000),), partitions={"p": PartitionSnap("p", ("n1",))},
                    pending=jobs, greenness=greenness)


def test_flexible_work_goes_ahead_in_green_hours_only() -> None:
    now = T0
    rigid = JobRequest(1, "u", "p", submit_time=now - 600, time_limit_min=60)
    flexible = JobRequest(2, "u", "p", submit_time=now, time_limit_min=60, deadline=now + HOUR + 86400)
    tight = JobRequest(3, "u", "p", submit_time=now, time_limit_min=60, deadline=now + HOUR + 8640)
    assert (flexibility(rigid, now), flexibility(flexible, now)) == (0.0, 1.0)
    assert flexibility(tight, now) == pytest.approx(0.1)
    prio = MultifactorPriority()
    prio.weights = Weights(age=1000, carbon=10000, max_age_s=HOUR)
    green = prio.breakdown(_snapshot(now, 1.0, rigid, flexible, tight))
    assert green[2].priority > green[3].priority > green[1].priority and green[2].carbon == 1.0
    dirty = prio.breakdown(_snapshot(now, 0.0, rigid, flexible, tight))
    assert dirty[1].priority > dirty[2].priority and dirty[2].carbon == 0.0  # back to age alone
