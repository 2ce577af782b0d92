"""Test your pipelines: a pure-Python reference model and scenario runners.

:class:`ReferenceModel` implements the windowing, watermark and lateness
rules of krishiv_py in plain Python, small enough to read. The runners play
the same steps on the model and on Spark so the results can be compared
after every step::

    from krishiv_py.testing import Send, Close, run_reference, run_streaming, assert_same_rows

    steps = [Send(rows_1), Send(rows_2), Close()]
    expected = run_reference(schema, pipeline, steps)
    actual = run_streaming(session, schema, pipeline, steps)
    for got, want in zip(actual, expected):
        assert_same_rows(got, want)

Real input does not arrive one step per micro-batch: :mod:`krishiv_py.testing.batchings`
sends groups of steps back to back and compares after each group
(``assert_batchings_agree``), so a pipeline is checked across the micro-batch cuts a
busy stream makes.
"""

from __future__ import annotations

from krishiv_py.model.cascade import CascadeModel
from krishiv_py.model.joins import JoinModel, join_model_for
from krishiv_py.model.ranking import TopNModel, top_n_rows
from krishiv_py.model.reference import AggSpec, ReferenceMetrics, ReferenceModel
from krishiv_py.testing.batchings import (
    Group,
    Observed,
    assert_batchings_agree,
    assert_observed_agree,
    run_reference_batched,
    run_streaming_batched,
)
from krishiv_py.testing.compare import assert_same_rows, normalize_rows
from krishiv_py.testing.steps import (
    AdvanceProcessingTime,
    AdvanceWatermark,
    Close,
    ManualClock,
    Send,
    Step,
    assert_lowerings_agree,
    model_for,
    reference_model_for,
    run_bounded,
    run_reference,
    run_reference_bounded,
    run_reference_late_events,
    run_streaming,
)

__all__ = [
    "AdvanceProcessingTime",
    "AdvanceWatermark",
    "AggSpec",
    "CascadeModel",
    "Close",
    "Group",
    "JoinModel",
    "ManualClock",
    "Observed",
    "ReferenceMetrics",
    "ReferenceModel",
    "Send",
    "Step",
    "TopNModel",
    "assert_batchings_agree",
    "assert_lowerings_agree",
    "assert_observed_agree",
    "assert_same_rows",
    "join_model_for",
    "model_for",
    "normalize_rows",
    "reference_model_for",
    "run_bounded",
    "run_reference",
    "run_reference_batched",
    "run_reference_bounded",
    "run_reference_late_events",
    "run_streaming",
    "run_streaming_batched",
    "top_n_rows",
]
