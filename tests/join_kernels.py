"""The kernel tests' join: left rows (``a``) and right rows (``b``) by a string key ``k``."""

from __future__ import annotations

from typing import Any, cast

import pyarrow as pa

from krishiv_py.stateful.joins import JoinKernel, JoinSpec


def join_kernel(kind: str = "interval", how: str = "inner", **more: Any) -> JoinKernel:
    """A join kernel of ``kind`` and ``how`` (``more``: the rest of :class:`JoinSpec`)."""
    return JoinKernel(
        JoinSpec(
            kind=cast(Any, kind),
            how=how,
            keys=("k",),
            left=("a",),
            right=("b",),
            key_types=(pa.string(),),
            left_types=(pa.int64(),),
            right_types=(pa.int64(),),
            **more,
        )
    )
