"""Every duration argument takes milliseconds, a ``timedelta`` or an interval string: the same plan."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from typing import Any

import pytest

import krishiv_py as kp
from krishiv_py.api.stream import placeholder
from krishiv_py.plan.durations import to_ms

SCHEMA = "k string, t bigint, v bigint"


def _stream(name: str = "s") -> kp.Stream:
    return placeholder(SCHEMA, name)


def _keyed(lag: Any = 5_000) -> kp.KeyedStream:
    return _stream().watermark("t", lag).key_by("k")


AGG = kp.count(kp.col("*"))

#: Each builder call with a duration, as a function of that duration.
CALLS: dict[str, Callable[[Any], kp.Stream]] = {
    "watermark lag": lambda d: _keyed(d).tumbling_window(1_000).agg(AGG),
    "future_tolerance_ms": lambda d: (
        _stream().watermark("t", 0, future_tolerance_ms=d).tumbling_window(10).agg(AGG)
    ),
    "idle_timeout_ms": lambda d: _stream().watermark("t", 0).idle_timeout_ms(d).tumbling_window(10).agg(AGG),
    "tumbling size": lambda d: _keyed().tumbling_window(d).agg(AGG),
    "tumbling offset": lambda d: _keyed().tumbling_window(600_000, offset_ms=d).agg(AGG),
    "sliding size": lambda d: _keyed().sliding_window(d, 1_000).agg(AGG),
    "sliding slide": lambda d: _keyed().sliding_window(6_000_000, d).agg(AGG),
    "session gap": lambda d: _keyed().session_window(d).agg(AGG),
    "capped session": lambda d: _keyed().session_window(1_000, max_duration_ms=d).agg(AGG),
    "event sliding grace": lambda d: _keyed().event_sliding_window(60_000, grace_ms=d).agg(AGG),
    "time interval": lambda d: _keyed().time_interval_window(d, d, d).agg(AGG),
    "allowed_lateness": lambda d: _keyed().tumbling_window(1_000).allowed_lateness(d).agg(AGG),
    "on_interval": lambda d: _keyed().tumbling_window(1_000).trigger(kp.Trigger.on_interval(d)).agg(AGG),
    "state ttl": lambda d: (
        _keyed().tumbling_window(1_000).with_state_ttl(kp.StateTtlConfig(ttl_ms=d)).agg(AGG)
    ),
    "interval join": lambda d: _keyed().interval_join(
        placeholder(SCHEMA, "r").watermark("t", 0).key_by("k"), between=(d, d)
    ),
    "join lateness": lambda d: (
        _keyed()
        .interval_join(placeholder(SCHEMA, "r").watermark("t", 0).key_by("k"), between=(0, 10))
        .allowed_lateness(d)
    ),
    "as-of max age": lambda d: _keyed().as_of_join(
        placeholder(SCHEMA, "r").watermark("t", 0).key_by("k"), max_age_ms=d
    ),
    "watermark spec": lambda d: (
        _stream().with_watermark(kp.WatermarkSpec.fixed_lag_ms("t", d)).tumbling_window(10).agg(AGG)
    ),
    "auto lag bounds": lambda d: _stream().watermark("t", "auto", max_lag_ms=d).tumbling_window(10).agg(AGG),
}


@pytest.mark.parametrize("call", sorted(CALLS))
def test_milliseconds_a_timedelta_and_an_interval_string_give_the_same_plan(call: str) -> None:
    build = CALLS[call]
    plan = build(600_000).plan
    assert build(dt.timedelta(minutes=10)).plan == plan
    assert build("10 minutes").plan == plan
    assert build("INTERVAL '10' MINUTE").plan == plan
    assert build("9 minutes 60 seconds").plan == plan


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250 ms", 250),
        ("5 seconds", 5_000),
        ("5 s", 5_000),
        ("1.5 seconds", 1_500),
        ("1 hour", 3_600_000),
        ("2 days", 172_800_000),
        ("1 week", 604_800_000),
        ("1 minute 30 seconds", 90_000),
        ("  3   MINUTES ", 180_000),
        ("-5 seconds", -5_000),
        ("1000 microseconds", 1),
    ],
)
def test_interval_strings_as_spark_writes_them(text: str, ms: int) -> None:
    assert to_ms("x", text, positive=None) == ms


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("10", "cannot read '10' as a duration"),
        ("ten minutes", "cannot read 'ten minutes'"),
        ("5 parsecs", "unknown unit 'parsecs'"),
        ("1.0005 seconds", "not a whole number of milliseconds"),
        (dt.timedelta(microseconds=1_500), "not a whole number of milliseconds"),
        ("", "has no duration"),
        (2.5, "is not a duration"),
        (True, "is not a duration"),
    ],
)
def test_a_duration_that_is_not_one_is_refused_naming_the_argument(value: object, words: str) -> None:
    with pytest.raises(kp.PlanError, match=words):
        to_ms("size_ms", value)


def test_a_builder_argument_that_is_not_a_duration_names_itself() -> None:
    with pytest.raises(kp.PlanError, match="size_ms: unknown unit 'fortnights'"):
        _keyed().tumbling_window("2 fortnights")
    with pytest.raises(kp.PlanError, match="size_ms must be > 0"):
        _keyed().tumbling_window("-1 minute")
    with pytest.raises(kp.PlanError, match="allowed_lateness"):
        _keyed().tumbling_window(1_000).allowed_lateness("-5 seconds")
    with pytest.raises(kp.PlanError, match="or 'auto', got 'soon'"):
        _stream().watermark("t", "soon")
    with pytest.raises(kp.PlanError, match="slide"):
        _keyed().sliding_window("1 minute", "2 minutes")


@pytest.mark.parametrize(
    ("build", "warned"),
    [
        (lambda s: s.tumbling_window(60), "tumbling_window(60): size_ms=60 is 60 milliseconds"),
        (lambda s: s.key_by("k").sliding_window(60_000, 10), "sliding_window(10): slide_ms=10"),
        (lambda s: s.key_by("k").session_window(30), "session_window(30): gap_ms=30"),
    ],
)
def test_a_bare_number_under_a_second_over_timestamps_warns_naming_the_unit(
    build: Callable[[kp.Stream], Any], warned: str
) -> None:
    """``tumbling_window(60)`` meant as a minute: an int is milliseconds, which the warning says."""
    timed = placeholder("k string, t timestamp, v bigint").watermark("t", "5 seconds")
    with pytest.warns(UserWarning, match="did you mean") as seen:
        build(timed)
    assert str(seen[0].message).startswith(warned)
    assert "'t'" in str(seen[0].message) and seen[0].filename == __file__  # the user's line


@pytest.mark.parametrize(
    "build",
    [
        lambda s: s.tumbling_window("60 ms"),  # written as milliseconds: meant
        lambda s: s.tumbling_window(dt.timedelta(milliseconds=60)),
        lambda s: s.tumbling_window(60_000),
        lambda s: s.tumbling_window(1_000),
    ],
)
def test_milliseconds_written_as_such_or_a_second_and_more_do_not_warn(
    build: Callable[[kp.Stream], Any],
) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        build(placeholder("k string, t timestamp, v bigint").watermark("t", 0))
        _keyed().tumbling_window(60).agg(AGG)  # event times that are numbers: their unit is the user's
        left, right = _stream("l").watermark("t", 0).key_by("k"), _stream("r").watermark("t", 0).key_by("k")
        joined = left.interval_join(right, between=(-5, 5))
        joined.key_by("k").tumbling_window(60).agg(AGG)  # a join's rows: the times of its numbers
