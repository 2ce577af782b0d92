"""Key buckets (Spark's state store as the carrier) and key groups (krishiv's own files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import krishiv_py as kp
from krishiv_py.checkpoint import CheckpointLayout
from krishiv_py.errors import JobError
from krishiv_py.planner.spark.recipe import SelectExprs, SparkRecipe
from krishiv_py.planner.spark.stateful import BUCKETS, with_buckets
from krishiv_py.runtime.launch import BUCKETS_FILE, operator_buckets
from krishiv_py.testing.steps import _placeholder


def _recipe(keyed: bool = True) -> SparkRecipe:
    stream = _placeholder("k string, t bigint, v bigint").watermark("t", 5)
    windowed = stream.key_by("k").tumbling_window(10) if keyed else stream.tumbling_window(10)
    return windowed.allowed_lateness(5).agg(kp.count(kp.col("*"))).lower(lowering="stateful")


def _bucket_expr(recipe: SparkRecipe) -> str:
    node = recipe.stateful
    assert node is not None and isinstance(node.child, SelectExprs)
    return node.child.exprs[0]


def test_with_buckets_rewrites_the_bucket_of_each_row_and_the_operator() -> None:
    recipe = _recipe()
    assert recipe.stateful is not None and recipe.stateful.operator.buckets == BUCKETS == 16
    assert _bucket_expr(recipe) == "CAST(pmod(hash(`k`), 16) AS INT) AS `__kp_bucket`"
    four = with_buckets(recipe, 4)
    assert four.stateful is not None and four.stateful.operator.buckets == 4
    assert _bucket_expr(four) == "CAST(pmod(hash(`k`), 4) AS INT) AS `__kp_bucket`"
    # Everything else about the rows and the operator is unchanged.
    assert four.stateful.child.exprs[1:] == recipe.stateful.child.exprs[1:]  # type: ignore[union-attr]
    assert four.stateful.operator.kernel == recipe.stateful.operator.kernel
    assert with_buckets(recipe, 16) is recipe
    with pytest.raises(ValueError, match="at least 1"):
        with_buckets(recipe, 0)


def test_without_keys_every_row_is_in_bucket_zero() -> None:
    assert _bucket_expr(with_buckets(_recipe(keyed=False), 4)) == "0 AS `__kp_bucket`"


def test_a_new_job_takes_two_buckets_per_shuffle_partition_and_records_them(tmp_path: Path) -> None:
    assert operator_buckets(CheckpointLayout(str(tmp_path / "a")), 2) == 4
    assert (tmp_path / "a" / BUCKETS_FILE).read_text().strip() == "4"
    assert operator_buckets(CheckpointLayout(str(tmp_path / "b")), 1) == 2  # at least two
    assert operator_buckets(CheckpointLayout(str(tmp_path / "c")), 200) == 16  # at most the planner's 16


def test_a_restarted_job_keeps_its_number_whatever_the_session_has(tmp_path: Path) -> None:
    checkpoint = str(tmp_path / "job")
    assert operator_buckets(CheckpointLayout(checkpoint), 2) == 4
    assert operator_buckets(CheckpointLayout(checkpoint), 8) == 4


def test_a_checkpoint_from_before_the_record_keeps_sixteen(tmp_path: Path) -> None:
    checkpoint = tmp_path / "old"
    (checkpoint / "offsets").mkdir(parents=True)
    (checkpoint / "offsets" / "0").write_text("v1\n")
    assert operator_buckets(CheckpointLayout(str(checkpoint)), 2) == 16
    assert (checkpoint / BUCKETS_FILE).read_text().strip() == "16"


def test_a_checkpoint_on_a_shared_file_system_keeps_sixteen(tmp_path: Path) -> None:
    assert operator_buckets(CheckpointLayout("hdfs://namenode/checkpoints/job"), 2) == 16
    assert not os.listdir(tmp_path)


@pytest.mark.parametrize("text", ["", "four", "0", "-3"])
def test_a_damaged_record_is_an_error_naming_the_file(tmp_path: Path, text: str) -> None:
    (tmp_path / BUCKETS_FILE).write_text(text)
    with pytest.raises(JobError, match=f"{BUCKETS_FILE} holds .*not a number of key buckets"):
        operator_buckets(CheckpointLayout(str(tmp_path)), 2)
    assert (tmp_path / BUCKETS_FILE).read_text() == text  # left as it was


def test_with_key_groups_sends_each_row_to_the_task_that_owns_its_key_group() -> None:
    from krishiv_py.planner.spark.stateful import with_key_groups

    recipe = with_key_groups(_recipe(), 128, 5, since=7)
    node = recipe.stateful
    assert node is not None
    assert (node.operator.buckets, node.operator.key_groups, node.operator.layout_since) == (5, 128, 7)
    assert _bucket_expr(recipe) == (
        "CAST(CAST(pmod(hash(`k`), 128) AS BIGINT) * 5 DIV 128 AS INT) AS `__kp_bucket`"
    )
    assert _bucket_expr(with_key_groups(_recipe(keyed=False), 128, 5)) == "0 AS `__kp_bucket`"
    assert node.operator.layout_dirs == {"0-26", "26-52", "52-77", "77-103", "103-128"}
    with pytest.raises(ValueError, match="between 1 and the 128 key groups"):
        with_key_groups(_recipe(), 128, 129)
