"""The reference model: the windowing, watermark and lateness rules in plain Python.

A small, per-event model of the specification, independent of every
lowering's code: the oracle the tests compare Spark with, and what the
watermark advisor, what-if replay and timelines replay input through. It
knows plans, expressions and panes, never streams, jobs or Spark. Users
reach it through :mod:`krishiv_py.testing`.
"""

from __future__ import annotations
