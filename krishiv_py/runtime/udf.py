"""The user functions of a job (:func:`krishiv_py.udf`) as Spark knows them.

Each is registered with the SparkSession under its ``sql_name``, the name
the recipe's SQL calls, as an Arrow UDF (``pyspark.sql.functions.arrow_udf``:
one Python call per Arrow batch of a task, the arrays handed over without
pandas), or, on a PySpark without Arrow UDFs, as a pandas UDF whose Series
are turned into arrays and back. Both call
:func:`krishiv_py.stateful.arrow_expr.call_user_function`, as krishiv's
evaluation between stateful operators does, so the result is checked the
same way wherever the function runs.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from krishiv_py.expr import UserFunction
from krishiv_py.stateful.arrow_expr import call_user_function

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["register_udfs", "spark_function"]


def register_udfs(spark: SparkSession, functions: Iterable[UserFunction]) -> None:
    """Register each of ``functions`` with ``spark`` under its ``sql_name``."""
    for function in functions:
        spark.udf.register(function.sql_name, spark_function(function))


def spark_function(function: UserFunction) -> Any:
    """``function`` as a Spark UDF over Arrow arrays (pandas Series where Arrow UDFs are missing)."""
    from pyspark.sql import functions as F
    from pyspark.util import PythonEvalType

    ddl = function.returns.name
    arrow_udf = getattr(F, "arrow_udf", None)  # (PySpark 4.1 and later)
    if arrow_udf is not None:

        def call(*arrays: Any) -> Any:
            return call_user_function(function, arrays)

        with warnings.catch_warnings():  # (it prefers type hints, which *arrays cannot give)
            warnings.simplefilter("ignore", UserWarning)
            return arrow_udf(call, ddl, PythonEvalType.SQL_SCALAR_ARROW_UDF)

    import pyarrow as pa
    from pyspark.sql.pandas.functions import pandas_udf

    def on_series(*series: Any) -> Any:
        arrays = [pa.Array.from_pandas(s) for s in series]
        return call_user_function(function, arrays).to_pandas()

    return pandas_udf(on_series, ddl, PythonEvalType.SQL_SCALAR_PANDAS_UDF)
