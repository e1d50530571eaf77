"""The CNN questions of the DeepMind Q&A corpus (Hermann et al. 2015) in the attentive reader's
format (the ``cloze`` layout of ``layernorm_paper.data.paper_tasks``): the passage's token ids, then
the query's, and the answer's entity id.

The archive (``cnn.tgz``) holds one file per question under
``cnn/questions/{training,validation,test}/``; each file is, one per line with blank lines
between: the article's URL, the passage, the query (``@placeholder`` where the answer was), the
answer, then the entity map (``@entity3:Name``). Passages and queries are tokenized and
lower-cased, with every named entity already replaced by an anonymous marker ``@entityN``,
renumbered per article (the corpus' anonymisation, kept as given); the entity map is not read.

Token ids: entity ``@entityN`` -> N (0 .. num_entities - 1, the largest N read + 1), then the
``vocab_size`` most frequent other tokens of the training passages and queries read (ties:
alphabetical), then
"unknown", "padding", "@placeholder". Passages longer than ``max_passage`` tokens keep their
first ``max_passage``; a question whose answer is not among them is dropped (counted in the
info). Passages and queries are padded on the right to fixed lengths.
"""
from __future__ import annotations

import collections
import re
import tarfile
from pathlib import Path

import numpy as np

SPLITS = ("training", "validation", "test")
_MEMBER = re.compile(r"(?:^|/)questions/(training|validation|test)/([^/]+)\.question$")
_ENTITY = re.compile(r"@entity(\d+)$")
PLACEHOLDER = "@placeholder"


def parse_question(text: str) -> tuple[list[str], list[str], str]:
    """(passage tokens, query tokens, answer) of one ``.question`` file."""
    lines = text.split("\n")
    if len(lines) < 7 or not lines[2].strip() or not lines[4].strip() or \
            not _ENTITY.match(lines[6].strip()):
        raise ValueError("not a question file: expected URL, passage, query and an @entityN "
                         "answer on lines 1, 3, 5, 7")
    return lines[2].split(), lines[4].split(), lines[6].strip()


def _members(archive: Path):
    """(split, name, text) of every question file, in archive order."""
    with tarfile.open(archive, "r:*") as tar:
        for member in tar:
            m = _MEMBER.search(member.name)
            if m and member.isfile():
                text = tar.extractfile(member).read().decode("utf-8", errors="replace")
                yield m.group(1), m.group(2), text


def read_questions(archive: str | Path, *, splits: tuple[str, ...] = ("training", "validation"),
                   max_per_split: dict[str, int | None] | None = None, max_passage: int = 2000,
                   max_query: int = 50, vocab_size: int = 50_000) -> dict:
    """Encode the questions of ``splits`` (see module). ``max_per_split``: keep the first N
    questions of a split by file name (None: all). Returns arrays ``x_<split>`` (N, max_passage +
    max_query) int64, ``y_<split>`` (N,) and the sizes (``n_entities``, ``vocab_size``...)."""
    archive = Path(archive)
    limits = max_per_split or {}
    # pass 1: the file names of each split (the archive's order is not a contract: sort them)
    names: dict[str, list[str]] = {s: [] for s in splits}
    for split, name, _ in _members(archive):
        if split in names:
            names[split].append(name)
    keep = {s: set(sorted(n)[:limits.get(s)]) for s, n in names.items()}
    if not any(keep.values()):
        raise ValueError(f"{archive} holds no question files of {list(splits)} (expected members "
                         f"like cnn/questions/training/<id>.question).")
    # pass 2: count the tokens of the kept training questions (the vocabulary) and find the
    # largest entity number, over the questions kept (not dropped); pass 3 encodes. Three reads of the archive keep memory small.
    counts: collections.Counter = collections.Counter()
    n_entities = 0

    def kept():
        for split, name, text in _members(archive):
            if split in keep and name in keep[split]:
                try:
                    passage, query, answer = parse_question(text)
                except ValueError as err:
                    raise ValueError(f"{archive}: {split}/{name}.question: {err}") from None
                yield split, name, passage[:max_passage], query[:max_query], answer

    for split, _, passage, query, answer in kept():
        if answer not in passage:
            continue                               # dropped below: counts nothing
        for tok in passage + query:
            m = _ENTITY.match(tok)
            if m:
                n_entities = max(n_entities, int(m.group(1)) + 1)
            elif split == "training" and tok != PLACEHOLDER:
                counts[tok] += 1
    words = sorted(counts, key=lambda w: (-counts[w], w))[:vocab_size]
    table = {w: n_entities + i for i, w in enumerate(words)}
    unk, pad, blank = (n_entities + len(words) + k for k in range(3))

    def encode(tok: str) -> int:
        m = _ENTITY.match(tok)
        if m:
            return int(m.group(1))
        return blank if tok == PLACEHOLDER else table.get(tok, unk)

    encoded: dict[str, dict[str, tuple]] = {s: {} for s in splits}
    dropped = dict.fromkeys(splits, 0)
    for split, name, passage, query, answer in kept():
        if answer not in passage:
            dropped[split] += 1
            continue
        row = np.full(max_passage + max_query, pad, np.int64)
        row[:len(passage)] = [encode(t) for t in passage]
        row[max_passage:max_passage + len(query)] = [encode(t) for t in query]
        encoded[split][name] = (row, encode(answer))

    out: dict = {"n_entities": n_entities, "vocab_size": blank + 1, "words": len(words),
                 "passage_len": max_passage, "query_len": max_query}
    for split in splits:
        items = [encoded[split][n] for n in sorted(encoded[split])]
        out[f"x_{split}"] = np.stack([r for r, _ in items]) if items else \
            np.zeros((0, max_passage + max_query), np.int64)
        out[f"y_{split}"] = np.asarray([a for _, a in items], np.int64)
        out[f"dropped_{split}"] = dropped[split]
    return out
