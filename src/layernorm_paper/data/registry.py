"""The dataset registry and the ``Dataset`` record every loader returns."""
from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Callable

import torch

from layernorm.checks import check_choice

TASKS = ("classify", "regress")


@dataclass
class Dataset:
    """A dataset held in memory.

    x_*: inputs, (N, *input_shape); float features, or int64 token ids for text.
    y_*: targets. task "classify": int64 class ids, (N,) or (N, T) for per-step targets, where
         -100 marks a step that is not scored (ignored by the loss and the error).
         task "regress": float32 (N,); the error counts |prediction - target| > ``tolerance``.
    lengths_*: None, or (N,) int64 true lengths of padded sequences (then models get
         ``model(x, lengths=...)``).
    """

    name: str
    task: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    num_classes: int = 0            # classify: number of classes (output units); regress: 0
    vocab_size: int = 0             # token inputs: number of distinct ids; feature inputs: 0
    tolerance: float = 0.0          # regress: the error threshold
    lengths_train: torch.Tensor | None = None
    lengths_test: torch.Tensor | None = None
    info: dict = field(default_factory=dict)   # provenance: source, url, sizes, arguments

    def __post_init__(self) -> None:
        check_choice(self.task, TASKS, "task")
        for split in ("train", "test"):
            x, y = getattr(self, f"x_{split}"), getattr(self, f"y_{split}")
            if len(x) != len(y):
                raise ValueError(f"dataset {self.name!r}: x_{split} has {len(x)} examples but "
                                 f"y_{split} has {len(y)}; a loader must return as many targets "
                                 f"as inputs.")

    @property
    def input_shape(self) -> tuple[int, ...]:
        return tuple(self.x_train.shape[1:])

    @property
    def output_size(self) -> int:
        """Output units a model needs: classes for "classify", 1 for "regress"."""
        return self.num_classes if self.task == "classify" else 1

    def summary(self) -> dict:
        return {"name": self.name, "task": self.task, "train": len(self.x_train),
                "test": len(self.x_test), "input_shape": list(self.input_shape),
                "x_dtype": str(self.x_train.dtype).replace("torch.", ""),
                "num_classes": self.num_classes, "vocab_size": self.vocab_size, **self.info}


@dataclass(frozen=True)
class _Entry:
    fn: Callable[..., Dataset]
    description: str
    embedded: bool


DATASETS: dict[str, _Entry] = {}


def register_dataset(name: str, *, description: str, embedded: bool, **defaults):
    """Decorator: register ``fn(**data_args) -> Dataset`` under ``name``.

    ``embedded=True`` means no network is ever needed. ``defaults`` are keyword arguments bound
    for this name, so one loader can serve several names (e.g. "digits" and "digits-image").
    """
    def deco(fn):
        if name in DATASETS:
            raise ValueError(f"dataset {name!r} is already registered; pick another name.")

        def load(**kwargs):
            return fn(**{**defaults, **kwargs})
        load.__wrapped__ = fn
        DATASETS[name] = _Entry(load, description, embedded)
        return fn
    return deco


def dataset_info(name: str) -> _Entry:
    check_choice(name, DATASETS, "dataset")
    return DATASETS[name]


def load_dataset(name: str, *, limit_train: int | None = None, limit_test: int | None = None,
                 **data_args) -> Dataset:
    """Load dataset ``name`` with loader keyword arguments ``data_args``.

    ``limit_train`` / ``limit_test`` keep only the first examples of each split (the loaders'
    splits are already shuffled), for quick runs.
    """
    entry = dataset_info(name)
    params = inspect.signature(entry.fn.__wrapped__).parameters
    unknown = sorted(set(data_args) - set(params))
    if unknown:
        raise ValueError(f"dataset {name!r} got unknown data_args {unknown}; it accepts "
                         f"{sorted(params)} (plus limit_train, limit_test). Fix the names.")
    ds = entry.fn(**data_args)
    for split, limit in (("train", limit_train), ("test", limit_test)):
        if limit is not None:
            if limit < 1:
                raise ValueError(f"limit_{split} must be >= 1, received {limit}.")
            for attr in (f"x_{split}", f"y_{split}", f"lengths_{split}"):
                if getattr(ds, attr) is not None:
                    setattr(ds, attr, getattr(ds, attr)[:limit])
    return ds
