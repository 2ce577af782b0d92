"""The specification's pure-Python reference model as a streaming runner (``reference-model``).

``python -m benchmarks.model_runner --query Q ... --clickstream DIR --nexmark DIR``
plays each Parquet file of the query's table as one step
(:class:`krishiv_py.testing.Send`), in file order, exactly as the streaming
runners read them one file per micro-batch, and reports the windows the model
has emitted after the last step. It is the correctness reference of the
streaming group; its speed (plain Python, one row at a time) is reported
but is not a target.

A join query plays file ``i`` of both its tables as step ``i``, through the
join model (:mod:`krishiv_py.model.joins`) run once per key
(:func:`benchmarks.joins.run_model`).
"""

from __future__ import annotations

import functools
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from benchmarks import joins, protocol
from benchmarks.arrow import rows_of
from benchmarks.queries import QUERIES, Query
from benchmarks.spark_runner import krishiv_query
from krishiv_py.testing import Send, run_reference, top_n_rows

RUNNER = "reference-model"


def run_model(query: Query, path: str, ddl: str) -> pa.Table:
    steps = [Send(pq.read_table(f).to_pylist()) for f in sorted(Path(path).glob("*.parquet"))]
    # The model runs the window; Q5's top-N is ranked by the plain-Python oracle.
    rows = run_reference(ddl, functools.partial(krishiv_query, query, ranked=False), steps)[-1]
    if query.name == "nexmark-q5":
        rows = top_n_rows(rows, 1, by=["count"])
    out = pa.Table.from_pylist(rows) if rows else None
    return out if out is not None else pa.table({c: [] for c in query.columns})


def main(argv: list[str] | None = None) -> int:
    args = protocol.parser("python -m benchmarks.model_runner").parse_args(argv)
    for name in args.query:
        query = QUERIES[name]
        infos = protocol.tables_info(query, args)
        run = functools.partial(run_model, query, infos[0].files(), infos[0].ddl)
        if query.is_join:
            run = functools.partial(joins.run_model, query, infos)
        protocol.measure(
            RUNNER,
            name,
            sum(i.rows for i in infos),
            run,
            rows_of(query.columns),
            args.repeat,
            warmup=args.warmup,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
