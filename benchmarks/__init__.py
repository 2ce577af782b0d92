"""Benchmarks: krishiv_py against hand-written PySpark, as ratios measured in one run."""
