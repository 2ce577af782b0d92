"""The benchmark suite: generators, digests, report shape, and that ``--quick`` runs end to end.

No timing is asserted anywhere: benchmark figures are measured and reported
by ``python -m benchmarks`` / ``nox -s bench``, never checked here.
"""

from __future__ import annotations

import datetime as dt
import functools
import itertools
import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import krishiv_py as kp
from benchmarks import data, operator_api, protocol, report
from benchmarks.__main__ import (
    ALL_RUNNERS,
    FULL_RUN_QUERIES,
    MODEL,
    QUICK_SCALING_KEYS,
    QUICK_STATEFUL_KEYS,
    QUICK_STATEFUL_QUERIES,
    REFERENCE,
    SCALING_KEYS,
    STATEFUL,
    earlier_references,
)
from benchmarks.digest import digest, norm
from benchmarks.queries import QUERIES
from benchmarks.studies import operator_calls, packer_input

ROOT = Path(__file__).resolve().parent.parent
# Spark's own session windows (krishiv-native forces the native lowering on them;
# the hand-written query) merge a late event into a session before evicting it,
# so with back-to-back micro-batches they can differ from the model
# (docs/lowering.md, Known limitations): reported, not asserted here.
# krishiv-stateful must agree on every query.
SESSION_QUERIES = ("session", "nexmark-q11")
QUICK_QUERIES = [q for q in QUERIES if q not in FULL_RUN_QUERIES]
# The end-to-end run below: the stateful runner's queries and Nexmark Q5 (a
# window, then window top-N) — nox -s bench runs every query; here the point
# is that the suite runs and its results are well formed and checked.
# The suite's smoke run: one query (the session query runs in `nox -s bench -- --quick`).
E2E_QUERIES = ["tumbling"]
assert set(E2E_QUERIES) <= set(QUICK_QUERIES)
NATIVE_SPARK = ("krishiv-native", "pyspark-streaming")


def _ms(table: pa.Table, column: str) -> np.ndarray:
    return np.asarray(pc.cast(table.column(column), pa.int64()).to_numpy()) // 1000


def test_clickstream_is_deterministic_skewed_and_disordered() -> None:
    spec = data.ClickstreamSpec(events=20_000, keys=100, late_fraction=0.05)
    a, b = data.clickstream_table(spec), data.clickstream_table(spec)
    assert a.equals(b)
    assert not a.equals(data.clickstream_table(data.ClickstreamSpec(events=20_000, keys=100, seed=2)))
    users = a.column("user_id").to_pylist()
    counts = sorted((users.count(u) for u in set(users)), reverse=True)
    assert len(set(users)) <= 100
    assert counts[0] > 10 * counts[len(counts) // 2]  # a hot key and a long tail
    lag = (data.T0_MS + np.arange(20_000)) - _ms(a, "event_time")  # how far behind arrival order
    assert lag.min() >= 0 and lag.max() <= data.MAX_LATE_DELAY_MS + 2_000
    late = np.mean(lag > 2_000)  # only the late fraction is behind by more than the disorder
    assert 0.03 < late < 0.07


def test_nexmark_has_the_reference_mix_and_valid_ids() -> None:
    tables = data.nexmark_tables(data.NexmarkSpec(events=50_000))
    assert [tables[t].num_rows for t in ("person", "auction", "bid")] == [1_000, 3_000, 46_000]
    bids = tables["bid"]
    auctions = set(tables["auction"].column("id").to_pylist())
    assert set(bids.column("auction").to_pylist()) <= auctions
    assert pc.min(bids.column("price")).as_py() >= 100
    channels = [str(c) for c in bids.column("channel").to_pylist()]
    hot = [c in data.HOT_CHANNELS for c in channels]
    assert 0.45 < sum(hot) / len(hot) < 0.55
    urls = [str(u) for u in bids.column("url").to_pylist()]
    named = [u.rsplit("channel_id=", 1)[1] for u, h in zip(urls, hot, strict=True) if not h]
    assert named == [c.removeprefix("channel-") for c, h in zip(channels, hot, strict=True) if not h]
    assert all(u.startswith("https://www.nexmark.com/") and u.count("/") == 6 for u in urls)


def test_nexmarks_extra_pads_each_row_to_its_tables_average_size_and_changes_nothing_else() -> None:
    plain = data.nexmark_tables(data.NexmarkSpec(events=50_000))
    padded = data.nexmark_tables(data.NexmarkSpec(events=50_000, extra=True))
    assert data.NexmarkSpec(events=5, extra=True).name.endswith("-x")
    for name, table in padded.items():
        assert table.drop_columns(["extra"]).equals(plain[name])
        extra = table.column("extra")
        assert all(set(str(x)) <= set("abcdefghijklmnopqrstuvwxyz") for x in extra.to_pylist()[:100])
        size = np.zeros(table.num_rows, np.int64)
        for f, c in zip(table.schema, table.columns, strict=True):
            size += pc.utf8_length(c).to_numpy(zero_copy_only=False) if pa.types.is_string(f.type) else 8
        lack = data.AVERAGE_BYTES[name] - (size - pc.utf8_length(extra).to_numpy(zero_copy_only=False))
        padded_rows = lack > 10
        # Within 20 % either side of what the row lacked; the rows that lacked something average it.
        pad = pc.utf8_length(extra).to_numpy(zero_copy_only=False)[padded_rows]
        assert np.all(pad >= np.floor(lack[padded_rows] * 0.8) - 1) and np.all(
            pad <= lack[padded_rows] * 1.2 + 1
        )
        if name != "bid":  # (a bid with its URL is about Nexmark's 100 bytes already)
            assert abs(float(np.mean(size[padded_rows])) / data.AVERAGE_BYTES[name] - 1) < 0.02


def test_datasets_are_cached_with_parquet_csv_and_ordered_mtimes(tmp_path: Path) -> None:
    spec = data.ClickstreamSpec(events=1_000, files=3)
    ds = data.clickstream(spec, cache=tmp_path)
    assert data.clickstream(spec, cache=tmp_path).root == ds.root  # reused, not regenerated
    parts = sorted(Path(ds.table_dir("events")).iterdir())
    assert [p.name for p in parts] == ["part-00000.parquet", "part-00001.parquet", "part-00002.parquet"]
    mtimes = [p.stat().st_mtime for p in parts]
    assert mtimes == sorted(mtimes) and len(set(mtimes)) == 3
    table = pq.read_table(ds.table_dir("events"))
    assert table.num_rows == ds.rows("events") == 1_000
    csv_lines = sum(len(p.read_text().splitlines()) for p in Path(ds.table_dir("events", "csv")).iterdir())
    assert csv_lines == 1_000
    first = Path(ds.table_dir("events", "csv"), "part-00000.csv").read_text().splitlines()[0].split(",")
    row = table.slice(0, 1).to_pylist()[0]
    assert first[0].strip('"') == row["user_id"]
    assert first[1].strip('"') == row["event_time"].strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]


def test_digest_ignores_row_order_and_normalises_values() -> None:
    t = dt.datetime(2024, 1, 1, 0, 1, tzinfo=dt.UTC)
    rows = [("a", t, 2, 3.0), ("b", t, 1, 0.1 + 0.2)]
    assert digest(rows) == digest(list(reversed(rows)))
    naive = [("a", t.replace(tzinfo=None), 2, 3), ("b", 1_704_067_260_000, 1, 0.3)]
    assert digest(rows) == digest(naive)
    assert digest(rows) != digest([("a", t, 2, 3.0), ("b", t, 2, 0.3)])
    assert norm(t) == 1_704_067_260_000


def test_targets_and_markdown_report_misses_and_skips() -> None:
    ok = {"status": "ok", "events": 100, "rows": 3}
    raw: dict[tuple[str, str], dict[str, Any]] = {
        ("tumbling", "pyspark-streaming"): {**ok, "walls": [1.0], "digest": "x"},
        ("tumbling", "krishiv-native"): {**ok, "walls": [2.0], "digest": "y"},
        ("tumbling", "krishiv-stateful"): {**ok, "walls": [5.0], "digest": "x"},
        ("tumbling", "reference-model"): {**ok, "walls": [9.0], "digest": "x"},
        ("tumbling", "pyflink"): {"status": "skipped", "reason": "not installed"},
        ("sliding", "pyspark-streaming"): {**ok, "walls": [1.0], "digest": "x"},
        ("sliding", "krishiv-stateful"): {**ok, "walls": [1.0], "digest": "x"},
    }
    runners = ["krishiv-native", "krishiv-stateful", "pyspark-streaming", "reference-model", "pyflink"]
    recs = report.throughput_records(
        raw, ["tumbling", "sliding"], runners, "pyspark-streaming", REFERENCE, {}
    )
    native, stateful, hand = recs[0], recs[1], recs[2]
    assert native["ratio_vs_baseline"] == 0.5 and native["agrees_with_reference"] is False
    assert stateful["ratio_vs_baseline"] == 0.2 and stateful["agrees_with_reference"] is True
    assert stateful["reference"] == MODEL
    assert hand["ratio_vs_baseline"] == 1.0 and hand["agrees_with_reference"] is True
    assert recs[4]["status"] == "skipped" and recs[4]["events_per_s"] is None
    # Scaling: 100,000 keys is a target on tumbling and session, each against its own query's
    # native run; 1,000 keys is not (the throughput runs have 1,000 keys), nor is sliding.
    scaling = [
        report.scaling_record(
            r, k, {"status": "ok", "events": 1_000, "walls": [w], "rows": 3, "digest": "x"}, 1.0, q
        )
        for q, r, k, w in [
            ("tumbling", "krishiv-native", 1_000, 1.0),
            ("tumbling", "krishiv-stateful", 1_000, 4.0),
            ("tumbling", "krishiv-native", 100_000, 1.0),
            ("tumbling", "krishiv-stateful", 100_000, 1.25),
            ("session", "krishiv-native", 100_000, 2.0),
            ("session", "krishiv-stateful", 100_000, 4.0),
            ("sliding", "krishiv-native", 100_000, 1.0),
            ("sliding", "krishiv-stateful", 100_000, 8.0),
        ]
    ]
    met = [t for t in report.targets([*recs, *scaling]) if t["ratio"] is not None]
    assert met == [
        {"target": report.TARGETS[0][0], "query": "tumbling", "ratio": 0.5, "met": False},
        {"target": report.STATEFUL_TARGET, "query": "tumbling", "ratio": 0.4, "met": False},
        {"target": report.STATEFUL_TARGET, "query": "tumbling, 100,000 keys", "ratio": 0.8, "met": True},
        {"target": report.STATEFUL_TARGET, "query": "session, 100,000 keys", "ratio": 0.5, "met": False},
    ]  # the stateful target applies to tumbling and session (and 100,000 keys), not to sliding
    meta = {
        "mode": "quick",
        "date": "today",
        "cpus": 2,
        "platform": "p",
        "python": "3",
        "pyspark": "4",
        "events": 100,
        "files": 1,
        "repeat": 1,
        "isolated_processes": False,
        "datasets": {"clickstream": "c"},
    }
    md = report.markdown(recs, meta)
    assert "| tumbling | krishiv-native |  | 50 | 2.000 |" in md and "| 0.500 | NO |" in md
    assert "| tumbling | pyflink |  | skipped: not installed |" in md
    scaled = report.markdown([*recs, *report.with_scaling_ratios(scaling, "krishiv-native")], meta)
    assert "| session | 100,000 | krishiv-stateful | 250 | 4.000 | 1 | 0.500 |" in scaled


def test_a_run_can_take_the_reference_rows_of_an_earlier_run_over_the_same_datasets(tmp_path: Path) -> None:
    ok = {"kind": "throughput", "status": "ok", "events": 10, "wall_s": 1.0}
    earlier = [
        {**ok, "query": "tumbling", "runner": MODEL, "result_rows": 3, "digest": "m"},
        {**ok, "query": "tumbling", "runner": "pyspark-batch", "result_rows": 3, "digest": "b"},
        {**ok, "query": "tumbling", "runner": "krishiv-native", "result_rows": 3, "digest": "m"},
        {**ok, "query": "session", "runner": MODEL, "status": "failed", "result_rows": None, "digest": None},
    ]
    (tmp_path / "latest.json").write_text(json.dumps(earlier))
    (tmp_path / "latest-meta.json").write_text(json.dumps({"datasets": {"clickstream": "c-n10"}}))
    datasets = {"clickstream": "/cache/c-n10"}
    # Only the reference runners this run leaves out, and only their results that were ok.
    refs = earlier_references(tmp_path / "latest.json", datasets, ["krishiv-native", "pyspark-batch"])
    assert refs == {("tumbling", MODEL): {"status": "ok", "rows": 3, "digest": "m"}}
    run = {"status": "ok", "events": 10, "walls": [1.0], "rows": 3}
    raw: dict[tuple[str, str], dict[str, Any]] = {
        **refs,
        ("tumbling", "krishiv-native"): {**run, "digest": "m"},
        ("tumbling", "krishiv-stateful"): {**run, "digest": "x"},
    }
    recs = report.throughput_records(
        raw, ["tumbling"], ["krishiv-native", "krishiv-stateful"], "krishiv-native", REFERENCE, {}
    )
    assert [r["runner"] for r in recs] == ["krishiv-native", "krishiv-stateful"]  # the model is not reported
    assert [r["agrees_with_reference"] for r in recs] == [True, False]
    with pytest.raises(SystemExit, match="not this run's"):
        earlier_references(tmp_path / "latest.json", {"clickstream": "/cache/c-n20"}, [])


def test_interleaved_runs_take_turns_and_report_each_runner(capsys: pytest.CaptureFixture[str]) -> None:
    order: list[str] = []

    def run(name: str) -> list[tuple[int]]:
        order.append(name)
        if name == "broken" and order.count(name) == 2:  # its warm-up passes, its first timed run fails
            raise RuntimeError("boom")
        return [(1,), (2,)]

    def rows_of(rows: list[tuple[int]]) -> protocol.Rows:
        return list(rows)

    runs = {r: functools.partial(run, r) for r in ("a", "b", "broken")}
    recs = protocol.measure_interleaved(runs, "tumbling", 10, rows_of, 3)
    assert order == ["a", "b", "broken", "a", "b", "broken", "b", "a", "a", "b"]
    a, b, broken = recs
    assert a["status"] == b["status"] == "ok" and a["interleaved"] is True
    assert len(a["walls"]) == len(b["walls"]) == 3 and a["digest"] == b["digest"] == digest([(1,), (2,)])[1]
    assert broken == {
        "query": "tumbling",
        "runner": "broken",
        "status": "failed",
        "reason": "RuntimeError: boom",
    }
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{protocol.PREFIX}start a+b+broken tumbling" and out[-1].endswith(
        "end a+b+broken tumbling"
    )
    assert sum(line.startswith(f"{protocol.PREFIX}result ") for line in out) == 3


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``python -m benchmarks --quick`` end to end, once for the tests below; its output directory."""
    out = tmp_path_factory.mktemp("bench")
    proc = subprocess.run(
        # Smaller than a quick run's default inputs: this checks the suite runs end to end and
        # writes well-formed, reference-checked results; nothing here is a measurement.
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--quick",
            "--events",
            "20000",
            "--files",
            "3",
            *(arg for q in E2E_QUERIES for arg in ("--query", q)),
            "--no-warmup",
            "--no-startup",  # two fresh processes per runner: the full run measures start-up
            "--out-dir",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=2_400,  # about 15 minutes on 2 idle cores; the machine may be shared
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def _records(out: Path) -> list[dict[str, Any]]:
    records = json.loads((out / "latest.json").read_text())
    assert isinstance(records, list)
    return records


def _throughput(out: Path) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["query"], r["runner"]): r for r in _records(out) if r["kind"] == "throughput"}


def _quick_only(q: str, runner: str) -> bool:
    """Runs quick mode may skip: PyFlink, the default-config runner, the stateful one off its queries."""
    return (
        runner == "pyflink"
        or runner == "pyspark-default"
        or (runner == STATEFUL and q not in QUICK_STATEFUL_QUERIES)
    )


@pytest.mark.spark
def test_quick_mode_runs_and_writes_well_formed_results(quick_run: Path) -> None:
    records = _records(quick_run)
    for r in records:
        assert set(report.REQUIRED) <= set(r), r
        assert r["status"] in ("ok", "skipped"), r
        if r["status"] == "ok":
            assert r["wall_s"] > 0 and r["peak_rss_mb"] > 0, r
    throughput = _throughput(quick_run)
    assert set(throughput) == {(q, run) for q in E2E_QUERIES for run in ALL_RUNNERS}
    for (q, runner), r in throughput.items():
        if _quick_only(q, runner):
            assert r["status"] in ("ok", "skipped") and (r["status"] == "ok" or r["reason"]), r
            continue
        assert r["status"] == "ok", r
        assert isinstance(r["events"], int) and r["events"] > 0
        assert r["events_per_s"] == pytest.approx(r["events"] / r["wall_s"], rel=0.01)
        if runner in REFERENCE and not (q in SESSION_QUERIES and runner in NATIVE_SPARK):
            assert r["agrees_with_reference"] is True, r  # streaming: the spec's model; bounded: Spark batch
    assert all(throughput[q, "pyspark-streaming"]["ratio_vs_baseline"] == 1.0 for q in E2E_QUERIES)
    kinds = {r["kind"] for r in records}
    assert kinds == {"throughput", "latency", "scaling"}
    latency = [r for r in records if r["kind"] == "latency"]
    assert all(0 < r["p50_ms"] <= r["p95_ms"] for r in latency)
    scaling = [r for r in records if r["kind"] == "scaling"]
    assert sorted({r["keys"] for r in scaling}) == sorted(QUICK_SCALING_KEYS)
    assert set(QUICK_SCALING_KEYS) < set(SCALING_KEYS)  # full runs add the largest key count
    assert all(r["agrees_with_reference"] for r in scaling if r["status"] == "ok")
    md = (quick_run / "latest.md").read_text()
    assert "## Throughput" in md and "## Targets" in md and "## Latency" in md
    assert all(f"| {q} | krishiv-native |" in md for q in E2E_QUERIES)
    assert (quick_run / "latest.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.spark
def test_quick_mode_measures_the_stateful_lowering(quick_run: Path) -> None:
    records = _records(quick_run)
    throughput = _throughput(quick_run)
    smoke_stateful = [q for q in QUICK_STATEFUL_QUERIES if q in E2E_QUERIES]
    for q in smoke_stateful:
        r = throughput[q, STATEFUL]
        assert r["status"] == "ok" and r["group"] == "streaming" and r["reference"] == MODEL, r
        assert r["events"] == throughput[q, "krishiv-native"]["events"] > 0
        assert r["result_rows"] > 0 and r["ratio_vs_baseline"] is not None
        # The stateful lowering follows the specification.
        assert r["agrees_with_reference"] is True, r
    # Scaling: the stateful runner at the key count of its target, agreeing with the hand-written
    # query's rows; skipped with a reason at the others.
    scaling = {r["keys"]: r for r in records if r["kind"] == "scaling" and r["runner"] == STATEFUL}
    assert sorted(scaling) == sorted(QUICK_SCALING_KEYS)
    for keys, r in scaling.items():
        if keys in QUICK_STATEFUL_KEYS:
            assert r["status"] == "ok" and r["agrees_with_reference"] is True and r["result_rows"] > 0, r
        else:
            assert r["status"] == "skipped" and r["reason"], r
    # The stateful target on tumbling (1,000 keys), session and tumbling at 100,000 keys.
    targets = [t for t in report.targets(records) if t["target"] == report.STATEFUL_TARGET]
    assert [t["query"] for t in targets] == [*smoke_stateful, "tumbling, 100,000 keys"]
    assert all(t["ratio"] is not None and t["met"] in (True, False) for t in targets)
    md = (quick_run / "latest.md").read_text()
    assert all(f"| {q} | {STATEFUL} | streaming |" in md for q in smoke_stateful)
    assert f"| {report.STATEFUL_TARGET} | tumbling, 100,000 keys |" in md


def test_kernel_benchmark_checks_every_window_kind_against_the_model() -> None:
    from benchmarks import kernel as kb

    records = kb.measure(rows=3_000, keys=[50], batch=1_000, check_rows=600)
    assert [r["kind"] for r in records] == list(kb.KINDS)
    assert all(r["agrees"] for r in records), records
    assert all(r["rows_per_s"] > 0 for r in records)
    assert records[0]["vs_tumbling"] == 1.0
    assert "| 50 | event_sliding |" in kb.markdown(records)


@pytest.mark.parametrize("kernel", ["count", "join"])
def test_the_state_benchmark_writes_less_by_key_than_whole_above_the_keyed_threshold(kernel: str) -> None:
    import argparse

    from benchmarks import scaling
    from krishiv_py.stateful.held_state import KEYED_MIN_ROWS

    args = argparse.Namespace(keys=f"100,{KEYED_MIN_ROWS + 10_000}", rows=200, batches=3, kernel=kernel)
    runs = {(r["live_keys"], r["layout"]): r for r in scaling.state(args)["runs"]}
    small, large = 100, KEYED_MIN_ROWS + 10_000
    # Below the threshold the operator holds the state whole: the same bytes either way.
    assert runs[small, "chosen"]["bytes_per_batch"] == runs[small, "whole"]["bytes_per_batch"]
    # Above it, a delta of the keys a micro-batch touched, not the whole state.
    assert runs[large, "chosen"]["bytes_per_batch"] < runs[large, "whole"]["bytes_per_batch"] / 3


def test_profile_benchmark_runs_the_operator_with_and_without_the_profile() -> None:
    from benchmarks import profile_overhead as pb

    r = pb.measure(rows=4_000, keys=50, batch=1_000, rounds=2)  # checks results and profile counts itself
    assert r["with_profile_s"] > 0 and r["without_s"] > 0
    assert r["met"] == (r["ratio"] <= 1.10)


def test_sustainable_throughput_doubles_then_bisects(monkeypatch: pytest.MonkeyPatch) -> None:
    from benchmarks import sustainable as sb

    def fake_trial(_s: Any, runner: str, rate: int, *_a: Any, **_k: Any) -> dict[str, Any]:
        return {"runner": runner, "rate": rate, "sustained": rate <= 50_000}

    monkeypatch.setattr(sb, "trial", fake_trial)
    best, records = sb.sustainable_runners(
        cast(Any, None), ["krishiv-native"], start=16_000, budget_s=5, seconds=1, steps=2, log=lambda _: None
    )["krishiv-native"]
    assert [r["rate"] for r in records] == [16_000, 32_000, 64_000, 48_000, 56_000]  # after the warm-ups
    assert best == 48_000


def test_runners_take_turns_in_alternating_order_after_two_warm_ups_each(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The harness's order: two warm-ups per runner, then rounds in which every runner still
    searching tries its next rate, first-to-last then last-to-first; a failed first trial is tried
    once more (a cold start may miss a budget by milliseconds), and the records say the order."""
    from benchmarks import sustainable as sb

    calls: list[tuple[str, int, int]] = []
    limits = {"a": 50_000, "b": 20_000, "c": 0}
    cold = {"b": 1}  # b's first timed trial misses the budget once

    def fake_trial(_s: Any, runner: str, rate: int, *_a: Any, seed: int, **_k: Any) -> dict[str, Any]:
        calls.append((runner, rate, seed))
        ok = rate <= limits[runner]
        if seed == 0 and cold.get(runner):
            cold[runner] -= 1
            ok = False
        return {"runner": runner, "rate": rate, "sustained": ok}

    monkeypatch.setattr(sb, "trial", fake_trial)
    found = sb.sustainable_runners(
        cast(Any, None), ["a", "b", "c"], start=16_000, budget_s=5, seconds=1, steps=1, log=lambda _: None
    )
    warm = [("a", 16_000, -1), ("b", 16_000, -1), ("c", 16_000, -1)]
    assert calls[:6] == [*warm, *[(r, rate, -2) for r, rate, _ in reversed(warm)]]
    rounds = [[(r["runner"], r["rate"]) for r in found[x][1]] for x in "abc"]
    assert rounds == [
        [("a", 16_000), ("a", 32_000), ("a", 64_000), ("a", 48_000)],
        [("b", 16_000), ("b", 16_000), ("b", 32_000), ("b", 24_000)],  # the first, once more
        [("c", 16_000), ("c", 16_000), ("c", 8_000)],
    ]
    assert {x: found[x][0] for x in "abc"} == {"a": 48_000, "b": 16_000, "c": 0}
    order = [(r["round"], r["position"], r["runner"]) for x in "abc" for r in found[x][1]]
    assert sorted(order)[:6] == [(0, 0, "a"), (0, 1, "b"), (0, 2, "c"), (1, 0, "c"), (1, 1, "b"), (1, 2, "a")]


def test_sustainable_throughput_generator_keeps_the_suites_disorder() -> None:
    from benchmarks import sustainable as sb

    table = sb.events(np.random.default_rng(1), 100_000, now_ms=1_800_000_000_000)
    behind = 1_800_000_000_000 - table.column("event_time").cast(pa.int64()).to_numpy() // 1000
    assert behind.min() >= 0 and np.mean(behind <= 2_000) == pytest.approx(0.99, abs=0.003)
    assert behind.max() <= 62_000 and str(table.column("user_id")[0]).startswith("u")
    assert sb._p99([1.0] * 99 + [9.0]) == 1.0 and sb._p99([1.0] * 98 + [9.0, 9.0]) == 9.0


def test_sustainable_throughput_plots_latency_against_rate(tmp_path: Path) -> None:
    from benchmarks import sustainable as sb

    def run(budget: float, tick: float) -> dict[str, Any]:
        trials = [
            {"runner": r, "rate": rate, "p50_s": p99 / 2, "p99_s": p99, "sustained": p99 <= budget}
            for r, points in (
                ("krishiv-native", [(1_000, 0.4), (2_000, 3.0)]),
                ("pyspark-streaming", [(1_000, float("inf"))]),
            )
            for rate, p99 in points
        ]
        return {"budget_s": budget, "tick_s": tick, "feed": "files", "trials": trials}

    sources = []
    # Three files: two panels to a row, the fourth panel left empty.
    for i, (budget, tick) in enumerate([(5.0, 1.0), (1.0, 0.1), (5.0, 1.0)]):
        path = tmp_path / f"run-{i}.json"
        path.write_text(json.dumps(run(budget, tick)))
        sources += ["--from", str(path)]
    out = tmp_path / "latency.png"
    assert sb.main(["--plot", str(out), *sources]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_sustainable_feeds_flink_csv_files_with_epoch_milliseconds() -> None:
    from benchmarks import flink_sustain as fs
    from benchmarks import sustain_queries as sq
    from benchmarks import sustainable as sb

    directory, send = sb.csv_feed("krishiv-test-flink-feed-")
    table = sb.events(np.random.default_rng(2), 1_000, now_ms=1_800_000_000_000)
    send(table)
    send(table.slice(0, 10))
    parts = sorted(Path(directory).iterdir())
    assert [p.name for p in parts] == ["part-0000001.csv", "part-0000002.csv"]
    first = parts[0].read_text().splitlines()
    assert len(first) == 1_000 and len(parts[1].read_text().splitlines()) == 10
    user, ts, amount = first[0].split(",")
    expected_ms = table.column("event_time")[0].value // 1000
    assert (user.strip('"'), int(ts), float(amount)) == (str(table.column("user_id")[0]), expected_ms, 1.0)
    sql = fs.source_sql("events_1", directory, 100)
    assert "TO_TIMESTAMP_LTZ(ts, 3)" in sql and "'source.monitor-interval' = '100 ms'" in sql
    assert "INTERVAL '0 00:00:05.000' DAY TO SECOND(3)" in sql
    import datetime as dt

    assert fs.epoch_ms(dt.datetime(2027, 1, 15, 8, 0, 2, tzinfo=dt.UTC)) == 1_800_000_002_000
    # the print sink's lines: Java's LocalDateTime drops zero seconds
    assert fs.parse_rows("row 3:2> +I[2027-01-15T08:00:02, 17]\n") == ({"3": ["2027-01-15T08:00:02, 17"]}, [])
    assert fs.parse_rows("row 3> +I[2027-01-15T08:00:02, 9, 17]") == (
        {"3": ["2027-01-15T08:00:02, 9, 17"]},
        [],
    )
    assert fs.parse_time("2027-01-15T08:00:02") == 1_800_000_002_000
    assert fs.parse_time("2027-01-15T08:00") == 1_800_000_000_000
    assert fs.parse_rows("started 3\nrow 3:1> -U[2027-01-15T08:00, 1]\n") == ({}, ["started 3"])
    # what the harness makes of the rows of each query
    tumbling = sq.WORKLOADS["tumbling"].flink_results(["2027-01-15T08:00:02", "17"])
    assert tumbling == ([1_800_000_002_000], [1_800_000_007_000], [17])
    q7 = sq.WORKLOADS["nexmark-q7"].flink_results(["2027-01-15T08:00:02", "999", "4"])
    assert q7 == ([1_800_000_002_000], [1_800_000_007_000], [4])
    session = sq.WORKLOADS["session"].flink_results(["u7", "2027-01-15T08:00", "2027-01-15T08:00:05", "3"])
    assert session[1:] == ([1_800_000_010_000], [3]) and session[0][0][0] == 7  # type: ignore[index]
    for query in fs.QUERIES:  # every windowed query (q9 and q4 join: their own test)
        if query not in fs.JOINS and fs.module_of(query) is None:
            assert "DESCRIPTOR(event_time)" in fs.query_sql("events_1", query)
    # A Nexmark query without state: Nexmark's SQL over the job's bids, their time in epoch ms.
    assert (
        fs.query_sql("events_1", "nexmark-q2")
        == "SELECT auction, price FROM `events_1` WHERE MOD(auction, 123) = 0"
    )
    assert "date_time AS TO_TIMESTAMP_LTZ(date_time_ms, 3)" in fs.source_sql(
        "events_1", directory, 100, "nexmark-q2"
    )
    assert "SESSION(TABLE `events_1` PARTITION BY user_id" in fs.query_sql("events_1", "session")
    assert "auction BIGINT, ts BIGINT, price BIGINT" in fs.source_sql(
        "events_1", directory, 100, "nexmark-q7"
    )


def test_sustainable_batch_feed_holds_a_trials_events() -> None:
    import pyarrow.parquet as pq

    from benchmarks import sustainable as sb

    directory, n = sb.batch_feed(rate=3_000, seconds=4, tick_s=1.0, seed=3)
    parts = sorted(Path(directory).iterdir())
    assert n == 12_000 and len(parts) == 4
    tables = [pq.read_table(p) for p in parts]
    assert sum(t.num_rows for t in tables) == n
    # one tick per file, a second apart in event time (up to 62 s of lateness behind each)
    maxima = [pa.compute.max(t.column("event_time")).value // 1000 for t in tables]
    assert [b - a for a, b in itertools.pairwise(maxima)] == pytest.approx([1_000] * 3, abs=2_100)


def test_sustainable_generator_counts_each_sends_windows() -> None:
    from benchmarks import sustain_queries as sq

    work = sq.WORKLOADS["tumbling"]
    content = work.draw(np.random.default_rng(4), 50_000)
    now = 1_800_000_001_234
    table, generated = work.emit(content, now)
    ends, counts = np.unique(
        table.column("event_time").cast(pa.int64()).to_numpy() // 1000 // sq.WINDOW_MS * sq.WINDOW_MS
        + sq.WINDOW_MS,
        return_counts=True,
    )
    assert generated == dict(zip(ends.tolist(), counts.tolist(), strict=True))
    later, _ = work.emit(content, now + 1_000)  # the same content, a second later: every event a second later
    shift = (
        later.column("event_time").cast(pa.int64()).to_numpy()
        - table.column("event_time").cast(pa.int64()).to_numpy()
    )
    assert set(shift.tolist()) == {1_000_000}


def test_sustainable_sessions_are_users_taking_turns() -> None:
    """Each user's events fall in turns of 6 s separated by 6 s idle, so each turn is one 2 s-gap session."""
    from benchmarks import sustain_queries as q

    work = q.WORKLOADS["session"]
    rng = np.random.default_rng(5)
    now = 1_800_000_000_000
    sends = [work.emit(work.draw(rng, 20_000), now + i * 1_000) for i in range(40)]
    events = pa.concat_tables([t for t, _ in sends])
    generated: dict[Any, int] = {}
    for _, by_window in sends:
        for w, c in by_window.items():
            generated[w] = generated.get(w, 0) + c
    assert sum(generated.values()) == events.num_rows
    users = np.array([int(str(u)[1:]) for u in events.column("user_id").to_pylist()])
    et = events.column("event_time").cast(pa.int64()).to_numpy() // 1000
    assert set(np.unique(users).tolist()) == set(range(q.USERS))
    # The model's sessions of each user: split where two events are more than the gap apart.
    want: dict[Any, int] = {}
    for u in range(q.USERS):
        times = np.sort(et[users == u])
        cuts = np.flatnonzero(np.diff(times) > q.GAP_MS) + 1
        for part in np.split(times, cuts):
            if len(part) > 30:  # a turn (stray late events in the idle time make small ones)
                window, permitted, counts = work.results(
                    pa.table(
                        {
                            "user_id": [f"u{u}"],
                            "window_start": pa.array([int(part[0]) * 1000], pa.timestamp("us", tz="UTC")),
                            "window_end": pa.array(
                                [(int(part[-1]) + q.GAP_MS) * 1000], pa.timestamp("us", tz="UTC")
                            ),
                            "count": [len(part)],
                        }
                    )
                )
                assert permitted == [int(part[-1]) + q.GAP_MS + q.LAG_MS]
                want[window[0]] = counts[0]
    # Every turn whose events were all sent (event times from the first send to 2 s before the
    # last, the disorder) is one session with the turn's events: the turn ends 6 s after it starts,
    # and ``steady`` takes the session's end (+ the gap) and its permission (+ the lag).
    first, last = now + q.TURN_MS + q.GAP_MS, now + 37_000 + q.GAP_MS + q.LAG_MS
    middle = [w for w in generated if work.steady(w, first, last, 0)]
    assert len(middle) > 1_500
    for w in middle:
        assert want.get(w, 0) >= 0.95 * generated[w], w


def test_sustainable_arrivals_keep_the_result_that_completed_a_window() -> None:
    from benchmarks import sustainable as sb

    arrivals = sb.Arrivals()
    arrivals.add([("u1", 5), 10], [1_000, 2_000], [3, 4])
    first = arrivals.seen[("u1", 5)]
    arrivals.add([("u1", 5)], [900], [1])  # an earlier part of the same turn: not the completing one
    assert arrivals.seen[("u1", 5)] == first and arrivals.counted[("u1", 5)] == 4
    arrivals.add([("u1", 5)], [1_500], [2])
    assert arrivals.seen[("u1", 5)][0] == 1_500 and arrivals.counted == {("u1", 5): 6, 10: 4}


def test_sustainable_q7_counts_bids_per_window() -> None:
    from benchmarks import sustain_queries as q

    work = q.WORKLOADS["nexmark-q7"]
    table, generated = work.emit(work.draw(np.random.default_rng(6), 10_000), 1_800_000_000_500)
    assert table.column_names == ["auction", "event_time", "price"]
    assert sum(generated.values()) == 10_000 and all(int(str(end)) % q.WINDOW_MS == 0 for end in generated)


def test_sustainable_row_queries_count_what_each_send_keeps_and_map_rows_back_to_it() -> None:
    from benchmarks import sustain_queries as q
    from benchmarks.sustainable import Arrivals, runners_of

    sent = 1_800_000_000_500
    q2 = q.WORKLOADS["nexmark-q2"]
    table, generated = q2.emit(q2.draw(np.random.default_rng(6), 20_000), sent)
    assert table.column_names == ["auction", "bidder", "price", "channel", "url", "date_time"]
    kept = [a for a in table.column("auction").to_pylist() if a % 123 == 0]
    assert generated == {sent: len(kept)} and kept
    assert all(a // q.ROWS_PER_SEND + q.SEND_BASE_MS == sent for a in kept)
    windows, permitted, counts = q2.results(pa.table({"auction": kept, "price": [1] * len(kept)}))
    assert set(windows) == {sent} and permitted == windows and sum(counts) == len(kept)
    assert q2.flink_results([str(kept[0]), "5"]) == ([sent], [sent], [1])
    q14 = q.WORKLOADS["nexmark-q14"]
    table, generated = q14.emit(q14.draw(np.random.default_rng(7), 20_000), sent)
    euros = table.column("price").to_numpy() * 0.908
    assert generated == {sent: int(((euros > 1_000_000) & (euros < 50_000_000)).sum())}
    assert q14.steady(sent, sent - 1, sent + 6_000, 5.0) and not q14.steady(sent, sent + 1, sent + 9_000, 5.0)
    assert runners_of(q14) == ("krishiv-native", "pyflink", "pyflink-nexmark")
    # A send's latency runs to its last row.
    arrivals = Arrivals(last=True)
    arrivals.add([sent], [sent], [1])
    first = arrivals.seen[sent][1]
    time.sleep(0.01)
    arrivals.add([sent], [sent], [1])
    assert arrivals.seen[sent][1] > first and arrivals.counted[sent] == 2


def test_chaos_reads_window_starts_to_the_exact_millisecond() -> None:
    from benchmarks.chaos_job import epoch_ms

    start = dt.datetime(1970, 1, 1, 0, 0, 32, 300_000, tzinfo=dt.UTC)
    assert int(start.timestamp() * 1000) == 32_299  # what a float product gives
    assert epoch_ms(start) == 32_300
    assert epoch_ms(start.replace(tzinfo=None)) == 32_300


@pytest.mark.parametrize("query", ["nexmark-q4", "nexmark-q16"])
def test_the_operator_call_study_steps_its_kernel_to_the_same_rows_each_run(query: str) -> None:
    """``benchmarks.studies.operator_calls`` compares checkouts by a digest of every step's
    results: a run gives the same digest again, and its results are not empty."""
    first, again = operator_calls.run(query, 3_000, 4), operator_calls.run(query, 3_000, 4)
    assert (first["digest"], first["rows"]) == (again["digest"], again["rows"])
    assert first["cpu_s"] > 0 and first["rows"] > 0


def test_both_packer_inputs_decode_to_the_same_rows() -> None:
    """``benchmarks.studies.packer_input`` times like against like: both encodings give the
    operator's columns."""
    times = pa.array([0, None, -62_135_596_800_000_000], pa.int64())  # the epoch, none, the year 1
    amount = pa.array([float("nan"), -0.0, None])
    old = pa.table(
        {
            "__kp_c0": ["a", None, "b"],
            "__kp_c1": times.fill_null(0),
            "__kp_n1": times.is_null(),
            "__kp_c2": amount.fill_null(0.0),
            "__kp_n2": amount.is_null(),
            "__kp_tsv": times.fill_null(0),
            "__kp_tsn": times.is_null(),
        }
    )
    new = pa.table(
        {
            "__kp_c0": ["a", None, "b"],
            "__kp_c1": times.cast(pa.timestamp("us", tz="Etc/UTC")),
            "__kp_c2": amount,
            "__kp_tsv": times,
        }
    )
    got_old, got_new = packer_input.old_decode(old), packer_input.new_decode(new)
    assert got_old.schema == got_new.schema
    assert repr(got_old.to_pylist()) == repr(got_new.to_pylist())  # repr: NaN equals NaN, -0.0 is not 0.0


def test_the_operator_api_candidates_keep_a_running_count() -> None:
    """``benchmarks.operator_api`` times like against like: each candidate counts the bucket's rows."""

    class State:
        exists = False
        get: tuple[int, ...] = ()

        def update(self, value: tuple[int, ...]) -> None:
            self.exists, self.get = True, value

    state = State()
    frames = [pd.DataFrame({"user_id": [1, 2]}), pd.DataFrame({"user_id": [3]})]
    first = list(operator_api.counted((2,), iter(frames), state))
    again = list(operator_api.counted((2,), iter(frames[:1]), state))
    got = [f.to_dict("list") for f in first + again]
    assert got == [{"bucket": [2], "n": [3]}, {"bucket": [2], "n": [5]}]
    batches = [pa.record_batch({"x": [1, 2, 3]}), pa.record_batch({"x": [4]})]
    assert [b.column(1).to_pylist() for b in operator_api.arrow_count(iter(batches))] == [[3], [1]]


# --- Nexmark's join queries (Q3, Q8, Q20) -----------------------------------------------------------------

JOIN_QUERIES = [q for q, spec in QUERIES.items() if spec.is_join]
# The smallest dataset of the suite (the quick_run fixture's): 20,000 events, 3 files per table.
JOIN_SPEC = data.NexmarkSpec(events=20_000, files=3)


def _join_infos(query: str) -> list[protocol.TableInfo]:
    import argparse

    args = argparse.Namespace(clickstream="", nexmark=str(data.nexmark(JOIN_SPEC).root))
    return protocol.tables_info(QUERIES[query], args)


def _join_digest(query: str, table: pa.Table) -> tuple[int, str]:
    from benchmarks.arrow import rows_of

    return digest(rows_of(QUERIES[query].columns)(table))


@pytest.mark.parametrize("query", JOIN_QUERIES)
def test_a_join_query_gives_nexmarks_answer_when_bounded(query: str) -> None:
    """The model of the pipeline, one step with every row then close, equals Nexmark's SQL (DuckDB)."""
    import duckdb

    from benchmarks import joins
    from benchmarks.duckdb_runner import join_sql

    infos = _join_infos(query)
    paths = {t: i.files() + "/*.parquet" for t, i in zip(QUERIES[query].tables, infos, strict=True)}
    con = duckdb.connect()
    con.execute("SET TimeZone = 'UTC'")
    nexmark = _join_digest(query, con.sql(join_sql(QUERIES[query], paths)).to_arrow_table())
    assert nexmark[0] > 50
    assert _join_digest(query, joins.run_model_bounded(QUERIES[query], infos)) == nexmark


@pytest.mark.parametrize(
    ("query", "left_key", "right_key"), [("nexmark-q3", "seller", "id"), ("nexmark-q20", "auction", "id")]
)
def test_the_as_of_join_would_miss_partners_after_a_row(query: str, left_key: str, right_key: str) -> None:
    """Why Q3 and Q20 are interval joins: with disorder a partner's event time can follow the row's."""
    from benchmarks import joins
    from krishiv_py.api.stream import placeholder
    from krishiv_py.model.joins import join_model_for
    from krishiv_py.plan import nodes as n

    spec = QUERIES[query]
    infos = _join_infos(query)
    left, right = (
        placeholder(i.ddl, t).watermark("date_time", 5_000) for t, i in zip(spec.tables, infos, strict=True)
    )
    node = left.key_by(left_key).as_of_join(right.key_by(right_key)).plan
    assert isinstance(node, n.Join)
    as_of = join_model_for(node)
    rows = [pa.concat_tables(side) for side in zip(*joins.steps(spec, infos), strict=True)]
    as_of.step(left=rows[0].to_pylist(), right=rows[1].to_pylist())
    as_of.close()
    interval = joins.run_model_bounded(spec, infos)
    found = {tuple(r[c] for c in spec.columns) for r in as_of.results}
    every = set(zip(*(interval.column(c).to_pylist() for c in spec.columns), strict=True))
    assert found < every  # a strict subset: it finds only the partners at or before each row


@pytest.mark.parametrize("query", JOIN_QUERIES)
def test_the_join_model_once_per_key_equals_one_model(query: str) -> None:
    """The reference-model runner runs the join model once per key; one model of every key agrees."""
    from benchmarks import joins

    infos = _join_infos(query)
    streamed = _join_digest(query, joins.run_model(QUERIES[query], infos))
    assert streamed == _join_digest(query, joins.run_model_one(QUERIES[query], infos))
    assert streamed[0] > 50


@pytest.mark.parametrize("query", JOIN_QUERIES)
def test_a_join_query_on_spark_equals_the_model(session: kp.Session, query: str) -> None:
    """krishiv_py's pipeline on memory streams sent file by file, then closed: the model on the
    micro-batches Spark ran, then close.

    Both sides' files are sent before each ``process_all_available()``, but
    Spark may start a micro-batch between the two sends, so a file of one
    side can run alone; the model takes the batching Spark reports
    (:func:`benchmarks.joins.batching_of`), since which rows are late depends
    on it (``python -m benchmarks.stress_joins`` repeats this under load).
    The bounded run and the streaming run over the Parquet files are the
    benchmark's own runners, checked against their references in
    :func:`test_every_runner_of_a_join_query_agrees_with_its_reference`;
    closing the sources (every window fires) is what only this test does.
    """
    from benchmarks import joins

    spec = QUERIES[query]
    infos = _join_infos(query)
    closed, batching, late = joins.run_memory_join(session, spec, infos, lowering="stateful")
    want = joins.run_model_batched(spec, infos, batching, close=True)
    if _join_digest(query, closed) != _join_digest(query, want):
        from benchmarks.arrow import rows_of

        got, expected = (Counter(rows_of(spec.columns)(t)) for t in (closed, want))
        missing, extra = (list(c.elements())[:5] for c in (expected - got, got - expected))
        pytest.fail(
            f"{query}: {sum(got.values())} rows, the model {sum(expected.values())}; "
            f"missing {missing}, extra {extra}; very late {late}; micro-batches (left, right): {batching}"
        )


#: The join queries the runner processes are checked on: an interval join and a window join (which
#: the native runner skips); every join query runs on Spark in-process above.
RUNNER_JOIN_QUERIES = ["nexmark-q3", "nexmark-q8"]


@pytest.mark.spark
def test_every_runner_of_a_join_query_agrees_with_its_reference() -> None:
    """Join queries through the runners' processes at the smallest size, checked as the report does."""
    from benchmarks.__main__ import QUERY_REFERENCE, _runner_cmd

    root = str(data.nexmark(JOIN_SPEC).root)
    click = str(data.clickstream(data.ClickstreamSpec(events=JOIN_SPEC.events, files=JOIN_SPEC.files)).root)
    got: dict[tuple[str, str], dict[str, Any]] = {}
    groups = [
        ["krishiv-native", STATEFUL, "pyspark-streaming", "krishiv-bounded", "pyspark-batch"],
        [MODEL],
        ["duckdb"],
    ]
    for runners in groups:
        cmd = _runner_cmd(
            runners, RUNNER_JOIN_QUERIES, {"clickstream": click, "nexmark": root}, 1, warmup=False
        )
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1_200)
        assert proc.returncode == 0, proc.stderr[-3000:]
        for line in proc.stdout.splitlines():
            if line.startswith(f"{protocol.PREFIX}result "):
                rec = json.loads(line.removeprefix(f"{protocol.PREFIX}result "))
                got[rec["query"], rec["runner"]] = rec
    for query in RUNNER_JOIN_QUERIES:
        for (q, runner), rec in got.items():
            if q != query:
                continue
            if runner == "krishiv-native" and rec["status"] == "skipped":
                assert query == "nexmark-q8", rec  # a window join runs on the stateful lowering only
                continue
            assert rec["status"] == "ok", rec
            ref = got[query, QUERY_REFERENCE.get((query, runner), REFERENCE[runner])]
            assert (rec["rows"], rec["digest"]) == (ref["rows"], ref["digest"]), (query, runner)
        assert got[query, MODEL]["rows"] > 50
        # Nexmark's SQL (DuckDB) is the bounded answer; the streaming runs drop late rows.
        assert got[query, "duckdb"]["rows"] >= got[query, MODEL]["rows"]


def test_sustainable_q9_sends_auctions_and_bids_within_their_lifetimes() -> None:
    from benchmarks import flink_sustain as fs
    from benchmarks import sustain_queries as q
    from benchmarks import sustainable as sb

    work = q.WORKLOADS["nexmark-q9"]
    assert set(work.tables) == {"auction", "bid"} and sb.runners_of(work) == (
        "krishiv-stateful",
        "pyflink",
        "pyflink-nexmark",
    )
    d = work.draw(np.random.default_rng(3), 49_000)
    now = 1_800_000_000_700
    tables, generated = work.emit(d, now)
    auctions, bids = tables["auction"], tables["bid"]
    assert (auctions.num_rows, bids.num_rows) == (3_000, 46_000)  # Nexmark's 3 auctions to 46 bids
    assert auctions.column_names == ["id", "category", "event_time", "expires"]
    assert bids.column_names == ["auction", "price", "event_time", "bidder", "sent"]
    assert list(generated) == auctions.column("id").to_pylist()  # each auction once, in its send
    # Every bid goes to an auction of this send or of the four before, inside that auction's life.
    second = now // 1000
    seconds = (bids.column("auction").to_numpy() // q.SPAN).tolist()
    assert set(seconds) == set(range(second - q.AUCTION_BACK_S + 1, second + 1))
    bid_ms = bids.column("event_time").cast(pa.int64()).to_numpy() // 1000
    starts = np.array(seconds) * 1000 - 2_000
    assert (bid_ms >= starts).all() and (bid_ms <= starts + q.AUCTION_LIFE_MS).all()
    assert (now - bid_ms <= 2_000).all() and set(bids.column("sent").to_pylist()) == {now}
    # steady: sent after the first third, its last bids a budget before the end
    auction = second * q.SPAN + 7
    assert work.steady(auction, second * 1000, second * 1000 + 10_000, 5.0)
    assert not work.steady(auction, second * 1000, second * 1000 + 9_999, 5.0)
    assert not work.steady(auction, second * 1000 + 1, second * 1000 + 20_000, 5.0)
    # a result row: its auction, permitted at its bid's send; a retraction is no new winner
    rows = pa.table(
        {"id": [auction, auction], "price": [9, 5], "sent": [now, now - 1_000], "kind": ["emit", "retract"]}
    )
    assert work.results(rows) == ([auction], [now], [1])
    assert work.flink_results([str(auction), "9", str(now)]) == ([auction], [now], [1])
    assert fs.parse_rows(f"row 4:1> +U[{auction}, 9, {now}]") == ({"4": [f"{auction}, 9, {now}"]}, [])
    sql = fs.query_sql("4", "nexmark-q9")
    assert "FROM `auction_4` A, `bid_4` B" in sql and "ROW_NUMBER() OVER (PARTITION BY A.id" in sql
    ddl = fs.source_sql("auction_4", "/tmp", 100, "nexmark-q9", "auction")
    assert "expires AS TO_TIMESTAMP_LTZ(expires_ms, 3)" in ddl
    # q4: a window per category and send, waiting for a row of the category that reflects the send
    q4 = q.WORKLOADS["nexmark-q4"]
    assert q4.reflects and not work.reflects and q4.tables == work.tables
    q4_tables, windows = q4.emit(d, now)
    assert q4_tables["bid"].equals(bids) and set(windows) == {(c, now) for c in range(10)}
    assert q4.steady((3, now), now, now + 5_000, 5.0) and not q4.steady((3, now), now, now + 4_999, 5.0)
    arrivals = sb.Arrivals(reflect=True)
    arrivals.add([3, 3, 4], [now - 1_000, now + 1_000, now], [1, 1, 1])
    assert sb._latency(q4, arrivals, (3, now)) != float("inf")  # the row sent at now + 1 s reflects it
    assert sb._latency(q4, arrivals, (4, now + 1)) == float("inf")  # 4's only row is from before
    q4_sql = fs.query_sql("4", "nexmark-q4")
    assert "GROUP BY A.id, A.category" in q4_sql and "MAX(sent) AS sent" in q4_sql
    # The CSV feed writes every timestamp in epoch ms (the event time as ``ts``).
    directory, send = sb.csv_feed("krishiv-test-q9-feed-")
    send(auctions.slice(0, 1))
    fields = next(Path(directory).iterdir()).read_text().split(",")
    assert [int(f) for f in fields[2:]] == [second * 1000 - 2_000, second * 1000 - 2_000 + q.AUCTION_LIFE_MS]


def test_sustainable_q23_sends_bids_by_persons_who_each_sell_one_auction() -> None:
    from benchmarks import flink_sustain as fs
    from benchmarks import sustain_queries as q

    work = q.WORKLOADS["nexmark-q23"]
    assert list(work.tables) == list(fs.tables_of("nexmark-q23")) == ["person", "auction", "bid"]
    now = 1_800_000_000_700
    tables, windows = work.emit(work.draw(np.random.default_rng(4), 50_000), now)
    persons, auctions, bids = tables["person"], tables["auction"], tables["bid"]
    assert (persons.num_rows, auctions.num_rows, bids.num_rows) == (1_000, 1_000, 48_000)
    assert auctions.column("seller").equals(persons.column("id"))  # each person sells one auction
    second = now // 1000
    made = (bids.column("bidder").to_numpy() // q.SPAN).tolist()
    assert set(made) == set(range(second - q.AUCTION_BACK_S + 1, second + 1))
    # every bid is within the joins' bounds of its person and auction (made 2 s before their second)
    behind = bids.column("event_time").cast(pa.int64()).to_numpy() // 1000 - (np.array(made) * 1000 - 2_000)
    assert (behind >= 0).all() and (behind <= q.PARTNER_MS).all()
    assert set(windows) == {(g, now) for g in range(10)} and work.reflects
    rows = pa.table({"bidder": [second * q.SPAN + 13], "price": [5], "sent": [now]})
    assert work.results(rows) == ([3], [now], [1])
    assert work.flink_results([str(second * q.SPAN + 13), "5", "1", "2", str(now)]) == ([3], [now], [1])
    assert "expires" not in fs.source_sql("auction_2", "/tmp", 100, "nexmark-q23", "auction")
    sql = fs.query_sql("2", "nexmark-q23")
    assert (
        "JOIN `person_2` P ON P.id = B.bidder" in sql and "JOIN `auction_2` A ON A.seller = B.bidder" in sql
    )


@pytest.mark.parametrize("name", ["q15", "q16", "q17", "q18", "q19"])
def test_sustainable_updating_queries_wait_for_the_row_that_holds_a_keys_whole_send(name: str) -> None:
    """A window of an updating query is a key and the value its row reaches once the send's rows of
    the key are in; krishiv's rows and PyFlink's printed ones map to the same (key, value)."""

    from benchmarks import sustain_queries as q
    from benchmarks import sustainable as sb

    work = q.WORKLOADS[f"nexmark-{name}"]
    assert work.reflects and sb.runners_of(work) == ("krishiv-stateful", "pyflink", "pyflink-nexmark")
    sent = 1_800_000_000_500
    table, windows = work.emit(work.draw(np.random.default_rng(3), 4_000), sent)
    assert 1 <= len(windows) <= q.SAMPLED_KEYS and all(work.sent_ms(w) == sent for w in windows)
    # The send's last auction is a window: the one the runners reach last.
    last = table.column("auction")[-1].as_py()
    parts = [(*(w[0] if isinstance(w[0], tuple) else (w[0],)), w[1]) for w in windows]  # type: ignore[index]
    assert any(last in p for p in parts)
    # The final rows of the query over the send (DuckDB: the module's reference) reach every mark.
    final = _final(name, table)
    marks = cast("list[tuple[Any, int]]", list(windows))
    assert all(_reached(work, final).get(key, -1) >= mark for key, mark in marks)
    if name in ("q17", "q19"):  # half the last auction's bids: its count, its top 10, fall short
        partial = _reached(work, _final(name, table.slice(0, table.num_rows - q.BIDS_PER_AUCTION // 2)))
        of_last = [(k, m) for k, m in marks if last in (k if isinstance(k, tuple) else (k,))]
        assert len(of_last) == 1 and partial.get(of_last[0][0], -1) < of_last[0][1]
    # PyFlink prints the same rows (Nexmark's SQL's columns; q15, q16: then last_auction).
    printed = [", ".join(_printed(v) for v in row.values()) for row in final.to_pylist()]
    assert sorted(zip(*work.flink_rows(printed), strict=True)) == sorted(
        zip(*work.results(final), strict=True)
    )
    arrivals = sb.Arrivals(reflect=True)
    arrivals.add(*work.flink_rows(printed))
    assert all(sb._latency(work, arrivals, w) != float("inf") for w in windows)
    retracted = final.append_column("kind", pa.array(["retract"] * final.num_rows))
    assert work.results(retracted) == ([], [], [])
    # A row whose value PyFlink prints as null reaches nothing (and stops no reading).
    fields = printed[0].split(", ")
    fields[q._PRINTED[name][-1]] = "null"
    assert work.flink_rows([", ".join(fields)])[1] == [0]


def _final(name: str, table: pa.Table) -> pa.Table:
    """The final rows of updating query ``name`` over ``table`` (the module's DuckDB reference; q15
    and q16 with the harness's ``last_auction``)."""
    import duckdb

    from benchmarks import flink_sustain as fs
    from benchmarks.nexmark import query

    with duckdb.connect() as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register("sent_bids", table)
        sql = query(name).DUCKDB.format(bid="sent_bids")
        if name in fs.LAST_AUCTION:
            last = f"(SELECT MAX(auction) FROM sent_bids b WHERE {_day_match(name)}) AS last_auction"
            sql = f"SELECT *, {last} FROM ({sql}) r"
        final: pa.Table = con.sql(sql).to_arrow_table()
        return final


def _reached(work: Any, final: pa.Table) -> dict[Any, int]:
    """Per key, the highest value its rows reach."""
    keys, values, _ = work.results(final.append_column("kind", pa.array(["emit"] * final.num_rows)))
    reached: dict[Any, int] = {}
    for key, value in zip(keys, values, strict=True):
        reached[key] = max(value, reached.get(key, value))
    return reached


def _day_match(name: str) -> str:
    day = "strftime(b.date_time::TIMESTAMP, '%Y-%m-%d') = r.day"
    return day if name == "q15" else f"{day} AND b.channel = r.channel"


def _printed(value: object) -> str:
    """A value as Flink's print sink writes it (a TIMESTAMP_LTZ as an instant)."""
    if isinstance(value, dt.datetime):
        return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"
    return str(value)


def test_nexmark_budget_book_keeps_each_querys_best_rates_and_compares_per_core(tmp_path: Path) -> None:
    from benchmarks.nexmark import budget
    from benchmarks.nexmark.published import FELDERA, FLINK

    def trial(runner: str, rate: int, p99: float, ok: bool) -> dict[str, Any]:
        return {
            "runner": runner,
            "rate": rate,
            "p99_s": p99,
            "sustained": ok,
            "generator_behind_s": 0.0,
            "counted_share": 1.0,
        }

    run = {
        "query": "nexmark-q1",
        "budget_s": 5.0,
        "summary": {"krishiv-native": 400_000, "pyflink": 300_000},
        "trials": [
            trial("krishiv-native", 200_000, 0.5, True),
            trial("krishiv-native", 400_000, 1.5, True),
            trial("krishiv-native", 800_000, 9.0, False),
            trial("pyflink", 300_000, 2.0, True),
            trial("pyflink", 600_000, 7.0, False),
        ],
    }
    (tmp_path / "q1.json").write_text(json.dumps(run))
    book = budget.add(tmp_path / "book.json", [tmp_path / "q1.json"], cores=2, date="2026-11-27")
    assert book["q1"]["runners"]["krishiv-native"] == {
        "events_per_s": 400_000,
        "events_per_s_1s": 200_000,
        "p99_s": 1.5,
        "next": {"rate": 800_000, "p99_s": 9.0},
        "generator_behind_s": 0.0,
    }
    text = budget.table(json.loads((tmp_path / "book.json").read_text()))
    row = next(line for line in text.splitlines() if line.startswith("| q1 |"))
    assert "| 400,000 (native) | 1.50 s | 300,000 | 2.00 s | 1.33 | 200,000 | 150,000 |" in row
    assert f"{FLINK['q1']:,.0f}" in row and f"{FELDERA['q1']:,.0f}" in row
    assert "| q3 | not run |" in text
    assert "| q1 | 200,000 | - |" in budget.table_1s(book)
    # krishiv 200,000 per core against Flink's published 157,940: at or above.
    assert budget.counts(book) == {
        "both_ran": 1,
        "krishiv_at_or_above_pyflink": 1,
        "per_core_at_or_above_flink": 1,
    }
    budget.plot(book, tmp_path / "chart.png")
    assert (tmp_path / "chart.png").stat().st_size > 1_000


def test_the_budget_table_holds_krishiv_against_the_better_pyflink_setup(tmp_path: Path) -> None:
    """PyFlink as Nexmark runs it (mini-batches) beside Flink's defaults: the table, the 1 s table
    and the counts take the better of the two, and say when it is Nexmark's setup."""
    from benchmarks.nexmark import budget

    def outcome(rate: int, rate_1s: int | None) -> dict[str, Any]:
        return {"events_per_s": rate, "events_per_s_1s": rate_1s, "p99_s": 3.0, "next": None}

    entry: dict[str, Any] = {
        "date": "2026-11-30",
        "cores": 2,
        "budget_s": 5.0,
        "runners": {
            "krishiv-stateful": outcome(500_000, 250_000),
            "pyflink": outcome(400_000, 300_000),
            "pyflink-nexmark": outcome(600_000, None),
        },
    }
    book = {"q4": entry}
    row = next(line for line in budget.table(book).splitlines() if line.startswith("| q4 |"))
    assert "| 600,000 (Nexmark's setup) | 3.00 s | 0.83 |" in row
    assert "| q4 | 250,000 | 300,000 |" in budget.table_1s(book)  # (Flink's defaults: mini-batches wait 2 s)
    assert budget.counts(book)["krishiv_at_or_above_pyflink"] == 0
    del entry["runners"]["pyflink-nexmark"]
    row = next(line for line in budget.table(book).splitlines() if line.startswith("| q4 |"))
    assert "| 400,000 | 3.00 s | 1.25 |" in row
    assert budget.counts(book)["krishiv_at_or_above_pyflink"] == 1


def test_pyflink_runs_with_flinks_defaults_and_as_nexmark_runs_it() -> None:
    """``pyflink-nexmark``'s process sets Flink up as the Nexmark repository's flink-conf.yaml does
    (mini-batches of 50,000 rows or 2 s, two-phase distinct aggregates, RocksDB); ``pyflink`` has
    Flink's defaults; each PyFlink runner gets a process of its own setup."""
    from benchmarks import flink_sustain as fs
    from benchmarks import sustainable as sb

    nexmark, default = fs.settings(2, "nexmark"), fs.settings(2)
    assert nexmark["table.exec.mini-batch.enabled"] == "true"
    assert nexmark["table.exec.mini-batch.allow-latency"] == "2 s"
    assert nexmark["table.exec.mini-batch.size"] == "50000"
    assert nexmark["table.optimizer.distinct-agg.split.enabled"] == "true"
    assert nexmark["state.backend.type"] == "rocksdb"
    assert default == {k: v for k, v in nexmark.items() if k not in fs.SETUPS["nexmark"]}
    assert default["parallelism.default"] == "2" and "table.exec.mini-batch.enabled" not in default
    with pytest.raises(ValueError, match="no PyFlink setup 'fast'"):
        fs.settings(2, "fast")
    assert sb.FLINK_RUNNERS == {"pyflink": "default", "pyflink-nexmark": "nexmark"}
    assert all(s in fs.SETUPS for s in sb.FLINK_RUNNERS.values())
    assert sb.flink_processes(None, ["krishiv-native", "pyflink", "pyflink-nexmark"], "tumbling") == {}
    one, two = object.__new__(sb.FlinkProcess), object.__new__(sb.FlinkProcess)
    assert sb.flink_process(one, "pyflink") is one and sb.flink_process(one, "pyflink-nexmark") is None
    both = {"pyflink": one, "pyflink-nexmark": two}
    assert sb.flink_process(both, "pyflink-nexmark") is two and sb.flink_process(None, "pyflink") is None


def test_sustainable_q20_and_q8_count_what_each_send_or_window_yields() -> None:
    from benchmarks import flink_sustain as fs
    from benchmarks import sustain_queries as q
    from benchmarks import sustainable as sb

    now = 1_800_000_000_700
    q20 = q.WORKLOADS["nexmark-q20"]
    assert q20.per_send and q20.tables == q.Q9_TABLES
    assert sb.runners_of(q20) == ("krishiv-native", "krishiv-stateful", "pyflink", "pyflink-nexmark")
    tables, windows = q20.emit(q20.draw(np.random.default_rng(5), 20_000), now)
    to_tenth = int((tables["bid"].column("auction").to_numpy() % 10 == 0).sum())
    assert windows == {now: to_tenth} and 0 < to_tenth < tables["bid"].num_rows / 5
    rows = pa.table({"id": [1, 2, 3], "price": [5, 6, 7], "sent": [now, now, now - 1_000]})
    assert sorted(zip(*q20.results(rows), strict=True)) == [(now - 1_000, now - 1_000, 1), (now, now, 2)]
    assert q20.flink_rows([f"1, 5, {now}", f"2, 6, {now}"]) == ([now], [now], [2])
    assert "WHERE A.category = 0" in fs.query_sql("3", "nexmark-q20")
    q8 = q.WORKLOADS["nexmark-q8"]
    assert list(q8.tables) == list(fs.tables_of("nexmark-q8")) == ["person", "auction"]
    tables, windows = q8.emit(q8.draw(np.random.default_rng(6), 2_000), now)
    assert tables["person"].num_rows == tables["auction"].num_rows == 1_000 == sum(windows.values())
    assert tables["auction"].column("seller").equals(tables["person"].column("id"))
    ends = cast("list[int]", list(windows))
    assert all(end % q.WINDOW_MS == 0 and now - 2_000 < end <= now + q.WINDOW_MS for end in ends)
    start = dt.datetime.fromtimestamp((now // 2_000) * 2, dt.UTC)
    rows = pa.table({"id": [1, 2], "window_start": pa.array([start, start], pa.timestamp("us", tz="UTC"))})
    end = now // 2_000 * 2_000 + q.WINDOW_MS
    assert q8.results(rows) == ([end], [end + q.LAG_MS], [2])
    assert q8.flink_results(["1", start.strftime("%Y-%m-%dT%H:%M:%SZ")]) == ([end], [end + q.LAG_MS], [1])
    sql = fs.query_sql("3", "nexmark-q8")
    assert "FROM `person_3` GROUP BY id, TUMBLE(event_time, " in sql and "P.id = A.seller" in sql


def test_nexmark_command_at_a_rate_runs_each_harness_query_on_krishivs_lowering(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m benchmarks.nexmark --rate R``: one trial per query, on the lowering krishiv runs it
    with; a query outside the harness is named as such."""
    import krishiv_py as kp
    from benchmarks import sustainable as sb
    from benchmarks.nexmark import __main__ as cli

    calls: list[tuple[str, int, str]] = []

    def trial(_s: object, runner: str, rate: int, *_a: object, query: str, **_k: object) -> dict[str, Any]:
        calls.append((runner, rate, query))
        return {
            "runner": runner,
            "rate": rate,
            "p50_s": 0.5,
            "p99_s": 1.25,
            "counted_share": 1.0,
            "sustained": True,
        }

    class Idle:
        def stop(self) -> None:
            pass

    from benchmarks.sustain_queries import WORKLOADS

    monkeypatch.setattr(sb, "trial", trial)
    monkeypatch.setattr(kp.Session, "embedded", staticmethod(lambda *a, **k: Idle()))
    monkeypatch.delitem(WORKLOADS, "nexmark-q13")  # (every module's query runs in the harness now)
    argv = ["--rate", "1000", "--seconds", "3"]
    argv += [arg for q in ("q1", "q17", "q20", "q12", "q13") for arg in ("--query", q)]
    assert cli.main(argv) == 0
    assert calls == [
        ("krishiv-native", 1000, "nexmark-q1"),
        ("krishiv-stateful", 1000, "nexmark-q17"),
        ("krishiv-native", 1000, "nexmark-q20"),
        ("krishiv-stateful", 1000, "nexmark-q12"),
    ]
    out = capsys.readouterr().out
    assert "q17    krishiv-stateful       1,000    0.50    1.25   100.0%  yes" in out
    assert "q13    not in the sustainable harness" in out


def test_a_sustainable_trial_leaves_no_directory_behind() -> None:
    import tempfile

    from benchmarks import sustainable as sb

    made: list[Path] = []

    @sb._in_scratch
    def run(rows: int) -> int:
        made.append(Path(tempfile.mkdtemp(prefix="krishiv-sustain-test-")))
        (made[-1] / "part.csv").write_text("1\n" * rows)
        raise RuntimeError("a trial that fails cleans up too")

    before = tempfile.tempdir
    with pytest.raises(RuntimeError):
        run(3)
    assert made and not made[0].exists() and not made[0].parent.exists()
    assert tempfile.tempdir == before


def test_sustainable_q3_and_q5_count_what_each_send_or_window_yields() -> None:
    """q3: a send's kept auctions (category 0, a local seller), by their ids, from krishiv's rows
    and PyFlink's; q5: every 10 s window an event falls in, reached by its hot auctions' rows."""
    from benchmarks import flink_sustain as fs
    from benchmarks import sustain_queries as q
    from benchmarks import sustainable as sb

    now = 1_800_000_000_700
    q3 = q.WORKLOADS["nexmark-q3"]
    assert q3.per_send and list(q3.tables) == list(fs.tables_of("nexmark-q3")) == ["person", "auction"]
    assert sb.runners_of(q3) == ("krishiv-native", "krishiv-stateful", "pyflink", "pyflink-nexmark")
    tables, windows = q3.emit(q3.draw(np.random.default_rng(7), 4_000), now)
    person, auction = tables["person"], tables["auction"]
    assert auction.column("seller").equals(person.column("id"))
    # The rows q3 keeps: a person's auction of category 0 (id % 10) and a local state.
    kept = [
        (s, i)
        for i, s, c in zip(
            person.column("id").to_pylist(),
            person.column("state").to_pylist(),
            auction.column("category").to_pylist(),
            strict=True,
        )
        if c == 0 and s in ("OR", "ID", "CA")
    ]
    assert windows == {now: len(kept)} and 0 < len(kept) < auction.num_rows / 10
    rows = pa.table({"state": [s for s, _ in kept], "id": [i for _, i in kept]})
    assert q3.results(rows) == ([now], [now], [len(kept)])
    assert q3.flink_rows([f"{s}, {i}" for s, i in kept]) == ([now], [now], [len(kept)])
    assert "WHERE A.category = 0 AND (P.state = 'OR'" in fs.query_sql("3", "nexmark-q3")

    q5 = q.WORKLOADS["nexmark-q5"]
    assert sb.runners_of(q5) == sb.RUNNERS and q5.ddl == q.WORKLOADS["nexmark-q7"].ddl
    assert q5.counted_once and not q.WORKLOADS["nexmark-q7"].counted_once  # whole at its first row
    table, windows = q5.emit(q5.draw(np.random.default_rng(8), 2_000), now)
    et = np.array(q._ms(table.column("event_time")))
    ends = cast("list[int]", sorted(windows))
    # Every window of 10 s sliding by 2 s that holds an event, and no other.
    assert all(end % 2_000 == 0 and any(end - 10_000 <= t < end for t in et) for end in ends)
    assert len(ends) == len({(t // 2_000 + 1 + j) * 2_000 for t in et for j in range(5)})
    stamp = pa.timestamp("us", tz="UTC")
    end = ends[-1]
    counts = pa.table(
        {
            "auction": [1, 2, 3, 4],
            "window_end": pa.array([end * 1000, end * 1000, end * 1000, ends[0] * 1000], stamp),
            "count": [5, 7, 7, 1],
        }
    )
    # PySpark's counts are ranked here; krishiv's top-N rows come ranked: one result per window.
    assert q5.results(counts) == ([ends[0], end], [ends[0] + q.LAG_MS, end + q.LAG_MS], [1, 1])
    assert q5.results(counts.slice(1, 2)) == ([end], [end + q.LAG_MS], [1])
    at = dt.datetime.fromtimestamp(end / 1000, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S")
    assert q5.flink_rows([f"2, {at}, 7"]) == ([end], [end + q.LAG_MS], [1])
    assert "HOP(TABLE `events_3`" in fs.query_sql("events_3", "nexmark-q5")
    # krishiv's form is the Nexmark module's pipeline, whose windows are the harness's
    from benchmarks.nexmark import q5 as nexmark_q5
    from benchmarks.nexmark._streams import Tables
    from krishiv_py.api.stream import Stream
    from krishiv_py.plan import nodes as n
    from krishiv_py.types import to_schema

    assert (nexmark_q5.SIZE_MS, nexmark_q5.SLIDE_MS) == (q.Q5_SIZE_MS, q.WINDOW_MS)
    source = Stream(None, n.MemorySource(name="bids", schema=to_schema(q5.ddl), path="/nowhere"))
    timed = source.watermark("event_time", q.LAG_MS)
    assert q5.krishiv(source).plan == nexmark_q5.build(Tables({"bid": timed})).plan


def test_sustainable_q12_and_q13_read_their_rows_as_an_updating_and_a_row_query() -> None:
    """q12: per bidder, a processing-time window's row marks the send's last auction of the bidder;
    q13: every bid has its key in the side table, so a send's rows are its bids."""
    from benchmarks import flink_sustain as fs
    from benchmarks import sustain_queries as q
    from benchmarks import sustainable as sb

    now = 1_800_000_000_500
    q12 = q.WORKLOADS["nexmark-q12"]
    assert q12.reflects and sb.runners_of(q12) == ("krishiv-stateful", "pyflink", "pyflink-nexmark")
    table, windows = q12.emit(q12.draw(np.random.default_rng(3), 3_000), now)
    assert 1 <= len(windows) <= q.SAMPLED_KEYS and all(q12.sent_ms(w) == now for w in windows)
    auctions, bidders = table.column("auction").to_pylist(), table.column("bidder").to_pylist()
    last = {b: a for a, b in zip(auctions, bidders, strict=True)}
    assert all(last[b] == mark for b, mark in cast("list[tuple[int, int]]", list(windows)))
    bidder, mark = cast("tuple[int, int]", next(iter(windows)))
    row = pa.table({"bidder": [bidder], "bid_count": [2], "last_auction": [mark]})
    assert q12.results(row) == ([bidder], [mark], [1])
    assert q12.flink_rows([f"{bidder}, 2, 2027-01-15T08:00, 2027-01-15T08:00:02, {mark}"]) == (
        [bidder],
        [mark],
        [1],
    )
    sql = fs.query_sql("events_2", "nexmark-q12")
    assert "MAX(auction) AS last_auction FROM (SELECT *, PROCTIME() AS p_time FROM `events_2`)" in sql
    assert "TUMBLE(B.p_time, INTERVAL '2' SECOND)" in sql

    q13 = q.WORKLOADS["nexmark-q13"]
    assert q13.per_send and sb.runners_of(q13) == ("krishiv-native", "pyflink", "pyflink-nexmark")
    table, windows = q13.emit(q13.draw(np.random.default_rng(4), 1_000), now)
    assert windows == {now: 1_000}
    side = q.side_table()
    assert side.num_rows == 10_000 and side.column("value")[42].as_py() == "value-42"
    assert "JOIN `side_events_2` AS S ON MOD(B.auction, 10000) = S.`key`" in fs.query_sql(
        "events_2", "nexmark-q13"
    )


def test_auto_lag_curves_replay_every_lag_and_judge_the_automatic_one() -> None:
    """A stalled source's held clicks arrive in one micro-batch at the stall's end; the sweep has
    a row per fixed lag and one automatic, and the verdict names the best fixed lag."""
    from benchmarks import auto_lag_curves as c

    batches, p99 = c.micro_batches("stall-burst", 30)
    sizes = [len(b) for b in batches]
    assert sum(sizes) == 30 * c.RATE and max(sizes) > 5_000 and p99 > 5_000  # the burst at 30 s
    rows, lateness = c.sweep("uniform", 8)
    assert lateness >= 2 * 1_900 and [r["lag"] for r in rows] == [*c.FIXED_LAGS, "auto"]
    # Learned below the 2 s of disorder; a 10 s lag fires nothing in 8 s of clicks.
    assert rows[-1]["final_lag_ms"] <= 2_000 and rows[-2]["p50_final_ms"] is None
    verdict = c.verdict(rows)
    assert verdict["best_fixed_lag_ms"] in c.FIXED_LAGS and verdict["latency_ratio"] is not None


def test_sustainable_tumbling_auto_is_tumbling_with_a_pinned_automatic_lag() -> None:
    from benchmarks import sustain_queries as q
    from benchmarks import sustainable as sb
    from krishiv_py.api.stream import Stream
    from krishiv_py.plan import nodes as n
    from krishiv_py.types import to_schema

    work = q.WORKLOADS["tumbling-auto"]
    assert sb.runners_of(work) == ("krishiv-stateful",) and work.ddl == q.WORKLOADS["tumbling"].ddl
    source = n.MemorySource(name="clicks", schema=to_schema(work.ddl), path="/nowhere")
    marks = n.watermarks_of(work.krishiv(Stream(None, source)).plan)
    assert [m.auto for m in marks] == [q.PINNED_AUTO] and q.PINNED_AUTO.min_lag_ms == q.LAG_MS
    assert n.watermarks_of(q.WORKLOADS["tumbling"].krishiv(Stream(None, source)).plan)[0].auto is None


def test_the_nexmark_command_says_why_a_trial_saw_no_result(capsys: pytest.CaptureFixture[str]) -> None:
    from benchmarks.nexmark.__main__ import print_rates

    row = {"runner": "krishiv-stateful", "rate": 500, "counted_share": 0.0, "sustained": False}
    print_rates([{"query": "q9", **row, "p50_s": float("inf"), "p99_s": float("inf")}], 10)
    out = capsys.readouterr().out
    assert "inf" in out and "no result reached the sink" in out and "--seconds 60" in out


def test_the_join_step_benchmark_emits_each_person_once_its_window_closed() -> None:
    """``benchmarks.join_step``: q8's window join emits every person whose window the last
    watermark passed, once (counted here from the same event times)."""
    from benchmarks import join_step

    rows, batches = 300, 9
    found = join_step.measure(rows, batches)
    rng = np.random.default_rng(1)
    last = (batches - 1) * join_step.STEP_MS - join_step.LAG_MS
    closed = 0
    for i in range(batches):
        t = i * join_step.STEP_MS + np.sort(rng.integers(0, join_step.STEP_MS, rows))
        closed += int(np.sum((t // join_step.WINDOW_MS + 1) * join_step.WINDOW_MS <= last))
    assert found["emitted"] == closed > 0
    assert 0 < found["held_rows"] < 2 * rows * batches
