"""Kept for imports of ``krishiv_py.testing.reference``: the module is :mod:`krishiv_py.model.reference`."""

from __future__ import annotations

from krishiv_py.model.reference import *  # noqa: F403
from krishiv_py.model.reference import __all__ as __all__
