"""Downloadable datasets, for a user's full-scale runs. Fetched once into the cache (see
``download``) and verified by SHA-256 every time they are loaded.

    mnist, fashion-mnist   28x28 digits / clothing, 60,000 train / 10,000 test, 10 classes
    imdb                   movie-review sentiment, 25,000 train / 25,000 test, 2 classes, token ids
    tiny-shakespeare       character-level language modelling, 1,115,394 characters
    binarized-mnist        the standard fixed binarization of MNIST, 50,000 / 10,000 / 10,000
                           (DRAW, section 6.4)
    cnn-questions          the CNN questions of the DeepMind Q&A corpus, ~380,000 / 3,924 / 3,198
                           (the attentive reader, section 6.2)

Published SHA-256 sums and sizes are those recorded by tensorflow-datasets
(``tensorflow_datasets/url_checksums/{mnist,fashion_mnist,imdb_reviews,tiny_shakespeare,
binarized_mnist}.txt``); the CNN questions' SHA-256 is ParlAI's (``parlai/tasks/qacnn``).
The MSR Sentence Completion Challenge has no stable public download (its files are behind Kaggle
and personal drive links), so it is not provided; the character-level corpus stands in for
language modelling.
"""
from __future__ import annotations

import collections
import gzip
import io
import json
import re
import tarfile
from pathlib import Path

import numpy as np
import torch

from .._io import atomic_write_bytes
from .download import Resource, fetch
from .embedded import image_view
from .paper_tasks import LOSS_TARGETS
from .registry import Dataset, register_dataset

_MNIST_FILES = {   # file: (size, sha256)
    "train-images-idx3-ubyte.gz": (9912422, "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"),
    "train-labels-idx1-ubyte.gz": (28881, "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"),
    "t10k-images-idx3-ubyte.gz": (1648877, "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"),
    "t10k-labels-idx1-ubyte.gz": (4542, "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"),
}
_FASHION_FILES = {
    "train-images-idx3-ubyte.gz": (26421880, "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84"),
    "train-labels-idx1-ubyte.gz": (29515, "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845"),
    "t10k-images-idx3-ubyte.gz": (4422102, "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073"),
    "t10k-labels-idx1-ubyte.gz": (5148, "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5"),
}
# The fixed binarization of MNIST (Salakhutdinov & Murray 2008) as distributed by H. Larochelle:
# 50,000 / 10,000 / 10,000 images, one line of 784 space-separated 0/1 pixels per image. The set
# DRAW (Gregor et al. 2015) and the paper's section 6.4 report their bounds on. Sizes and hashes:
# tensorflow-datasets' url_checksums/binarized_mnist.txt.
_LAROCHELLE = "http://www.cs.toronto.edu/~larocheh/public/datasets/binarized_mnist/"
_BINARIZED_FILES = {
    "train": (78400000, "ad693b29f94c14277b095f5238ddefbbdaaae0939789dd2f4f0205278cee3e4d"),
    "valid": (15680000, "1de3d397c40fe8eeb33dafd4099a1f665ec01e96d9be234aaeeac8a34930e2e2"),
    "test": (15680000, "e6687bfea3f820c174f33b7865140b2a2dd2930ef786f35d45795fc193b5ab2c"),
}
# The CNN questions of the DeepMind Q&A corpus (Hermann et al. 2015), as packaged by K. Cho
# (cs.nyu.edu/~kcho/DMQA, a Google Drive file); SHA-256 as recorded by ParlAI's qacnn task (its
# size is not published: the hash is the check).
_CNN_DRIVE_ID = "0BwmD_VLjROrfTTljRDVZMFJnVWM"
_MIRRORS = {
    "mnist": ("https://storage.googleapis.com/cvdf-datasets/mnist/",
              "https://ossci-datasets.s3.amazonaws.com/mnist/"),
    "fashion-mnist": ("http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/",),
}


def _idx_resources(group: str, files: dict) -> dict[str, Resource]:
    return {name: Resource(group, name, tuple(m + name for m in _MIRRORS[group]), sha, size)
            for name, (size, sha) in files.items()}


RESOURCES: dict[str, list[Resource]] = {
    "mnist": list(_idx_resources("mnist", _MNIST_FILES).values()),
    "fashion-mnist": list(_idx_resources("fashion-mnist", _FASHION_FILES).values()),
    "imdb": [Resource("imdb", "aclImdb_v1.tar.gz",
                      ("http://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz",),
                      "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe",
                      84125825)],
    "tiny-shakespeare": [Resource(
        "tiny-shakespeare", "input.txt",
        ("https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt",),
        "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed", 1115394)],
    "binarized-mnist": [Resource("binarized-mnist", f"binarized_mnist_{split}.amat",
                                 (_LAROCHELLE + f"binarized_mnist_{split}.amat",), sha, size)
                        for split, (size, sha) in _BINARIZED_FILES.items()],
    "cnn-questions": [Resource(
        "cnn-questions", "cnn.tgz",
        (f"https://drive.usercontent.google.com/download?id={_CNN_DRIVE_ID}&export=download"
         f"&confirm=t",
         f"https://drive.google.com/uc?export=download&id={_CNN_DRIVE_ID}&confirm=t"),
        "9405beb90c9267e7769c86fa42720b7e479bcf38c64217c0d3f456ce8cd122ce", None)],
}


def fetch_all(name: str, root=None, progress: bool = True) -> list:
    """Download (or find in the cache) every file of dataset ``name``."""
    return [fetch(r, root, progress=progress) for r in RESOURCES[name]]


def read_idx(path) -> np.ndarray:
    """An IDX file (the MNIST format), gzipped: big-endian header, then uint8 data."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic = int.from_bytes(data[:4], "big")
    if magic >> 8 != 0x08:   # 0x08: unsigned byte
        raise ValueError(f"{path} is not an IDX file of unsigned bytes (magic {magic:#x}).")
    ndim = magic & 0xFF
    shape = tuple(int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim))
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(shape)


def _idx_dataset(group: str, view: str, permute: bool, permute_seed: int) -> Dataset:
    paths = {p.name: p for p in fetch_all(group)}
    x = read_idx(paths["train-images-idx3-ubyte.gz"]).reshape(-1, 784).astype(np.float32) / 255
    xt = read_idx(paths["t10k-images-idx3-ubyte.gz"]).reshape(-1, 784).astype(np.float32) / 255
    y = read_idx(paths["train-labels-idx1-ubyte.gz"]).astype(np.int64)
    yt = read_idx(paths["t10k-labels-idx1-ubyte.gz"]).astype(np.int64)
    return Dataset(name=group, task="classify", x_train=image_view(x, 28, view, permute, permute_seed),
                   y_train=torch.from_numpy(y), x_test=image_view(xt, 28, view, permute, permute_seed),
                   y_test=torch.from_numpy(yt), num_classes=10,
                   info={"source": RESOURCES[group][0].urls[0], "view": view, "permute": permute})


def _mnist(view: str = "flat", permute: bool = False, permute_seed: int = 0) -> Dataset:
    """MNIST (60,000 / 10,000), pixels in [0, 1]; views as for digits (flat 784, image 1x28x28,
    rows 28x28, pixels 784x1)."""
    return _idx_dataset("mnist", view, permute, permute_seed)


def _fashion(view: str = "flat", permute: bool = False, permute_seed: int = 0) -> Dataset:
    return _idx_dataset("fashion-mnist", view, permute, permute_seed)


register_dataset("mnist", description="MNIST 28x28 digits, 60k/10k (view=flat|image|rows|pixels)",
                 embedded=False)(_mnist)
register_dataset("fashion-mnist", description="Fashion-MNIST 28x28 clothing, 60k/10k",
                 embedded=False)(_fashion)

_TOKEN = re.compile(r"[a-z0-9']+")
PAD, UNK = 0, 1


def _imdb_texts(path) -> dict[str, list[tuple[str, int]]]:
    texts: dict[str, list[tuple[str, int]]] = {"train": [], "test": []}
    pattern = re.compile(r"aclImdb/(train|test)/(pos|neg)/[^/]+\.txt$")
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            m = pattern.match(member.name)
            if m and member.isfile():
                text = tar.extractfile(member).read().decode("utf-8", errors="replace")
                texts[m.group(1)].append((text, int(m.group(2) == "pos")))
    for split in texts:
        texts[split].sort()     # tar order is not a contract; make the loader's output one
    return texts


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("<br />", " "))


def _imdb(vocab_size: int = 20000, max_len: int = 400, split_seed: int = 0) -> Dataset:
    """IMDb reviews as token ids (N, max_len), 0 = padding, 1 = unknown word; the vocabulary is
    the ``vocab_size - 2`` most frequent training words. Reviews longer than ``max_len`` keep
    their first max_len tokens; ``lengths_*`` hold the true (clipped) lengths. Both splits are
    shuffled by ``split_seed``. The tokenized arrays are cached next to the archive."""
    if vocab_size < 3 or max_len < 1:
        raise ValueError(f"imdb needs vocab_size >= 3 and max_len >= 1, received "
                         f"vocab_size={vocab_size}, max_len={max_len}.")
    (archive,) = fetch_all("imdb")
    cached = archive.with_name(f"tokens-v{vocab_size}-l{max_len}-s{split_seed}.npz")
    if not cached.exists():
        texts = _imdb_texts(archive)
        counts = collections.Counter(t for text, _ in texts["train"] for t in _tokens(text))
        vocab = {w: i + 2 for i, (w, _) in enumerate(counts.most_common(vocab_size - 2))}
        arrays = {}
        for split, items in texts.items():
            order = np.random.default_rng(split_seed).permutation(len(items))
            ids = np.zeros((len(items), max_len), dtype=np.int64)
            lengths = np.zeros(len(items), dtype=np.int64)
            labels = np.zeros(len(items), dtype=np.int64)
            for row, k in enumerate(order):
                text, label = items[k]
                toks = [vocab.get(t, UNK) for t in _tokens(text)][:max_len] or [UNK]
                ids[row, :len(toks)], lengths[row], labels[row] = toks, len(toks), label
            arrays.update({f"x_{split}": ids, f"y_{split}": labels, f"len_{split}": lengths})
        arrays["vocab"] = np.array(json.dumps(sorted(vocab, key=vocab.get)))
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        atomic_write_bytes(cached, buf.getvalue())
    a = np.load(cached)
    t = {k: torch.from_numpy(a[k]) for k in a.files if k != "vocab"}
    return Dataset(name="imdb", task="classify", x_train=t["x_train"], y_train=t["y_train"],
                   x_test=t["x_test"], y_test=t["y_test"], num_classes=2, vocab_size=vocab_size,
                   lengths_train=t["len_train"], lengths_test=t["len_test"],
                   info={"source": RESOURCES["imdb"][0].urls[0], "max_len": max_len})


register_dataset("imdb", description="IMDb movie-review sentiment, 25k/25k, token ids + lengths",
                 embedded=False)(_imdb)


def _shakespeare(seq_len: int = 100, test_fraction: float = 0.1) -> Dataset:
    """Character-level language modelling: the text's first (1 - test_fraction) is the training
    part, the rest the test part; each is cut into non-overlapping windows of ``seq_len``
    characters. x: (N, seq_len) character ids; y: the next character at every step."""
    (path,) = fetch_all("tiny-shakespeare")
    text = path.read_text(encoding="utf-8")
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    ids = np.fromiter((lookup[c] for c in text), dtype=np.int64, count=len(text))
    cut = int(len(ids) * (1 - test_fraction))

    def windows(a):
        n = (len(a) - 1) // seq_len
        x = a[:n * seq_len].reshape(n, seq_len)
        y = a[1:n * seq_len + 1].reshape(n, seq_len)
        return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())
    x, y = windows(ids[:cut])
    xt, yt = windows(ids[cut:])
    return Dataset(name="tiny-shakespeare", task="classify", x_train=x, y_train=y, x_test=xt,
                   y_test=yt, num_classes=len(chars), vocab_size=len(chars),
                   info={"source": RESOURCES["tiny-shakespeare"][0].urls[0], "seq_len": seq_len,
                         "alphabet": "".join(chars)})


register_dataset("tiny-shakespeare", description="character-level LM on tiny-shakespeare (1.1M "
                 "chars), per-step next-character targets", embedded=False)(_shakespeare)


def read_amat(path, width: int = 784) -> np.ndarray:
    """A binarized-MNIST ``.amat`` file: one image per line, ``width`` 0/1 values separated by
    spaces. Returns (N, width) uint8."""
    raw = np.frombuffer(Path(path).read_bytes(), np.uint8)
    digits = raw[(raw == ord("0")) | (raw == ord("1"))]
    lines = int(np.count_nonzero(raw == ord("\n")))
    if digits.size % width or digits.size // width != lines or \
            np.count_nonzero(~np.isin(raw, np.frombuffer(b"01 \r\n", np.uint8))):
        raise ValueError(f"{path} is not a binarized-MNIST .amat file: expected lines of "
                         f"{width} space-separated 0/1 values, received {digits.size} digits on "
                         f"{lines} lines.")
    return (digits == ord("1")).astype(np.uint8).reshape(-1, width)


def _binarized_mnist(with_valid: bool = False) -> Dataset:
    """The standard binarized MNIST (50,000 train / 10,000 validation / 10,000 test, 784 pixels
    in {0, 1}), for density models: targets zeros, task "regress" as ``digits-binary``.
    ``with_valid``: train on train + validation (60,000)."""
    paths = {p.name: p for p in fetch_all("binarized-mnist")}
    part = {s: read_amat(paths[f"binarized_mnist_{s}.amat"]) for s in ("train", "valid", "test")}
    train = np.concatenate([part["train"], part["valid"]]) if with_valid else part["train"]
    x, xt = (torch.from_numpy(a.astype(np.float32)) for a in (train, part["test"]))
    return Dataset("binarized-mnist", "regress", x, torch.zeros(len(x)), xt,
                   torch.zeros(len(xt)), tolerance=float("inf"),
                   info={"source": RESOURCES["binarized-mnist"][0].urls[0], "pixels": 784,
                         "with_valid": with_valid, "targets": LOSS_TARGETS})


register_dataset("binarized-mnist", description="MNIST 28x28 with the standard fixed "
                 "binarization (Salakhutdinov & Murray 2008), 50k/10k/10k: DRAW, section 6.4",
                 embedded=False)(_binarized_mnist)


def _cnn_questions(max_passage: int = 2000, max_query: int = 50, vocab_size: int = 50_000,
                   max_train: int | None = None, max_test: int | None = None,
                   test_split: str = "validation") -> Dataset:
    """The CNN questions (DeepMind Q&A) in the attentive reader's layout (see
    ``layernorm_paper.data.cnn_questions``): x (N, max_passage + max_query) token ids, y the answer's
    entity id. ``test_split``: "validation" (the curves of the paper's Figure 2) or "test".
    ``max_train`` / ``max_test``: the first questions by file name. Parsed once, cached next to
    the archive."""
    from .cnn_questions import read_questions
    if test_split not in ("validation", "test"):
        raise ValueError(f"cnn-questions test_split must be 'validation' or 'test', received "
                         f"{test_split!r}.")
    if min(max_passage, max_query, vocab_size) < 1:
        raise ValueError(f"cnn-questions needs max_passage, max_query, vocab_size >= 1, received "
                         f"{max_passage}, {max_query}, {vocab_size}.")
    (archive,) = fetch_all("cnn-questions")
    cached = archive.with_name(f"questions-p{max_passage}-q{max_query}-v{vocab_size}-"
                               f"n{max_train}-{test_split}{max_test}.npz")
    if not cached.exists():
        arrays = read_questions(archive, splits=("training", test_split),
                                max_per_split={"training": max_train, test_split: max_test},
                                max_passage=max_passage, max_query=max_query,
                                vocab_size=vocab_size)
        buf = io.BytesIO()
        np.savez_compressed(buf, **arrays)
        atomic_write_bytes(cached, buf.getvalue())
    a = np.load(cached)
    t = torch.from_numpy
    return Dataset("cnn-questions", "classify", t(a["x_training"]), t(a["y_training"]),
                   t(a[f"x_{test_split}"]), t(a[f"y_{test_split}"]),
                   num_classes=int(a["n_entities"]), vocab_size=int(a["vocab_size"]),
                   info={"source": RESOURCES["cnn-questions"][0].urls[0],
                         "passage_len": max_passage, "query_len": max_query,
                         "n_entities": int(a["n_entities"]), "words": int(a["words"]),
                         "test_split": test_split,
                         "dropped_train": int(a["dropped_training"]),
                         "dropped_test": int(a[f"dropped_{test_split}"])})


register_dataset("cnn-questions", description="CNN questions of the DeepMind Q&A corpus "
                 "(Hermann et al. 2015), anonymised entities: the attentive reader, section 6.2",
                 embedded=False)(_cnn_questions)


def cache_summary() -> list[dict]:
    """One row per downloadable file: dataset, file, size, whether it is in the cache."""
    from .download import is_cached
    return [{"dataset": name, "file": r.filename, "MB": r.size / 1e6 if r.size else "unpublished",
             "cached": is_cached(r), "path": str(r.path())}
            for name, rs in RESOURCES.items() for r in rs]
