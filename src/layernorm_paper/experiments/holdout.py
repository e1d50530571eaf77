"""A validation split held apart from the test split, for choosing settings (``layernorm
sweep-lr``, docs/reproduce.md "Learning rates").

A config whose ``data_args`` hold ``"holdout": "validation"`` trains and is evaluated on its
dataset's validation split instead of the test split: the rows the runner writes as ``test_*``
(and the models' ``extra_metrics``, which read the evaluation split) are then validation scores.
The validation split is

- the dataset's own, where it has one (``x_val``: the captions of section 6.1);
- else carved from the training split: a fixed fifth of the training examples (at least one),
  drawn by a generator seeded with ``HOLDOUT_SEED`` (the same rows for every learning rate and
  every seed of a split), the other four fifths left for training.

The test split of the loaded dataset is dropped before any model sees it: its tensors are never
indexed, and the returned dataset's ``x_test`` / ``y_test`` / ``lengths_test`` are the
validation split's.
"""
from __future__ import annotations

import dataclasses

import torch

HOLDOUT = "holdout"            # the data_args key
VALIDATION = "validation"      # its one value
HOLDOUT_FRACTION = 0.2         # of the training split, where the dataset has no validation split
HOLDOUT_SEED = 20160721        # the carve's generator seed (fixed: the same rows everywhere)


def load_for(config):
    """The dataset of ``config`` (a ``Config``): ``load_dataset(config.dataset, **data_args)``,
    or with ``data_args["holdout"] == "validation"`` its validation split in place of the test
    split (see the module doc)."""
    from ..data import load_dataset
    args = dict(config.data_args)
    mode = args.pop(HOLDOUT, None)
    if mode is None:
        return load_dataset(config.dataset, **args)
    if mode != VALIDATION:
        raise ValueError(f"data_args {HOLDOUT!r} must be {VALIDATION!r} (train on the training "
                         f"split less a validation split, evaluate on that validation split), "
                         f"received {mode!r}. Remove the key to evaluate on the test split.")
    return validation_view(load_dataset(config.dataset, **args))


def validation_view(ds):
    """``ds`` with its validation split as the evaluation split (``x_test`` ...), see the
    module doc. Never reads ``ds``'s test tensors."""
    changes = {}
    if getattr(ds, "x_val", None) is not None:
        changes = {"x_test": ds.x_val, "y_test": ds.y_val,
                   "lengths_test": getattr(ds, "lengths_val", None)}
        where = "the dataset's own validation split"
    else:
        n = len(ds.x_train)
        if n < 2:
            raise ValueError(f"dataset {ds.name!r} has {n} training example(s): a validation "
                             f"split needs at least 2. Use a larger training split "
                             f"(data_args), or no {HOLDOUT!r}.")
        n_val = max(1, int(n * HOLDOUT_FRACTION))
        perm = torch.randperm(n, generator=torch.Generator().manual_seed(HOLDOUT_SEED))
        val, keep = perm[:n_val].sort().values, perm[n_val:].sort().values
        for part, idx in (("train", keep), ("test", val)):
            for kind in ("x", "y", "lengths"):
                src = getattr(ds, f"{kind}_train")
                changes[f"{kind}_{part}"] = None if src is None else src[idx]
        where = (f"{n_val} of the {n} training examples (seeded carve, {HOLDOUT_SEED}), "
                 f"{n - n_val} left for training")
    info = {**ds.info, HOLDOUT: {"evaluated_on": VALIDATION, "split": where}}
    # the test split is not carried over: a plain copy of every other field
    out = dataclasses.replace(ds, info=info, **changes)
    return out
