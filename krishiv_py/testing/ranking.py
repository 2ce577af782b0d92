"""Kept for imports of ``krishiv_py.testing.ranking``: the module is :mod:`krishiv_py.model.ranking`."""

from __future__ import annotations

from krishiv_py.model.ranking import *  # noqa: F403
from krishiv_py.model.ranking import __all__ as __all__
