"""The stateful lowering's operator: pure, vectorized kernels and thin Spark glue.

The kernels (:mod:`~krishiv_py.stateful.kernel` and the modules it uses) are
pure functions over Arrow tables and numpy arrays: *state in, batch in,
watermark in -> state out, rows out*. They run the emission rules of
:mod:`krishiv_py.plan.emission` for a whole micro-batch of one key bucket at
once, with no Python work per row on the hot path, and are tested without
Spark. :mod:`~krishiv_py.stateful.operator` wraps them for Spark's
``applyInPandasWithState``; :mod:`~krishiv_py.stateful.codec` moves state
and output as Arrow IPC bytes.

:mod:`~krishiv_py.stateful.pane_partials` is the other executor-side kernel:
the stateless ``mapInArrow`` step that the native lowering of streaming
sliding windows runs before Spark's watermark operator.
"""
