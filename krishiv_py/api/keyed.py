"""``KeyedStream``: a stream partitioned by key columns, before windowing."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

import attrs

from krishiv_py.api.over import OverStream, check_order_by
from krishiv_py.api.windowed import WindowAssigners, WindowedStream
from krishiv_py.errors import PlanError, attribute_error
from krishiv_py.expr import AggExpr, agg_calls
from krishiv_py.plan import nodes as n
from krishiv_py.plan.durations import Duration, as_ms
from krishiv_py.plan.emission import Emission, StateTtlConfig
from krishiv_py.plan.windows import WindowSpec

if TYPE_CHECKING:
    from krishiv_py.api.stream import JoinedStream, Stream

__all__ = ["KeyedStream"]


@attrs.frozen
class KeyedStream(WindowAssigners):
    """Returned by ``Stream.key_by``; windows computed per key."""

    stream: Stream
    keys: tuple[str, ...]
    #: Per-key state TTL (:meth:`with_state_ttl`) of the aggregation or windows that follow.
    state_ttl: StateTtlConfig | None = None

    def __attrs_post_init__(self) -> None:
        if not self.keys:
            raise PlanError("key_by() needs at least one column")
        schema = self.stream.schema
        for k in self.keys:
            if not isinstance(k, str):
                raise PlanError(f"key_by() takes column names, got {k!r}")
            schema.field(k, role="key column")
        if len(set(self.keys)) != len(self.keys):
            raise PlanError(f"key_by() names a column twice: {', '.join(self.keys)}")

    def _windowed(self, window: WindowSpec) -> WindowedStream:
        return WindowedStream(self.stream, self.keys, window, Emission(state_ttl=self.state_ttl))

    def with_state_ttl(self, config: StateTtlConfig) -> KeyedStream:
        """Bound the state per key of the ``agg()`` (or the windows) that follow: SPEC 3.9's TTL.

        After ``agg()`` without a window, a key whose newest row is
        ``config.ttl_ms`` of event time behind the watermark leaves the state
        (as Flink's state TTL: its last row stands downstream, and a later row
        of the key starts it again; each expiry counts in
        ``JobMetrics.state_evictions``). Windows take it as
        ``WindowedStream.with_state_ttl`` does.

        Examples
        --------
        >>> import krishiv_py as kp
        >>> from krishiv_py.api.stream import placeholder
        >>> clicks = placeholder("user_id string, t bigint", "clicks")
        >>> day = kp.StateTtlConfig(ttl_ms=86_400_000)
        >>> per_user = clicks.watermark("t", 0).key_by("user_id").with_state_ttl(day)
        >>> per_user.agg(kp.count(kp.col("*"))).plan.emission.state_ttl.ttl_ms
        86400000
        """
        if not isinstance(config, StateTtlConfig):
            raise PlanError(f"with_state_ttl() takes a StateTtlConfig(ttl_ms=...), got {config!r}")
        return attrs.evolve(self, state_ttl=config)

    def agg(self, *aggregates: AggExpr) -> Stream:
        """Aggregate every row so far per key, without a window: an updating result per key.

        Each micro-batch that changes a key's aggregates retracts the key's
        previous row and emits the new one (a ``kind`` column, ``"retract"``
        or ``"emit"``), as Flink's regular ``GROUP BY`` does; a key's state
        is kept for as long as the job runs (``explain()`` says so). Result
        columns: the keys, the aggregates in the order given, ``kind``.

        Examples
        --------
        >>> import krishiv_py as kp
        >>> from krishiv_py.api.stream import placeholder
        >>> clicks = placeholder("user_id string, t bigint, amount double", "clicks")
        >>> totals = clicks.watermark("t", 0).key_by("user_id").agg(kp.sum(kp.col("amount")))
        >>> totals.columns
        ('user_id', 'sum_amount', 'kind')
        """
        plan = n.KeyedAggregate(
            input=self.stream.plan,
            keys=self.keys,
            aggregates=agg_calls(aggregates),
            emission=Emission(state_ttl=self.state_ttl),
        )
        return self.stream._with(plan)

    # --- over-aggregation (SPEC 3.16) -----------------------------------------------------

    def over_rows(self, n: int, *, order_by: str | None = None) -> OverStream:
        """Aggregate each row with the ``n`` rows of its key before it, in event-time order.

        SQL's ``OVER (PARTITION BY keys ORDER BY t ROWS BETWEEN n PRECEDING
        AND CURRENT ROW)``: ``.agg(...)`` then gives one result per input
        row, its columns and each aggregate over the row and the ``n`` rows
        of its key before it (ties in event time by arrival), emitted once
        the watermark passes the row (its order is final then).
        ``order_by``: the event-time column (the default; it is the only
        order). Runs in krishiv's operator (the stateful lowering).

        Examples
        --------
        >>> import krishiv_py as kp
        >>> from krishiv_py.api.stream import placeholder
        >>> bids = placeholder("seller bigint, price bigint, t bigint", "bids").watermark("t", 1_000)
        >>> bids.key_by("seller").over_rows(10, order_by="t").agg(kp.avg(kp.col("price"))).columns
        ('seller', 'price', 't', 'avg_price')
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise PlanError(f"over_rows(n) takes a whole number of rows >= 0 before the row, got {n!r}")
        check_order_by(self.stream, order_by, "over_rows()")
        return OverStream(self.stream, self.keys, "rows", n, Emission(state_ttl=self.state_ttl))

    def over_range(self, range_ms: Duration, *, order_by: str | None = None) -> OverStream:
        """Aggregate each row with its key's rows of the ``range_ms`` before its event time.

        SQL's ``OVER (PARTITION BY keys ORDER BY t RANGE BETWEEN INTERVAL
        ... PRECEDING AND CURRENT ROW)``: the frame holds the rows whose event
        time is in ``[t - range_ms, t]``, its peers (equal ``t``, also those
        that arrived after it) included; otherwise as :meth:`over_rows`.

        Examples
        --------
        >>> import krishiv_py as kp
        >>> from krishiv_py.api.stream import placeholder
        >>> bids = placeholder("seller bigint, price bigint, t bigint", "bids").watermark("t", 1_000)
        >>> bids.key_by("seller").over_range("1h").agg(kp.count(kp.col("*")).alias("n")).columns
        ('seller', 'price', 't', 'n')
        """
        ms = as_ms("over_range(range_ms)", range_ms)
        if ms < 0:
            raise PlanError(f"over_range(range_ms) takes milliseconds >= 0 before the row, got {range_ms!r}")
        check_order_by(self.stream, order_by, "over_range()")
        return OverStream(self.stream, self.keys, "range", ms, Emission(state_ttl=self.state_ttl))

    def _no_ttl(self, what: str, right: KeyedStream) -> None:
        if self.state_ttl is not None or right.state_ttl is not None:
            raise PlanError(
                f"key_by(...).with_state_ttl() applies to agg() and windows; {what} takes its own: "
                ".interval_join(...).with_state_ttl(...)"
            )

    if not TYPE_CHECKING:  # at run time only: a type checker still flags these calls

        def __getattr__(self, name: str) -> Any:
            raise attribute_error(self, name, _KEYED_HINTS)

    # --- joins on event time (SPEC 3.12, docs/joins.md) ---------------------------------

    def interval_join(
        self,
        right: KeyedStream,
        between: tuple[Duration, Duration],
        *,
        how: Literal["inner", "left", "right", "full"] = "inner",
    ) -> JoinedStream:
        """Join each row at ``l`` with ``right``'s rows of its key at ``l + lower <= r <= l + upper``.

        ``between=(lower_ms, upper_ms)``, both bounds inclusive. A match is
        emitted as soon as both rows are there; with ``how="left"``,
        ``"right"`` or ``"full"`` a row without a match is emitted null-padded
        once no on-time partner can arrive (docs/joins.md).

        Examples
        --------
            # each click with the impressions of its ad up to 10 minutes before it
            clicks.watermark("ts", 5_000).key_by("ad").interval_join(
                views.watermark("ts", 5_000).key_by("ad"), between=(-600_000, 0))
        """
        keys = _keys_of(right)
        self._no_ttl("a join", right)
        return self.stream._joined(
            self.keys,
            right.stream,
            keys,
            "interval_join()",
            kind="interval",
            how=how,
            between=_between(between),
        )

    def as_of_join(
        self,
        right: KeyedStream,
        *,
        how: Literal["inner", "left"] = "inner",
        max_age_ms: Duration | None = None,
    ) -> JoinedStream:
        """Join each row at ``l`` with ``right``'s row of its key in force at ``l`` (latest at or before).

        ``max_age_ms``: ignore right rows older than ``l - max_age_ms``. A row
        is emitted once the right side is complete up to ``l``; with
        ``how="left"`` a row without a right row is kept, null-padded.

        Examples
        --------
            # each order with the exchange rate in force when it was placed
            orders.watermark("ts", 1_000).key_by("currency").as_of_join(
                rates.watermark("ts", 1_000).key_by("currency"), how="left")
        """
        keys = _keys_of(right)
        self._no_ttl("a join", right)
        return self.stream._joined(
            self.keys,
            right.stream,
            keys,
            "as_of_join()",
            kind="as_of",
            how=how,
            max_age_ms=as_ms("max_age_ms", max_age_ms),
        )


#: What the methods of a stream that go before key_by() say when called on a keyed stream.
_KEYED_HINTS = {
    "watermark": (
        "watermark(...) goes before key_by(...): stream.watermark(column, lag_ms).key_by(...), "
        "e.g. stream.watermark('event_time', 5_000).key_by('user_id').tumbling_window(60_000)"
    ),
    "with_watermark": (
        "with_watermark(...) goes before key_by(...): stream.with_watermark(spec).key_by(...)"
    ),
}


def _keys_of(right: object) -> tuple[str, ...]:
    if not isinstance(right, KeyedStream):
        raise PlanError(
            "a join takes the other side keyed the same way: right.watermark(...).key_by(...), "
            f"got {type(right).__name__}"
        )
    return right.keys


def _between(value: object) -> tuple[int, int]:
    if isinstance(value, list):
        value = tuple(value)
    if not isinstance(value, tuple) or len(value) != 2:
        raise PlanError(f"interval_join(between=...) takes (lower_ms, upper_ms), got {value!r}")
    lower, upper = value
    return (as_ms("between lower", lower), as_ms("between upper", upper))  # the node checks them
