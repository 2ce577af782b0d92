"""The Nexmark q4, q6, q9, q23 references (benchmarks.nexmark_compose): DuckDB on a tiny dataset.

Each query's DuckDB answer is checked against a direct pandas recompute of
what the query means; the changelog and sink readers that the PyFlink side
uses are checked on hand-written changes. No Spark, no Flink.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from benchmarks import data
from benchmarks.nexmark_compose import (
    QUERIES,
    Change,
    arrow_rows,
    duckdb_rows,
    final_rows,
    read_changes,
    rows_agree,
    untied,
)

SPEC = data.NexmarkSpec(events=3_000, files=2)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> data.Dataset:
    return data.nexmark(SPEC, cache=tmp_path_factory.mktemp("nexmark"))


def frame(dataset: data.Dataset, table: str) -> pd.DataFrame:
    """A table of ``dataset`` with its timestamps as epoch ms."""
    t = pq.read_table(dataset.table_dir(table))
    return pd.DataFrame(arrow_rows(t), columns=t.column_names)


@pytest.fixture(scope="module")
def in_lifetime(dataset: data.Dataset) -> pd.DataFrame:
    """Every (auction, bid) pair with the bid at or after the auction's start, at or before it expires."""
    bids = frame(dataset, "bid").rename(columns={"date_time": "bid_date_time"})
    pairs = frame(dataset, "auction").merge(bids, left_on="id", right_on="auction")
    inside = (pairs["bid_date_time"] >= pairs["date_time"]) & (pairs["bid_date_time"] <= pairs["expires"])
    assert 0 < inside.sum() < len(pairs)  # the lifetime filter keeps some pairs and cuts some
    return pairs[inside]


def winners(in_lifetime: pd.DataFrame) -> pd.DataFrame:
    """Per auction, its highest bid, the earliest of those at that price."""
    ranked = in_lifetime.sort_values(["id", "price", "bid_date_time"], ascending=[True, False, True])
    return ranked.drop_duplicates("id")


def test_q9_one_row_per_auction_with_a_bid_in_its_lifetime_at_its_highest_price(
    dataset: data.Dataset, in_lifetime: pd.DataFrame
) -> None:
    rows = duckdb_rows(QUERIES["q9"], dataset)
    got = pd.DataFrame(rows, columns=QUERIES["q9"].column_names)

    assert got["id"].is_unique
    assert set(got["id"]) == set(in_lifetime["id"])
    assert got["price"].tolist() == in_lifetime.groupby("id")["price"].max().loc[got["id"]].tolist()
    expected = winners(in_lifetime).set_index("id").loc[got["id"]]
    assert got["bid_date_time"].tolist() == expected["bid_date_time"].tolist()
    assert (got["auction"] == got["id"]).all()


def test_q4_averages_per_category_equal_a_pandas_recompute(
    dataset: data.Dataset, in_lifetime: pd.DataFrame
) -> None:
    rows = duckdb_rows(QUERIES["q4"], dataset)

    maxima = in_lifetime.groupby(["id", "category"])["price"].max()
    expected = maxima.groupby(level="category").mean()
    assert sorted(c for c, _ in rows) == sorted(expected.index)
    for category, avg in rows:
        assert math.isclose(avg, float(expected[category]), rel_tol=1e-12)


def test_q6_averages_each_winning_price_with_the_sellers_ten_before(
    dataset: data.Dataset, in_lifetime: pd.DataFrame
) -> None:
    rows = duckdb_rows(QUERIES["q6"], dataset)

    won = winners(in_lifetime).sort_values(["seller", "bid_date_time", "id"])
    won["avg"] = won.groupby("seller")["price"].transform(lambda p: p.rolling(11, min_periods=1).mean())
    assert won.groupby("seller").size().max() > 11  # the frame's bound cuts some sellers' rows
    assert len(rows) == len(won)
    assert rows_agree(rows, list(zip(won["seller"], won["avg"].astype(float), strict=True)))


def test_q6s_rows_before_a_watermark_are_the_over_querys_rows_of_bids_before_it(
    dataset: data.Dataset, in_lifetime: pd.DataFrame
) -> None:
    """A streamed run of krishiv's q6 has the rows of the winning bids the watermark passed."""
    won = winners(in_lifetime).sort_values(["seller", "bid_date_time", "id"])
    won["avg"] = won.groupby("seller")["price"].transform(lambda p: p.rolling(11, min_periods=1).mean())
    ms = won["bid_date_time"]  # epoch ms
    middle = int(ms.median())
    fired = duckdb_rows(QUERIES["q6"].fired(middle), dataset)

    before = won[ms < middle]
    assert 0 < len(fired) == len(before) < len(won)
    assert rows_agree(fired, list(zip(before["seller"], before["avg"].astype(float), strict=True)))


def test_q23_one_row_per_bid_and_each_auction_its_bidder_sells(dataset: data.Dataset) -> None:
    rows = duckdb_rows(QUERIES["q23"], dataset)
    got = pd.DataFrame(rows, columns=QUERIES["q23"].column_names)

    bids, persons, auctions = (frame(dataset, t) for t in ("bid", "person", "auction"))
    expected = bids.merge(persons, left_on="bidder", right_on="id").merge(
        auctions, left_on="bidder", right_on="seller"
    )
    assert len(got) == len(expected) > len(bids)  # sellers that bid often, with several auctions
    assert (got["person_id"] == got["bidder"]).all()
    assert (got["seller"] == got["bidder"]).all()


def test_a_retracted_and_an_upserted_update_leave_the_same_rows() -> None:
    retract: list[Change] = [("+", ("a", 1)), ("+", ("b", 5)), ("-", ("a", 1)), ("+", ("a", 2))]
    upsert: list[Change] = [("+", ("a", 1)), ("+", ("b", 5)), ("+", ("a", 2))]
    deleted: list[Change] = [*retract, ("-", ("b", 5))]

    assert sorted(final_rows(retract, (0,))) == sorted(final_rows(upsert, (0,))) == [("a", 2), ("b", 5)]
    assert final_rows(deleted, (0,)) == [("a", 2)]


def test_a_changelog_that_does_not_fit_its_key_is_refused() -> None:
    with pytest.raises(ValueError, match="has no row"):
        final_rows([("-", ("a", 1))], (0,))
    with pytest.raises(ValueError, match="insert-only"):
        final_rows([("+", ("a", 1)), ("-", ("a", 1))], ())
    assert final_rows([("+", ("a", 1)), ("+", ("a", 1))], ()) == [("a", 1), ("a", 1)]


def test_a_debezium_json_sink_is_read_per_writer_in_the_order_it_wrote(tmp_path: Path) -> None:
    query = QUERIES["q4"]

    def part(name: str, *records: dict[str, object]) -> None:
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in records))

    part("part-x-0-10", {"before": {"category": 10, "avg_final": 3.0}, "after": None, "op": "d"})
    part("part-x-0-2", {"before": None, "after": {"category": 10, "avg_final": 3.0}, "op": "c"})
    part("part-x-1-0", {"before": None, "after": {"category": 11, "avg_final": 4}, "op": "c"})
    part(".part-x-0-11.inprogress", {"before": None, "after": {"category": 12, "avg_final": 1.0}, "op": "c"})

    changes = list(read_changes(tmp_path, query))

    assert changes == [("+", (10, 3.0)), ("-", (10, 3.0)), ("+", (11, 4.0))]
    assert isinstance(changes[-1][1][1], float)
    assert final_rows(changes, query.key_index) == [(11, 4.0)]


def test_sink_timestamps_are_read_as_epoch_ms(tmp_path: Path) -> None:
    after = {c: None for c in QUERIES["q9"].column_names} | {"id": 1, "expires": "2024-01-01 00:00:01.5"}
    (tmp_path / "part-x-0-0").write_text(json.dumps({"before": None, "after": after, "op": "c"}) + "\n")

    [(kind, row)] = read_changes(tmp_path, QUERIES["q9"])

    assert kind == "+"
    assert row[QUERIES["q9"].column_names.index("expires")] == data.T0_MS + 1_500


def test_rows_agree_as_multisets_with_floats_to_a_relative_tolerance() -> None:
    assert rows_agree([(1, 1.0), (2, "x")], [(2, "x"), (1, 1.0 + 1e-12)])
    assert not rows_agree([(1, 1.0)], [(1, 1.0 + 1e-6)])
    assert not rows_agree([(1, 1.0), (1, 1.0)], [(1, 1.0), (2, 1.0)])
    assert not rows_agree([(1,)], [(1,), (1,)])


def test_q6s_tied_sellers_are_those_with_two_winning_bids_at_one_time(
    dataset: data.Dataset, in_lifetime: pd.DataFrame
) -> None:
    """krishiv orders ties in time by arrival, the reference by auction id: those sellers' rows are
    compared by count alone (:func:`untied`), every other seller's row by row."""
    won = winners(in_lifetime)
    tied = won[won.duplicated(["seller", "bid_date_time"], keep=False)]["seller"]
    untie = untied(QUERIES["q6"], dataset)
    rows = duckdb_rows(QUERIES["q6"], dataset)
    assert {r[0] for r in untie(rows) if r[1] is None} == set(tied)
    assert [r for r in untie(rows) if r[0] not in set(tied)] == [r for r in rows if r[0] not in set(tied)]
