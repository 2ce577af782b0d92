"""Studies: each answered one question, once; docs/performance-history.md tells the run where it cites it.

Each line: the command that reruns a study (from the repository root), then its question. The
module's docstring says what it runs, what it prints and what it takes.

- ``python -m benchmarks.studies.ab_sliding``: are bounded sliding windows faster from pane aggregates?
- ``python -m benchmarks.studies.ab_stream_sliding``: does a pane step pay on streaming sliding windows?
- ``python -m benchmarks.studies.observe_cost``: what do the native plan's observed metrics cost per row?
- ``python -m benchmarks.studies.packer_input``: does the packer take exact Arrow columns faster?
"""
