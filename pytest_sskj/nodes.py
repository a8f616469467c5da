"""The one locality rule: which node names mean "this machine", and the host a URL uses for a node.

Every decision "is this node local?" (the local launcher's refusal, the server pool's and the router's
URLs, the GPU pre-launch's lease-or-preflight choice, the settings' check of ``--nodes`` against
``--launcher``) asks :func:`is_local_node`; every base URL of a node is :func:`node_url`.
"""

from __future__ import annotations

import socket
from collections.abc import Callable

__all__ = ["LOCAL_NODE_NAMES", "LOOPBACK", "is_local_node", "node_url", "url_host"]

LOCAL_NODE_NAMES: frozenset[str] = frozenset({"local", "localhost", "127.0.0.1", "::1"})
"""Names that always mean this machine (besides its own host name)."""

LOOPBACK = "127.0.0.1"
"""The host of a local node's URL (servers bind IPv4 loopback)."""


def is_local_node(node: str) -> bool:
    """Whether ``node`` is this machine: one of :data:`LOCAL_NODE_NAMES` or this machine's host name."""
    return node in LOCAL_NODE_NAMES or node == socket.gethostname()


def url_host(node: str, resolve: Callable[[str], str] | None = None) -> str:
    """The host part of a URL for ``node``: :data:`LOOPBACK` when it is local, else ``resolve(node)``
    (the launcher's address, e.g. ssh ``HostName``) or the name itself."""
    if is_local_node(node):
        return LOOPBACK
    return resolve(node) if resolve is not None else node


def node_url(node: str, port: int, resolve: Callable[[str], str] | None = None) -> str:
    """``http://host:port`` for ``node`` (an IPv6 address in brackets)."""
    host = url_host(node, resolve)
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"
