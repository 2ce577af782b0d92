"""Event-time joins of two keyed streams: their kinds, the ``how=`` each takes, a join's own rules.

Interval join (``interval_join(between=(lower_ms, upper_ms))``)
    A left row at ``l`` meets the right rows of its key at
    ``l + lower <= r <= l + upper``, both bounds inclusive: ``how`` is
    ``"inner"``, ``"left"``, ``"right"`` or ``"full"``.

Window join (``join()`` of two windowed streams)
    The rows of a key in the same tumbling or sliding window meet when the
    window fires; ``"semi"`` and ``"anti"`` keep each left row with a partner,
    or without one, once.

As-of join (``as_of_join(max_age_ms=...)``)
    A left row meets the latest right row of its key at or before it, no
    older than ``max_age_ms`` when given: ``"inner"`` or ``"left"``.

This module holds what a join is on its own, whatever its sides are (SPEC
3.12): the kinds, the ``how=`` each takes, the checks of its options, the
names the joined row gives the right side's columns and the join's line in a
plan. The :class:`~krishiv_py.plan.nodes.Join` node, what it takes as a side
and what may follow it are rules between the plan's node kinds, kept with
them in :mod:`krishiv_py.plan.nodes` (a node's inputs are any ``PlanNode``,
which names every node class).
"""

from __future__ import annotations

from typing import Literal, Protocol, TypeAlias

from krishiv_py.errors import PlanError
from krishiv_py.plan.emission import Emission
from krishiv_py.plan.windows import WindowSpec, check_ms, window_text

__all__ = [
    "JOIN_HOWS",
    "RIGHT_SUFFIX",
    "JoinHow",
    "JoinKind",
    "JoinSpec",
    "check_join_options",
    "join_text",
    "joined_names",
    "what_join",
]

JoinKind: TypeAlias = Literal["interval", "window", "as_of"]
JoinHow: TypeAlias = Literal["inner", "left", "right", "full", "semi", "anti"]
#: The ``how=`` each join takes (SPEC 3.12).
JOIN_HOWS: dict[str, tuple[str, ...]] = {
    "interval": ("inner", "left", "right", "full"),
    "window": ("inner", "left", "right", "full", "semi", "anti"),
    "as_of": ("inner", "left"),
}
#: The suffix of a right column whose name the joined row already holds.
RIGHT_SUFFIX = "_right"


class JoinSpec(Protocol):
    """A join without its sides: what its own rules read (a :class:`~krishiv_py.plan.nodes.Join`)."""

    @property
    def left_keys(self) -> tuple[str, ...]: ...

    @property
    def right_keys(self) -> tuple[str, ...]: ...

    @property
    def kind(self) -> JoinKind: ...

    @property
    def how(self) -> JoinHow: ...

    @property
    def between(self) -> tuple[int, int] | None: ...

    @property
    def window(self) -> WindowSpec | None: ...

    @property
    def max_age_ms(self) -> int | None: ...

    @property
    def emission(self) -> Emission: ...


def what_join(node: JoinSpec) -> str:
    """The builder call that makes ``node``'s kind of join, as messages name it."""
    return {"interval": "interval_join()", "window": "join()", "as_of": "as_of_join()"}[node.kind]


def check_join_options(node: JoinSpec) -> None:
    """What SPEC 3.12 allows of a join's own options — ``how=``, its bounds, window, maximum age and
    emission — as :class:`PlanError` naming what is wrong (its sides are checked with the nodes)."""
    what = what_join(node)
    if node.kind == "interval" and node.how in ("semi", "anti"):
        raise PlanError(
            f"interval_join(): how={node.how!r} is not supported: semi and anti are window-join kinds; "
            "window both sides and join the windows, left.key_by(...).tumbling_window(size_ms).join("
            f"right.key_by(...).tumbling_window(size_ms), how={node.how!r}); an interval join is "
            "'inner', 'left', 'right' or 'full'"
        )
    if node.how not in JOIN_HOWS[node.kind]:
        raise PlanError(
            f"{what}: how={node.how!r} is not one of {', '.join(repr(h) for h in JOIN_HOWS[node.kind])}"
        )
    if node.kind == "interval":
        b = node.between
        if (
            not isinstance(b, tuple)
            or len(b) != 2
            or any(isinstance(x, bool) or not isinstance(x, int) for x in b)
        ):
            raise PlanError(f"interval_join(between=...) takes (lower_ms, upper_ms) as two ints, got {b!r}")
        if b[0] > b[1]:
            raise PlanError(f"interval_join(between=({b[0]}, {b[1]})): lower_ms must be <= upper_ms")
    if node.kind == "window" and (node.window is None or node.window.kind not in ("tumbling", "sliding")):
        raise PlanError(
            "join(): a window join takes tumbling or sliding windows, the same on both sides; got "
            f"{'none' if node.window is None else node.window.kind}"
        )
    if node.max_age_ms is not None:
        check_ms("as_of_join(max_age_ms)", node.max_age_ms, positive=False)
    _check_join_emission(node, what)


def _check_join_emission(node: JoinSpec, what: str) -> None:
    e = node.emission
    if e.trigger.is_early:
        raise PlanError(
            f"{what}: a join emits as its rules say; trigger {e.trigger.describe()} does not apply"
        )
    if e.accumulation == "discarding":
        raise PlanError(f"{what}: accumulation('discarding') does not apply to a join (use 'retracting')")
    if e.panes.any:
        raise PlanError(f"{what}: pane callbacks observe time-interval windows, not joins")
    if e.state_ttl is not None and e.state_ttl.time != "event":
        raise PlanError(
            f"{what}: a join's state TTL is measured in event time (StateTtlConfig(time='event'))"
        )


def joined_names(names: list[str], taken: set[str]) -> dict[str, str]:
    """Each of ``names`` as a joined row calls it: ``_right`` added while the row has the name.

    >>> joined_names(["v", "t"], {"k", "v"})
    {'v': 'v_right', 't': 't'}
    """
    out = {}
    for old in names:
        name = old
        while name in taken:
            name += RIGHT_SUFFIX
        taken.add(name)
        out[old] = name
    return out


def join_text(node: JoinSpec) -> str:
    """``node``'s line in a plan's text (:func:`krishiv_py.plan.nodes.render_plan`)."""
    keys = ", ".join(
        lk if lk == rk else f"{lk}={rk}" for lk, rk in zip(node.left_keys, node.right_keys, strict=True)
    )
    if node.kind == "interval":
        assert node.between is not None
        rule = f"between=({node.between[0]}, {node.between[1]})"
    elif node.kind == "window":
        assert node.window is not None
        rule = f"window={window_text(node.window)}"
    else:
        rule = "as of" + (f" max_age_ms={node.max_age_ms}" if node.max_age_ms is not None else "")
    text = f"Join {node.kind} how={node.how} keys=[{keys}] {rule}"
    return text + ("" if node.emission.is_default else f" emission=[{node.emission.describe()}]")
