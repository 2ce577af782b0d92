"""``python -m benchmarks.startup krishiv|spark``: seconds from a cold process to a usable session.

Prints one ``@@BENCH result`` line with ``import_s`` (importing the library)
and ``startup_s`` (import plus starting the session: the JVM, the Python
side of Spark, and for krishiv_py its settings and checks).
"""

from __future__ import annotations

import json
import sys
import time

from benchmarks.protocol import emit


def main(which: str) -> int:
    t = time.perf_counter()
    if which == "krishiv":
        import krishiv_py as kp

        t_import = time.perf_counter() - t
        session = kp.Session.embedded(app_name="krishiv-bench-startup")
        total = time.perf_counter() - t
        session.stop()
    else:
        from pyspark.sql import SparkSession

        t_import = time.perf_counter() - t
        spark = SparkSession.builder.appName("krishiv-bench-startup").getOrCreate()
        total = time.perf_counter() - t
        spark.stop()
    emit("result", json.dumps({"import_s": t_import, "startup_s": total}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1]))
