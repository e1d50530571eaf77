"""Verified, atomic, resumable downloads into a cache directory.

    path = fetch(Resource("mnist", "train-images-idx3-ubyte.gz", urls=[...], sha256="...",
                          size=9912422))

* Cache: ``$LAYERNORM_DATA`` if set, else ``$XDG_CACHE_HOME/layernorm`` (``~/.cache/layernorm``);
  a resource lives at ``<cache>/<resource.group>/<resource.filename>``.
* A file at that path is only ever created by renaming a fully downloaded and verified temporary
  file, so an interrupted or corrupt download never leaves a file that looks valid. A file already
  there is verified (size + SHA-256) and used without touching the network.
* Offline: ``OfflineError`` names every URL tried and the exact path where the file may be placed
  by hand. Corrupt: the next mirror is tried; if none sends the right file, ``ChecksumError``
  naming each, nothing cached.
* Resources without a published SHA-256 (``sha256=None``) are verified by size when known and by
  the hash recorded at their first download (``<file>.sha256``), so later corruption is caught.
"""
from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

CHUNK = 1 << 20


class DownloadError(RuntimeError):
    """A dataset file could not be obtained."""


class OfflineError(DownloadError):
    """No URL of the resource could be reached."""


class ChecksumError(DownloadError):
    """A file's size or SHA-256 is not the published one."""


@dataclass(frozen=True)
class Resource:
    group: str                      # folder in the cache (the dataset's name)
    filename: str
    urls: tuple[str, ...]           # mirrors, tried in order
    sha256: str | None = None       # published hash (source named where the resource is defined)
    size: int | None = None         # bytes

    def path(self, root: str | os.PathLike | None = None) -> Path:
        return Path(root if root is not None else cache_dir()) / self.group / self.filename


def cache_dir() -> Path:
    """``$LAYERNORM_DATA``, else ``$XDG_CACHE_HOME/layernorm``, else ``~/.cache/layernorm``."""
    if os.environ.get("LAYERNORM_DATA"):
        return Path(os.environ["LAYERNORM_DATA"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "layernorm"


def sha256_of(path: str | os.PathLike) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _expected_sha(resource: Resource, path: Path) -> str | None:
    if resource.sha256:
        return resource.sha256
    recorded = path.with_name(path.name + ".sha256")
    return recorded.read_text().strip() if recorded.exists() else None


def verify(resource: Resource, path: str | os.PathLike) -> None:
    """Raise ChecksumError unless ``path`` has the resource's size and SHA-256."""
    path = Path(path)
    size = path.stat().st_size
    if resource.size is not None and size != resource.size:
        raise ChecksumError(f"{path} has {size} bytes, expected {resource.size} "
                            f"({resource.urls[0]}).")
    expected = _expected_sha(resource, path)
    if expected is not None:
        got = sha256_of(path)
        if got != expected:
            raise ChecksumError(f"{path} has SHA-256 {got}, expected {expected} "
                                f"({resource.urls[0]}).")


def is_cached(resource: Resource, root: str | os.PathLike | None = None) -> bool:
    path = resource.path(root)
    if not path.exists():
        return False
    try:
        verify(resource, path)
    except ChecksumError:
        return False
    return True


def fetch(resource: Resource, root: str | os.PathLike | None = None, *, progress: bool = True,
          timeout: float = 30.0) -> Path:
    """The local path of ``resource``, downloading it (verified, atomically) if needed."""
    path = resource.path(root)
    if path.exists():
        try:
            verify(resource, path)
        except ChecksumError as err:
            raise ChecksumError(f"the cached file is damaged: {err} It was not written by this "
                                f"downloader (which only renames verified files into place). "
                                f"Delete {path} and run again to download it.") from err
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    failures, corrupt = [], []
    for url in resource.urls:
        try:
            _download(url, resource, path, progress=progress, timeout=timeout)
            return path
        except ChecksumError as err:    # e.g. a mirror's HTML page instead of the file
            corrupt.append(err)
        except (urllib.error.URLError, OSError) as err:   # refused, DNS, timeout, HTTP 404...
            failures.append(f"{url} ({getattr(err, 'reason', None) or err})")
    if corrupt:        # a server answered, with the wrong bytes: that, not "offline", is the news
        others = "".join(f"\n  also tried: {f}" for f in failures)
        raise ChecksumError("\n".join(str(e) for e in corrupt) + others)
    tried = "\n  ".join(failures)
    raise OfflineError(f"could not download {resource.filename} for dataset {resource.group!r}; "
                       f"tried:\n  {tried}\nIf this machine is offline, download the file "
                       f"elsewhere from {resource.urls[0]} and place it at exactly\n  {path}\n"
                       f"(set LAYERNORM_DATA to use another cache folder). It is verified "
                       f"before use" + (f" (SHA-256 {resource.sha256})." if resource.sha256
                                        else "."))


def partial_path(path: Path) -> Path:
    """Where the download of ``path`` accumulates until it is verified: ``.<name>.part``."""
    return path.with_name(f".{path.name}.part")


def _download(url: str, resource: Resource, path: Path, *, progress: bool,
              timeout: float) -> None:
    """Download ``url`` into ``partial_path(path)``, verify it, rename it to ``path``.

    An interrupted download (a kill, a dropped connection) leaves its ``.part`` file, and the next
    call resumes it with an HTTP Range request; a server that ignores the range sends the whole
    file, which replaces the part. The whole file is verified after, and a resumed file that fails
    the check is downloaded once more from the start. Several processes fetching the same file take
    turns on a lock on the ``.part`` file, so they never write it at the same time.
    """
    try:
        import fcntl
    except ImportError:      # not POSIX: no lock between processes, the rest works the same
        fcntl = None
    part = partial_path(path)
    for old in path.parent.glob(f".{path.name}.*.part"):   # random names of older versions
        old.unlink(missing_ok=True)
    while True:
        f = open(part, "ab")
        if fcntl is not None:
            fcntl.flock(f, fcntl.LOCK_EX)      # waits while another process downloads it
        try:
            st = os.fstat(f.fileno())
            if not part.exists() or os.stat(part).st_ino != st.st_ino:
                continue                       # that process finished and renamed it: look again
            if path.exists():
                verify(resource, path)
                return
            resumed = st.st_size > 0
            _fill(url, resource, part, f, progress=progress, timeout=timeout)
            try:
                _check_download(url, resource, part, path)
            except ChecksumError:
                part.unlink(missing_ok=True)
                if not resumed:
                    raise
                continue                       # the kept part was bad: once more from the start
            os.replace(part, path)
            return
        finally:
            f.close()


def _fill(url: str, resource: Resource, part: Path, f, *, progress: bool, timeout: float) -> None:
    """Append the rest of ``url`` to the open ``.part`` file ``f`` (a Range request from its
    size)."""
    from tqdm import tqdm
    start = os.fstat(f.fileno()).st_size
    if resource.size is not None and start >= resource.size:
        if start > resource.size:
            f.truncate(0)
            start = 0
        else:
            return                             # complete already; verified by the caller
    headers = {"User-Agent": "layernorm"}
    if start:
        headers["Range"] = f"bytes={start}-"
    try:
        response = urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                          timeout=timeout)
    except urllib.error.HTTPError as err:
        if err.code != 416 or not start:       # 416: the range is past what the server has
            raise
        f.truncate(0)
        return _fill(url, resource, part, f, progress=progress, timeout=timeout)
    with response:
        if start and (response.status != 206 or not response.headers.get(
                "Content-Range", "").startswith(f"bytes {start}-")):
            f.truncate(0)                      # the server sent the whole file: start over
            start = 0
        length = int(response.headers.get("Content-Length") or 0)
        total = resource.size or (start + length if length else None)
        with tqdm(total=total, initial=start, unit="B", unit_scale=True,
                  desc=f"download {resource.filename}", disable=not progress,
                  leave=False) as bar:
            while chunk := response.read(CHUNK):
                f.write(chunk)
                bar.update(len(chunk))
        f.flush()
        os.fsync(f.fileno())


def _check_download(url: str, resource: Resource, part: Path, path: Path) -> None:
    size, digest = part.stat().st_size, sha256_of(part)
    if resource.size is not None and size != resource.size:
        raise ChecksumError(f"download of {url} has {size} bytes, expected {resource.size}; "
                            f"nothing was cached. The server sent a different or truncated "
                            f"file: try again later, or place the right file at {path}.")
    if resource.sha256 is not None and digest != resource.sha256:
        raise ChecksumError(f"download of {url} has SHA-256 {digest}, expected "
                            f"{resource.sha256}; nothing was cached. The server sent a "
                            f"different or corrupt file: try again later, or place the right "
                            f"file at {path}.")
    if resource.sha256 is None:   # record the first download's hash, verify it later
        from .._io import atomic_write_text
        atomic_write_text(path.with_name(path.name + ".sha256"), digest + "\n")
