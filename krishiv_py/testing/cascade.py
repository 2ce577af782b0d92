"""Kept for imports of ``krishiv_py.testing.cascade``: the module is :mod:`krishiv_py.model.cascade`."""

from __future__ import annotations

from krishiv_py.model.cascade import *  # noqa: F403
from krishiv_py.model.cascade import __all__ as __all__
