"""Deprecated: the Spark servers for trying a cluster and for tests moved to :mod:`krishiv_py.devtools`.

Import them from there instead::

    from krishiv_py.devtools import ConnectServer, LocalCluster, connect_client

This module re-exports the names it had and warns (``DeprecationWarning``)
when imported; it will be removed in a later release.
"""

from __future__ import annotations

import warnings

from krishiv_py import devtools as _devtools
from krishiv_py.devtools import *  # noqa: F403 - the names it had, from their new home

# Constants it had besides __all__ (the redundant aliases mark them as re-exported).
from krishiv_py.devtools.cluster import MASTER_CLASS as MASTER_CLASS
from krishiv_py.devtools.cluster import WORKER_CLASS as WORKER_CLASS
from krishiv_py.devtools.connect import CONNECT_CLASS as CONNECT_CLASS
from krishiv_py.devtools.servers import DEFAULT_TIMEOUT_S as DEFAULT_TIMEOUT_S
from krishiv_py.devtools.servers import HOST as HOST

__all__ = list(_devtools.__all__)

warnings.warn(
    "krishiv_py.runtime.cluster has moved to krishiv_py.devtools; import LocalCluster, ConnectServer, "
    "connect_client and the rest from krishiv_py.devtools",
    DeprecationWarning,
    stacklevel=2,
)
