"""Standard output and error watched at the CLI edge, so that a stream that cannot be written
(a reader that closed the pipe, a full or failing device) is told apart from the command's own
errors: its failure is raised as :class:`OutputLost`, never as the ``OSError`` a store or a local
path raises."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

from neuronbuild.ui.redact import redact


class OutputLost(BaseException):
    """Writing ``stream`` (``"stdout"`` or ``"stderr"``) failed with ``error``.

    A ``BaseException``, so that no ``except Exception`` of a command turns it into that
    command's failure; the CLI edge (:func:`neuronbuild.ui.console.run`) ends the run.
    """

    def __init__(self, stream: str, error: OSError) -> None:
        super().__init__(f"cannot write standard {stream[3:]}put: {error.strerror or error}")
        self.stream, self.error = stream, error

    @property
    def reader_gone(self) -> bool:
        """The reader of a pipe closed it (EPIPE): what SIGPIPE would have ended the command for."""
        return self.error.errno == errno.EPIPE


class WatchedStream:
    """``stream`` with its ``write`` and ``flush`` raising :class:`OutputLost` instead of
    ``OSError``, and every URL's credentials cut from what is written
    (:func:`~neuronbuild.ui.redact.redact`); every other attribute is the stream's own (click
    reads ``encoding``, ``isatty``)."""

    def __init__(self, stream: TextIO, name: str) -> None:
        self._stream, self._label = stream, name

    def write(self, text: str) -> int:
        try:
            self._stream.write(redact(text))
            return len(text)
        except OSError as exc:
            raise OutputLost(self._label, exc) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError as exc:
            raise OutputLost(self._label, exc) from None

    @property
    def buffer(self) -> _RedactedBytes:
        """The binary stream under it, redacted too: click writes there when the text stream's
        encoding is ASCII (``LC_ALL=C``)."""
        return _RedactedBytes(self._stream.buffer, self._label)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _RedactedBytes:
    """A binary stream whose writes are redacted (as UTF-8, undecodable bytes kept) and raise
    :class:`OutputLost` instead of ``OSError``."""

    def __init__(self, raw: Any, name: str) -> None:
        self._raw, self._label = raw, name

    def write(self, data: bytes) -> int:
        text = bytes(data).decode("utf-8", "surrogateescape")
        try:
            self._raw.write(redact(text).encode("utf-8", "surrogateescape"))
        except OSError as exc:
            raise OutputLost(self._label, exc) from None
        return len(data)

    def flush(self) -> None:
        try:
            self._raw.flush()
        except OSError as exc:
            raise OutputLost(self._label, exc) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


@contextlib.contextmanager
def watched() -> Iterator[None]:
    """While active, ``sys.stdout`` and ``sys.stderr`` are :class:`WatchedStream` s; the
    streams they wrap are put back after."""
    saved = sys.stdout, sys.stderr
    sys.stdout = WatchedStream(sys.stdout, "stdout")
    sys.stderr = WatchedStream(sys.stderr, "stderr")
    try:
        yield
    finally:
        sys.stdout, sys.stderr = saved


def silence(stream: str) -> None:
    """Point the file descriptor of ``sys.<stream>`` at ``/dev/null``, so that nothing more
    written to it (the interpreter's own flush at exit included) fails again; a stream without
    a descriptor (a test's ``StringIO``) is left as it is."""
    try:
        fd = getattr(sys, stream).fileno()
    except (OSError, ValueError, AttributeError):
        return
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, fd)
    os.close(null)
