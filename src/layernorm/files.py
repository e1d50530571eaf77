"""Atomic writes: a reader, or a process that resumes after a kill, never sees a half-written
file. The one writer of the library's cached files (the compiled kernels) and of the
reproduction's run directories (public: the reproduction imports it from here)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write to a temporary file in the same directory, fsync, then rename over ``path``.

    The file is readable by everyone (0644, as a plain ``open`` under the usual umask gives;
    ``mkstemp`` alone would leave it 0600, and a shared report would show broken images)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))
