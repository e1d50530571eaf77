"""Datasets as in-memory tensors, one loader per dataset, chosen by name.

    ds = load_dataset("digits")                      embedded: no network, ever
    ds = load_dataset("digits-pixels", permute=True) 64-step pixel sequences, fixed permutation
    ds = load_dataset("mnist-5k")                    5,000 real MNIST digits from an installed wheel
    ds = load_dataset("mnist")                       downloaded once into $LAYERNORM_DATA

Every loader returns a ``Dataset``: train and test tensors plus what a model needs to know about
them (input shape, number of classes, the task that fixes the loss and the error). Sequences are
batch-first, (N, T, F) floats or (N, T) token ids. ``register_dataset(name)`` adds a loader.
"""
from __future__ import annotations

from .registry import DATASETS, Dataset, dataset_info, load_dataset, register_dataset
from . import embedded  # noqa: F401  (registers the embedded datasets)
from . import mnist5k  # noqa: F401  (real MNIST digits from an installed wheel)
from . import downloadable, novels  # noqa: F401  (registers the downloadable datasets)
from . import paper_tasks, docstrings  # noqa: F401  (the generated section 6 tasks, the docstrings)
from . import captions  # noqa: F401  (digit captions: order embeddings, section 6.1)
from .download import ChecksumError, DownloadError, OfflineError, Resource, cache_dir, fetch
from .sources import DataUnreachable, obtain

__all__ = ["DATASETS", "Dataset", "dataset_info", "load_dataset", "register_dataset",
           "ChecksumError", "DataUnreachable", "DownloadError", "OfflineError", "Resource", "cache_dir", "fetch", "obtain"]
