"""Check the node's own configuration that ``serve`` depends on, before any blob is fetched.

A layout root or local tier this node may not write (a read-only mount, permissions) and an
address vLLM cannot bind (a port in use, a host that is not this node's) are settings an operator
fixes, not faults to retry: each is one line naming the setting and the fix (exit 2), found in a
second instead of after the fetch, or inside vLLM tens of seconds later (issue 20). A full disk
stays :class:`~neuronbuild.errors.NoRoom` (exit 3): it frees up.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
from pathlib import Path

from neuronbuild.errors import NoRoom, UserError
from neuronbuild.folders import check_writable_folder
from neuronbuild.store.cas import Store

NOT_WRITABLE_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})
"""A write refused by the node's configuration (a read-only mount, permissions, an ACL)."""

DEFAULT_PORT = 8000
"""vLLM's server port when ``--port`` is not given (``FrontendArgs.port``, vLLM 0.32)."""


class NodeConfigInvalid(UserError):
    """A setting of this node ``serve`` cannot run with (a folder it may not write, an address
    vLLM cannot bind): exit code 2, the message names the setting and its fix."""


def check_node_folder(folder: Path, what: str, fix: str) -> None:
    """Raise unless this process may write in ``folder`` (or create it), probed without leaving
    anything (:func:`~neuronbuild.folders.check_writable_folder`). ``what`` names the folder's
    role (``layout root``), ``fix`` the setting to change (``pass --vllm-cache-root ...``).

    Raises:
        NodeConfigInvalid: a read-only mount or permissions refused the probe, or a file stands
            in the way. NoRoom: the disk is full or over quota (exit 3). OSError: any other
            refusal of the probe.
    """
    try:
        check_writable_folder(folder)
    except UserError as exc:  # FolderInTheWay
        raise NodeConfigInvalid(f"{what} {folder}: {exc}; {fix}") from None
    except OSError as exc:
        if exc.errno in NOT_WRITABLE_ERRNOS:
            raise NodeConfigInvalid(
                f"{what} {folder}: cannot write in {exc.filename} ({exc.strerror}); {fix}"
            ) from None
        room = NoRoom.of(exc, exc.filename or folder)
        if room is not None:
            raise room.as_role(what) from None
        raise


LOCAL_TIER_FIX = "pass --local-cache with a folder this node may write"
"""The fix of a local tier this node may not write (``serve``, ``pull``)."""


def check_local_tier(local: str | Store) -> None:
    """Raise unless this node may write the local tier ``local``: a folder store, or the folder
    one would be created in (``--local-cache``); its ``tmp/`` is probed, where every write of a
    fetch starts (:func:`check_node_folder`). A store that is not a folder is not checked.

    Raises:
        NodeConfigInvalid: the tier is read-only or not this user's, naming ``--local-cache``.
        NoRoom: its disk is full or over quota (exit 3).
    """
    if isinstance(local, Store):
        if local.is_folder:
            fix = f"{LOCAL_TIER_FIX} (now {local.url})"
            check_node_folder(Path(local.layout.tmp("")), "local tier", fix)
    else:
        check_node_folder(Path(local), "local tier", LOCAL_TIER_FIX)


def _last_value(args: list[str], option: str) -> str | None:
    """The value of the last ``option`` in ``args`` (``--port 9`` or ``--port=9``), as argparse
    keeps the last; None when absent."""
    found = None
    for i, token in enumerate(args):
        if token == option and i + 1 < len(args):
            found = args[i + 1]
        elif token.startswith(option + "="):
            found = token.split("=", 1)[1]
    return found


def listen_address(args: list[str]) -> tuple[str, int] | None:
    """The ``(host, port)`` vLLM's server binds with these server options, as its
    ``setup_server`` does: ``(args.host or "", args.port)``, the port 8000 unless given; None
    with ``--uds`` (a Unix socket instead).

    Raises:
        NodeConfigInvalid: ``--port`` is not a port number (0 to 65535).
    """
    if _last_value(args, "--uds") is not None:
        return None
    host = _last_value(args, "--host") or ""
    text = _last_value(args, "--port")
    try:
        port = DEFAULT_PORT if text is None else int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise NodeConfigInvalid(f"--port {text}: not a port number; pass --port with 1 to 65535")
    return host, port


def check_listen(args: list[str]) -> None:
    """Raise unless vLLM's server could bind the address ``args`` give it (:func:`listen_address`)
    now: bind a socket there briefly as vLLM's ``create_server_socket`` does (IPv6 for an IPv6
    literal, ``SO_REUSEADDR``, so a port held only by closing connections passes as it does for
    vLLM), then close it.

    Raises:
        NodeConfigInvalid: the port is in use, or the host is no address of this node (or does
            not resolve), naming the option and the fix (and, for vLLM's default port, that it
            is the default: ``port 8000 (vLLM's default; pass --port)``).
    """
    address = listen_address(args)
    if address is None:
        return
    host, port = address
    option = f"--port {port}"  # port 8000 when not given, which the operator may not know
    if _last_value(args, "--port") is None:
        option = f"port {port} (vLLM's default; pass --port)"
    try:
        family = socket.AF_INET6 if ipaddress.ip_address(host).version == 6 else socket.AF_INET
    except ValueError:  # a host name, or "" for every interface
        family = socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(address)
        except OSError as exc:
            where = f"{host or '0.0.0.0'}:{port}"
            why = exc.strerror or str(exc)
            if exc.errno == errno.EADDRINUSE:
                raise NodeConfigInvalid(
                    f"{option} is in use on this node ({where}); pass --port with a free port, "
                    "or stop the server holding it"
                ) from None
            if exc.errno == errno.EACCES:
                raise NodeConfigInvalid(
                    f"{option}: this user may not listen on {where} ({why}); pass --port with "
                    "a port above 1023"
                ) from None
            raise NodeConfigInvalid(
                f"--host {host}: vLLM cannot listen on {where} ({why}); pass --host with an "
                "address of this node, or 0.0.0.0 for all of them"
            ) from None
