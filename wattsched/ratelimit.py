"""Per-user RPC rate limiting, as slurmctld's (SlurmctldParameters=rl_enable and its rl_* keys).

A token bucket per user: it holds at most ``rl_bucket_size`` tokens, each request takes one, and
``rl_refill_rate`` tokens come back every ``rl_refill_period`` seconds. A request that finds the
bucket empty is refused ("Rate limit exceeded, please retry momentarily"); the commands wait and
retry, as Slurm's do. Root and the daemons are never limited. The table keeps ``rl_table_size``
users; when it is full the user seen least recently leaves it (and starts again with a full bucket).
Pure: the caller gives the time.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RateLimits:
    """SlurmctldParameters' rl_* keys with Slurm's defaults (rate limiting is off unless rl_enable)."""

    enabled: bool = False
    table_size: int = 8192
    bucket_size: int = 30
    refill_rate: int = 2
    refill_period_s: int = 1
    log_freq_s: int = 0  # at most one log line per user per this many seconds (0: per refill period)


class RateLimiter:
    def __init__(self, limits: RateLimits):
        self.limits = limits
        self._buckets: OrderedDict[int, list[float]] = OrderedDict()  # uid -> [tokens, last refill, last log]

    def configure(self, limits: RateLimits) -> None:
        """New limits (scontrol reconfigure): the buckets are kept, a smaller table forgets the oldest."""
        if limits != self.limits:
            self.limits = limits
            while len(self._buckets) > limits.table_size:
                self._buckets.popitem(last=False)

    def take(self, uid: int, now: float) -> bool:
        """Take a token of ``uid``'s; False when their bucket is empty."""
        limits = self.limits
        bucket = self._buckets.get(uid)
        if bucket is None:
            if len(self._buckets) >= limits.table_size:
                self._buckets.popitem(last=False)
            bucket = self._buckets[uid] = [float(limits.bucket_size), now, 0.0]
        else:
            self._buckets.move_to_end(uid)
            periods = int((now - bucket[1]) // limits.refill_period_s)
            if periods > 0:
                bucket[0] = min(float(limits.bucket_size), bucket[0] + periods * limits.refill_rate)
                bucket[1] += periods * limits.refill_period_s
        if bucket[0] >= 1:
            bucket[0] -= 1
            return True
        return False

    def should_log(self, uid: int, now: float) -> bool:
        """Whether a refusal of ``uid``'s is logged now: once per user per logging interval."""
        bucket = self._buckets.get(uid)
        if bucket is None:
            return True
        if now - bucket[2] >= max(self.limits.log_freq_s, self.limits.refill_period_s):
            bucket[2] = now
            return True
        return False

    def retry_after_s(self) -> int:
        """When a refused caller should try again: the next refill."""
        return self.limits.refill_period_s


def parse_slurmctld_params(text: str) -> RateLimits:
    """SlurmctldParameters: the rl_* keys; Slurm's other keys are accepted and have no effect here."""
    values: dict[str, int | bool] = {}
    keys = {"rl_table_size": "table_size", "rl_bucket_size": "bucket_size", "rl_refill_rate": "refill_rate",
            "rl_refill_period": "refill_period_s", "rl_log_freq": "log_freq_s"}
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _sep, value = item.partition("=")
        key = key.lower()
        if key == "rl_enable":
            values["enabled"] = True
        elif key in keys:
            try:
                number = int(value)
            except ValueError as exc:
                raise ValueError(f"{key} '{value}' is not a whole number") from exc
            if number <= 0 and key != "rl_log_freq":
                raise ValueError(f"{key} must be at least 1")  # Slurm refuses these too (a division by it)
            values[keys[key]] = number
    return RateLimits(**values)  # type: ignore[arg-type]
