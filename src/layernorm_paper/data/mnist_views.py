"""Two forms of the downloaded MNIST that its loader (``load_dataset("mnist", ...)``) gives on
request, for the experiments that need them:

    side=14              each image averaged over 2x2 blocks to 14x14 (196 pixels): with
                         view="pixels" and permute=True, a permuted pixel sequence of 196 steps,
                         one grey level per step (summary B's RNN claims on MNIST, at a length
                         the default tier affords; the 28x28 form is 784 steps)
    binarize="dynamic"   density modelling (DRAW, paper 6.4): the training images stay grey
                         levels in [0, 1], the probability of each pixel being on, and a model
                         draws a fresh binary image from them at every batch (the "dynamic
                         binarization" of Salakhutdinov & Murray's MNIST variants); the test
                         images are binarized once, by a generator seeded with ``seed``, so every
                         model is scored on the same binary test set

Both are functions of the verified MNIST arrays, computed when loaded (nothing is cached beside
the downloaded files).
"""
from __future__ import annotations

import numpy as np
import torch

from .paper_tasks import LOSS_TARGETS
from .registry import Dataset

SIDES = (28, 14)
BINARIZE = ("", "dynamic")
DYNAMIC = "dynamic"


def pooled(x: np.ndarray, side: int) -> np.ndarray:
    """(N, 784) images in [0, 1] as (N, side * side): the mean of each block of (28 // side)^2
    pixels (side 28: unchanged)."""
    if side not in SIDES:
        raise ValueError(f"MNIST side must be one of {list(SIDES)} (28: the images as they are, "
                         f"14: averaged over 2x2 blocks), received {side!r}.")
    if side == 28:
        return x
    k = 28 // side
    return x.reshape(len(x), side, k, side, k).mean((2, 4), dtype=np.float32) \
        .reshape(len(x), side * side)


def density(name: str, x: np.ndarray, xt: np.ndarray, seed: int, info: dict) -> Dataset:
    """MNIST for a density model with dynamic binarization (see the module doc): training
    grey levels (N, 784), test images binarized once by a generator seeded with ``seed``;
    targets zeros, task "regress" (``LOSS_TARGETS``), as ``digits-binary`` and
    ``binarized-mnist``."""
    gen = torch.Generator().manual_seed(seed)
    test = torch.bernoulli(torch.from_numpy(np.ascontiguousarray(xt)), generator=gen)
    train = torch.from_numpy(np.ascontiguousarray(x))
    return Dataset(name, "regress", train, torch.zeros(len(train)), test,
                   torch.zeros(len(test)), tolerance=float("inf"),
                   info={**info, "binarize": DYNAMIC, "binarize_seed": seed,
                         "pixels": x.shape[1], "targets": LOSS_TARGETS})
