"""Embedded datasets: real data shipped inside installed packages, or generated here. No network.

    digits            sklearn's 1,797 handwritten digits (8x8, 10 classes) as 64-vectors in [0, 1]
    digits-image      the same as 1x8x8 images (ConvNets)
    digits-rows       8-step sequences of 8 pixels (RNNs)
    digits-pixels     64-step sequences of 1 pixel; permute=True applies one fixed permutation
    mnist1d           MNIST-1D (Greydanus 2020), 40-dim signals, 10 classes, generated locally
    mnist1d-seq       the same as 40-step sequences of 1 value
    adding            the adding problem (Hochreiter & Schmidhuber 1997): regress the sum of the two
                      marked values of a length-T sequence
    copy              copy memory: recall n_symbols symbols after a delay of ``length`` blanks
"""
from __future__ import annotations

import functools
import importlib.util
import random
from pathlib import Path

import numpy as np
import torch

from .registry import Dataset, register_dataset


def split_indices(n: int, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A shuffled train/test split of range(n), the same for the same seed on every machine."""
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction must be in (0, 1), received {test_fraction}.")
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(n * test_fraction)))
    return order[n_test:], order[:n_test]


@functools.lru_cache(maxsize=1)
def _digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """The data of ``sklearn.datasets.load_digits``, scaled to [0, 1].

    Read straight from the CSV that scikit-learn ships (what load_digits reads), which spares each
    training process the seconds of importing scikit-learn; load_digits is the fallback.
    """
    spec = importlib.util.find_spec("sklearn")
    csv = (Path(spec.submodule_search_locations[0]) / "datasets" / "data" / "digits.csv.gz"
           if spec and spec.submodule_search_locations else None)
    if csv is not None and csv.exists():
        table = np.loadtxt(csv, delimiter=",")
        data, target = table[:, :-1], table[:, -1]
    else:
        from sklearn.datasets import load_digits
        d = load_digits()
        data, target = d.data, d.target
    return (data / 16.0).astype(np.float32), target.astype(np.int64)


VIEWS = ("flat", "image", "rows", "pixels")


def image_view(x: np.ndarray, side: int, view: str, permute: bool = False,
               permute_seed: int = 0) -> torch.Tensor:
    """Square grey images given as (N, side*side) rows, in the layout a model wants.

    flat (N, side^2) for MLPs; image (N, 1, side, side) for ConvNets; rows (N, side, side): a
    sequence of image rows; pixels (N, side^2, 1): a sequence of single pixels. ``permute`` applies
    one fixed permutation (seeded by ``permute_seed``) to the pixels of every image first, as in
    permuted MNIST.
    """
    from layernorm.checks import check_choice
    check_choice(view, VIEWS, "image view")
    if permute:
        x = x[:, np.random.default_rng(permute_seed).permutation(side * side)]
    shape = {"flat": (side * side,), "image": (1, side, side), "rows": (side, side),
             "pixels": (side * side, 1)}[view]
    return torch.from_numpy(np.ascontiguousarray(x).reshape((len(x),) + shape))


def _digits(view: str = "flat", permute: bool = False, permute_seed: int = 0,
            test_fraction: float = 0.2, split_seed: int = 0) -> Dataset:
    """sklearn's 8x8 digits (1,797 images, values scaled to [0, 1]), split by ``split_seed``."""
    x, y = _digits_arrays()
    tr, te = split_indices(len(y), test_fraction, split_seed)
    return Dataset(name="digits", task="classify",
                   x_train=image_view(x[tr], 8, view, permute, permute_seed),
                   y_train=torch.from_numpy(y[tr]),
                   x_test=image_view(x[te], 8, view, permute, permute_seed),
                   y_test=torch.from_numpy(y[te]), num_classes=10,
                   info={"source": "sklearn.datasets.load_digits", "view": view,
                         "permute": permute, "split_seed": split_seed})


for _name, _view, _desc in (
        ("digits", "flat", "sklearn digits, 64-dim vectors in [0, 1], 10 classes"),
        ("digits-image", "image", "sklearn digits as 1x8x8 images"),
        ("digits-rows", "rows", "sklearn digits as 8-step sequences of 8 pixels"),
        ("digits-pixels", "pixels", "sklearn digits as 64-step pixel sequences (permute=True: "
                                    "one fixed permutation)")):
    register_dataset(_name, description=_desc, embedded=True, view=_view)(_digits)


@functools.lru_cache(maxsize=2)
def _mnist1d_arrays(num_samples: int, seed: int) -> tuple[np.ndarray, ...]:
    from mnist1d.data import get_dataset_args, make_dataset
    args = get_dataset_args()
    args.num_samples, args.seed = num_samples, seed
    # make_dataset reseeds Python's and numpy's global RNGs; give the caller theirs back.
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        d = make_dataset(args)   # the local generator; never mnist1d's download path
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    return (d["x"].astype(np.float32), d["y"].astype(np.int64),
            d["x_test"].astype(np.float32), d["y_test"].astype(np.int64))


def _mnist1d(sequence: bool = False, num_samples: int = 5000, seed: int = 42) -> Dataset:
    """MNIST-1D with the package's default arguments (4,000 train / 1,000 test, 40 values, its own
    seeded split). ``num_samples`` and ``seed`` go to its generator."""
    x, y, xt, yt = _mnist1d_arrays(num_samples, seed)
    shape = (40, 1) if sequence else (40,)
    return Dataset(name="mnist1d", task="classify",
                   x_train=torch.from_numpy(x).reshape((-1,) + shape), y_train=torch.from_numpy(y),
                   x_test=torch.from_numpy(xt).reshape((-1,) + shape), y_test=torch.from_numpy(yt),
                   num_classes=10, info={"source": "mnist1d.data.make_dataset",
                                         "num_samples": num_samples, "seed": seed})


register_dataset("mnist1d", description="MNIST-1D (local generator), 40-dim signals, 10 classes",
                 embedded=True, sequence=False)(_mnist1d)
register_dataset("mnist1d-seq", description="MNIST-1D as 40-step sequences of 1 value",
                 embedded=True, sequence=True)(_mnist1d)


def _adding(length: int = 50, n_train: int = 5000, n_test: int = 1000, seed: int = 0,
            tolerance: float = 0.04) -> Dataset:
    """Inputs (N, length, 2): channel 0 uniform values in [0, 1], channel 1 marks two positions
    (one in each half). Target: the sum of the two marked values. An answer is an error when it is
    off by more than ``tolerance`` (0.04, the usual threshold)."""
    if length < 2:
        raise ValueError(f"adding problem length must be >= 2, received {length}.")
    gen = torch.Generator().manual_seed(seed)

    def make(n):
        values = torch.rand(n, length, generator=gen)
        half = length // 2
        first = torch.randint(0, half, (n,), generator=gen)
        second = torch.randint(half, length, (n,), generator=gen)
        marks = torch.zeros(n, length)
        marks[torch.arange(n), first] = 1.0
        marks[torch.arange(n), second] = 1.0
        return torch.stack([values, marks], dim=-1), (values * marks).sum(1)
    x, y = make(n_train)
    xt, yt = make(n_test)
    return Dataset(name="adding", task="regress", x_train=x, y_train=y, x_test=xt, y_test=yt,
                   tolerance=tolerance, info={"source": "generated", "length": length,
                                              "seed": seed})


register_dataset("adding", description="adding problem: sum of two marked values in a length-T "
                 "sequence (regression, error = |err| > 0.04)", embedded=True)(_adding)


def _copy(length: int = 50, n_symbols: int = 10, alphabet: int = 8, n_train: int = 5000,
          n_test: int = 1000, seed: int = 0) -> Dataset:
    """Copy memory: ``n_symbols`` random symbols (ids 0..alphabet-1), ``length`` blanks (id
    alphabet), a delimiter (id alphabet + 1), then n_symbols - 1 more blanks during which, and at
    the delimiter, the model must output the symbols in order. Inputs are one-hot (N, T, alphabet
    + 2) with T = length + 2 * n_symbols; targets (N, T) hold the symbols at the last n_symbols
    steps and -100 (not scored) elsewhere."""
    if length < 0 or n_symbols < 1 or alphabet < 2:
        raise ValueError(f"copy task needs length >= 0, n_symbols >= 1, alphabet >= 2; received "
                         f"length={length}, n_symbols={n_symbols}, alphabet={alphabet}.")
    gen = torch.Generator().manual_seed(seed)
    blank, delim = alphabet, alphabet + 1
    T = length + 2 * n_symbols

    def make(n):
        symbols = torch.randint(0, alphabet, (n, n_symbols), generator=gen)
        ids = torch.full((n, T), blank, dtype=torch.long)
        ids[:, :n_symbols] = symbols
        ids[:, length + n_symbols] = delim
        targets = torch.full((n, T), -100, dtype=torch.long)
        targets[:, T - n_symbols:] = symbols
        return torch.nn.functional.one_hot(ids, alphabet + 2).float(), targets
    x, y = make(n_train)
    xt, yt = make(n_test)
    return Dataset(name="copy", task="classify", x_train=x, y_train=y, x_test=xt, y_test=yt,
                   num_classes=alphabet, info={"source": "generated", "length": length,
                                               "n_symbols": n_symbols, "seed": seed})


register_dataset("copy", description="copy memory: recall 10 symbols after `length` blanks "
                 "(per-step classification)", embedded=True)(_copy)
