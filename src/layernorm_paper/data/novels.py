"""Ten 19th-century novels (Project Gutenberg texts), downloaded: the text the MSR Sentence
Completion Challenge's language models train on is of this kind (Zweig & Burges 2011: 19th-century
Gutenberg novels; its questions come from Sherlock Holmes novels, which no source reachable here
holds).

    novels   (N, seq_len) character ids -> the next character at every step; the training part is
             the novels not held out, the test part the held-out ones

Source (``sources``: the Debian packages of three R libraries, read with the pure-Python ``rdata``
package; nothing is installed): janeaustenr (Emma, Mansfield Park, Northanger Abbey, Persuasion,
Pride and Prejudice, Sense and Sensibility), tokenizers (Moby Dick, Gutenberg's header and
licence removed here) and tidytext's ``books.rda`` (Great Expectations, Twenty Thousand Leagues
under the Sea, The War of the Worlds; its Pride and Prejudice, the same book as janeaustenr's, is
left out). Each novel is its lines joined by newlines (Moby Dick's line ends made ``\\n``).

Held out by default: Persuasion and The War of the Worlds (``TEST_TITLES``): one author the
model also reads, one it does not. Characters seen fewer than ``min_count`` times in the
training text share the "unknown" id 0. Training windows are shuffled (a fixed generator), so
``limit_train`` keeps a sample of every novel; test windows stay in text order. The 5-way
sentence-completion test of the held-out novels is ``completion.novels_completion_test``.
"""
from __future__ import annotations

import functools
import hashlib
import json

import numpy as np
import torch

from .registry import Dataset, register_dataset

AUSTEN = {"emma": "Emma", "mansfieldpark": "Mansfield Park",
          "northangerabbey": "Northanger Abbey", "persuasion": "Persuasion",
          "prideprejudice": "Pride and Prejudice", "sensesensibility": "Sense and Sensibility"}
TIDYTEXT = {36: "The War of the Worlds", 164: "Twenty Thousand Leagues under the Sea",
            1400: "Great Expectations"}          # Gutenberg ids kept from books.rda
TITLES = (*AUSTEN.values(), "Moby Dick", *TIDYTEXT.values())
TEST_TITLES = ("Persuasion", "The War of the Worlds")
MIN_CHARS = 100_000     # each novel read is at least this long (the shortest has 339,244)


def _gutenberg_body(text: str) -> str:
    """The text between Gutenberg's ``*** START OF ...`` and ``*** END OF ...`` lines."""
    lines = text.lstrip("\ufeff").replace("\r\n", "\n").split("\n")
    start = next((i + 1 for i, ln in enumerate(lines) if ln.startswith("*** START OF")), 0)
    end = next((i for i, ln in enumerate(lines)
                if ln.startswith(("*** END OF", "End of Project Gutenberg", "End of the Project "
                                  "Gutenberg"))), len(lines))
    return "\n".join(lines[start:end]).strip("\n") + "\n"


@functools.lru_cache(maxsize=2)
def novel_texts(root=None) -> tuple[tuple[tuple[str, str], ...], str]:
    """((title, text) for the ten novels in ``TITLES`` order, the source's label). Read from
    the R files once (seconds), then from ``texts-<digest>.json`` beside them (written
    atomically; the digest names the R files it was read from)."""
    from .._io import atomic_write_json
    from .downloadable import obtain
    got = obtain("novels", root)
    pins = "".join(f.sha256 for p in got.source.packages for f in p.files)
    cached = next(iter(got.paths.values())).parent.parent / \
        f"texts-{hashlib.sha256(pins.encode()).hexdigest()[:16]}.json"
    try:
        data = json.loads(cached.read_text(encoding="utf-8"))
        if [t for t, _ in data] == list(TITLES):
            return tuple((t, x) for t, x in data), got.source.label
    except (OSError, ValueError, TypeError):
        pass
    novels = _read_novels(got.paths)
    atomic_write_json(cached, [list(n) for n in novels])
    return novels, got.source.label


def _read_novels(p: dict) -> tuple[tuple[str, str], ...]:
    from .formats import FormatError, read_r_lazyload, read_rda
    austen = read_r_lazyload(p["janeaustenr.rdx"], p["janeaustenr.rdb"])
    moby = read_r_lazyload(p["tokenizers.rdx"], p["tokenizers.rdb"])["mobydick"]
    books = read_rda(p["books.rda"])["books"]
    texts = {AUSTEN[k]: "\n".join(map(str, austen[k])).strip("\n") + "\n" for k in AUSTEN}
    texts["Moby Dick"] = _gutenberg_body(str(moby[0]))
    ids = np.asarray(books["gutenberg_id"], dtype=np.int64)
    lines = np.asarray(books["text"].fillna(""), dtype=object)
    for gid, title in TIDYTEXT.items():
        texts[title] = "\n".join(map(str, lines[ids == gid])).strip("\n") + "\n"
    short = [t for t in TITLES if len(texts.get(t, "")) < MIN_CHARS]
    if short:
        raise FormatError(f"dataset 'novels': {', '.join(short)} came out under {MIN_CHARS:,} "
                          f"characters; the R data files are not the ones expected.")
    return tuple((t, texts[t]) for t in TITLES)


def split_texts(test_titles=TEST_TITLES, root=None) -> tuple[list[str], list[str], str]:
    """(training novels' texts, held-out novels' texts, source label)."""
    unknown = sorted(set(test_titles) - set(TITLES))
    if unknown or not test_titles or len(set(test_titles)) == len(TITLES):
        raise ValueError(f"novels: test_titles must name at least one and not all of {TITLES}, "
                         f"received {tuple(test_titles)}.")
    novels, label = novel_texts(root)
    train = [t for title, t in novels if title not in test_titles]
    test = [t for title, t in novels if title in test_titles]
    return train, test, label


def _windows(ids: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = (len(ids) - 1) // seq_len
    x = ids[:n * seq_len].reshape(n, seq_len)
    y = ids[1:n * seq_len + 1].reshape(n, seq_len)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


def _novels(seq_len: int = 100, test_titles: tuple[str, ...] = TEST_TITLES,
            min_count: int = 5) -> Dataset:
    """Character-level language modelling on the novels (see module)."""
    if seq_len < 1 or min_count < 1:
        raise ValueError(f"novels needs seq_len >= 1 and min_count >= 1, received "
                         f"seq_len={seq_len}, min_count={min_count}.")
    train, test, label = split_texts(tuple(test_titles))
    train_text, test_text = "\n".join(train), "\n".join(test)
    chars, counts = np.unique(np.frombuffer(train_text.encode("utf-32-le"), np.uint32),
                              return_counts=True)
    kept = chars[counts >= min_count]
    table = {int(c): i + 1 for i, c in enumerate(kept)}

    def encode(text: str) -> np.ndarray:
        return np.fromiter((table.get(ord(ch), 0) for ch in text), np.int64, len(text))

    x, y = _windows(encode(train_text), seq_len)
    order = torch.from_numpy(np.random.default_rng(0).permutation(len(x)))
    xt, yt = _windows(encode(test_text), seq_len)
    return Dataset("novels", "classify", x[order], y[order], xt, yt,
                   num_classes=len(kept) + 1, vocab_size=len(kept) + 1,
                   info={"source": label, "test_titles": list(test_titles),
                         "train_characters": len(train_text), "test_characters": len(test_text),
                         "sha256": hashlib.sha256((train_text + "\0" + test_text)
                                                  .encode("utf-8")).hexdigest(),
                         "seq_len": seq_len, "min_count": min_count,
                         "alphabet": "".join(chr(int(c)) for c in kept)})


register_dataset("novels", description="character-level LM on ten 19th-century novels "
                 "(Project Gutenberg texts from R packages' data; Persuasion and The War of the "
                 "Worlds held out)", embedded=False)(_novels)
