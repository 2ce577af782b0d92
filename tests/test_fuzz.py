"""The front doors under random input: the builder, SQL text and ``send()`` refuse with KrishivErrors only.

The same generators as ``nox -s fuzz`` (:mod:`benchmarks.fuzz`, 10,000 cases
per door), a few hundred cases per door here, strictly: the first escape or
loss fails the test (and hypothesis shrinks it). No Spark.
"""

from __future__ import annotations

import pytest

from benchmarks import fuzz


@pytest.mark.parametrize("door", fuzz.DOORS)
def test_a_front_door_refuses_only_with_krishiv_errors_and_loses_nothing(door: str) -> None:
    tally = fuzz.Tally(strict=True)
    fuzz.run_door(door, 300, tally)
    assert tally.cases[door] >= 300 and not tally.escapes
    outcomes = tally.outcomes[door]
    # The generators reach both sides: accepted calls and refusals of more than one kind.
    assert outcomes["accepted"] > 0, outcomes
    assert sum(v for k, v in outcomes.items() if not k.startswith("accepted")) > 0, outcomes
    if door == "builder":  # joins, and operators after them, are reached accepted, not only refused
        assert outcomes["accepted join"] > 0 and outcomes["accepted chain"] > 0, outcomes


def test_the_tally_tells_an_escape_from_a_refusal() -> None:
    import krishiv_py as kp

    tally = fuzz.Tally()
    tally.refused("builder", kp.PlanError("size_ms must be positive"), "tumbling_window(-1)")
    tally.refused("builder", TypeError("unhashable type: 'list'"), "key_by([])")
    tally.refused("sql", kp.PlanError(""), "SELECT")
    assert tally.outcomes["builder"] == {"PlanError": 1, "ESCAPE TypeError": 1}
    assert [p["what"] for p in tally.escapes] == [
        "TypeError escaped: unhashable type: 'list'",
        "an error without a message",
    ]
    with pytest.raises(AssertionError, match="ValueError escaped"):
        fuzz.Tally(strict=True).refused("send", ValueError("bad"), "[{}]")
