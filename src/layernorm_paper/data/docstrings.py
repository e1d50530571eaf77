"""A character-level corpus that ships with every Python: the standard library's docstrings.

    docstrings   (N, seq_len) character ids -> the next character at every step (summary B's
                 language-modelling experiment, run here as a character-level language model;
                 summary B: one of the two blog summaries of the paper, docs/paper.md)

The running interpreter's standard library (``sysconfig``'s "stdlib" path) is read in sorted
order of relative file path, skipping test packages, ``site-packages`` and files that do not
parse; from each file, the docstrings of the module, its classes and functions (``ast.walk``
order, ``ast.get_docstring`` cleaning), each followed by a blank line. The corpus therefore
differs between Python versions: the dataset's info records the Python version, the number of
files and docstrings, and the SHA-256 of the corpus text, so a run names exactly what it read.

Train / test split by docstring (every ``test_every``-th docstring is test text), so test text
is never seen in training; each split is cut into non-overlapping windows of ``seq_len + 1``
characters. Characters seen fewer than ``min_count`` times in the training text share one
"unknown" id (id 0); ``info["alphabet"]`` holds the other characters in id order (id 1 first).
The sentence-completion test of the held-out split is ``layernorm_paper.data.completion``.
"""
from __future__ import annotations

import ast
import functools
import hashlib
import os
import sys
import sysconfig
import warnings
from pathlib import Path

import numpy as np
import torch

from .registry import Dataset, register_dataset

SKIP_DIRS = {"test", "tests", "site-packages", "dist-packages", "__pycache__", "idle_test"}


def stdlib_files(root: str | Path | None = None) -> list[Path]:
    """The standard library's ``.py`` files, sorted by relative path (deterministic)."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d not in SKIP_DIRS]   # prune, don't descend
        files += [Path(dirpath) / f for f in filenames if f.endswith(".py")]
    return sorted(files, key=lambda p: p.relative_to(root).as_posix())


def file_docstrings(path: Path) -> list[str]:
    """The docstrings of one source file, module first, in ``ast.walk`` order ([] if the file
    does not parse)."""
    try:
        with warnings.catch_warnings():   # old escape sequences in some files warn when parsed
            warnings.simplefilter("ignore")
            tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            doc = ast.get_docstring(node, clean=True)
            if doc and len(doc) >= 20:
                out.append(doc)
    return out


@functools.lru_cache(maxsize=4)
def stdlib_docstrings(max_chars: int | None = None) -> tuple[tuple[str, ...], dict]:
    """(docstrings, info): the corpus' docstrings in order, stopping at the first file that
    brings the total to ``max_chars`` or more (None: the whole standard library)."""
    docs: list[str] = []
    total, n_files = 0, 0
    for path in stdlib_files():
        found = file_docstrings(path)
        if found:
            n_files += 1
        docs += found
        total += sum(len(d) + 2 for d in found)
        if max_chars is not None and total >= max_chars:
            break
    text = "".join(d + "\n\n" for d in docs)
    info = {"python": sys.version.split()[0], "implementation": sys.implementation.name,
            "files": n_files, "docstrings": len(docs), "characters": len(text),
            "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(), "max_chars": max_chars}
    return tuple(docs), info


def _windows(ids: np.ndarray, seq_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    n = (len(ids) - 1) // seq_len
    if n < 1:
        raise ValueError(f"docstrings: a split has {len(ids)} characters, fewer than seq_len + 1 "
                         f"= {seq_len + 1}. Raise max_chars or lower seq_len.")
    x = ids[:n * seq_len].reshape(n, seq_len)
    y = ids[1:n * seq_len + 1].reshape(n, seq_len)
    return torch.from_numpy(x.copy()), torch.from_numpy(y.copy())


def _docstrings(seq_len: int = 64, max_chars: int | None = 200_000, test_every: int = 10,
                min_count: int = 5) -> Dataset:
    """Character-level language modelling on the standard library's docstrings (see module)."""
    if seq_len < 1 or test_every < 2:
        raise ValueError(f"docstrings needs seq_len >= 1 and test_every >= 2, received "
                         f"seq_len={seq_len}, test_every={test_every}.")
    docs, info = stdlib_docstrings(max_chars)
    train_text = "".join(d + "\n\n" for i, d in enumerate(docs) if i % test_every)
    test_text = "".join(d + "\n\n" for i, d in enumerate(docs) if not i % test_every)
    chars, counts = np.unique(np.frombuffer(train_text.encode("utf-32-le"), np.uint32),
                              return_counts=True)
    kept = chars[counts >= min_count]                 # sorted code points -> ids 1..V-1
    table = {int(c): i + 1 for i, c in enumerate(kept)}

    def encode(text: str) -> np.ndarray:
        return np.fromiter((table.get(ord(ch), 0) for ch in text), np.int64, len(text))

    x_tr, y_tr = _windows(encode(train_text), seq_len)
    x_te, y_te = _windows(encode(test_text), seq_len)
    return Dataset("docstrings", "classify", x_tr, y_tr, x_te, y_te, num_classes=len(kept) + 1,
                   vocab_size=len(kept) + 1,
                   info={"source": "docstrings of the running Python's standard library",
                         **{f"corpus_{k}": v for k, v in info.items()},
                         "train_characters": len(train_text), "test_characters": len(test_text),
                         "seq_len": seq_len, "vocabulary": len(kept) + 1,
                         "test_every": test_every, "min_count": min_count,
                         "alphabet": "".join(chr(int(c)) for c in kept)})


register_dataset("docstrings", description="character-level text: the docstrings of the running "
                 "Python's standard library (no download; differs between Python versions)",
                 embedded=True)(_docstrings)
