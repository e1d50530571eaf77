"""The typed config of one training run. Saved as ``config.json`` in the run directory; a run
directory belongs to exactly one config."""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field, fields, replace

from .._args import SEED_MAX
from .names import check_choice, check_name
from .registry import MODEL_NORMS, MODELS

OPTIMIZERS = ("adam", "sgd", "rmsprop")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class Config:
    experiment: str = ""            # the registry name that produced it ("" for ad-hoc runs)
    dataset: str = "digits"         # a name in layernorm_paper.data.DATASETS
    model: str = "mlp"              # a name in the model registry (register_model)
    norm: str = "layer"             # a name in layernorm.norms.NORMS, handed to the model builder
    batch_size: int = 32            # examples per optimizer step (the global batch under DDP)
    optimizer: str = "adam"         # adam | sgd | rmsprop (torch.optim defaults otherwise)
    lr: float = 1e-3
    epochs: float | None = None     # length of training: epochs ...
    steps: int | None = None        # ... or optimizer steps; exactly one of the two
    eval_every: int | None = None   # steps between evaluations; None: once per epoch
    checkpoint_every: int | None = None   # steps between checkpoints; None: at every evaluation
    seed: int = 0                   # model init, dropout and data order; same seed, same numbers
    device: str = "auto"            # auto (cuda if available) | cpu | cuda
    grad_clip: float | None = None  # clip the global gradient norm (paper 6.2 used 10)
    sync_bn: bool = False           # under torchrun: batch-norm statistics over the global batch
    weight_decay: float = 0.0
    tag: str = ""                   # distinguishes configs that share norm/batch/seed in a run name
    model_args: dict = field(default_factory=dict)   # keyword arguments of the model builder
    data_args: dict = field(default_factory=dict)    # keyword arguments of the dataset loader

    def validate(self) -> "Config":
        """Check every field against what exists; raise a ValueError that names the fix."""
        from ..data import DATASETS
        from layernorm.vocabulary import NORMS
        check_name(self.experiment, "experiment", empty=True)
        check_name(self.tag, "tag", empty=True)
        check_choice(self.dataset, DATASETS, "dataset")
        check_choice(self.model, MODELS, "model")
        check_choice(self.norm, NORMS, "norm")
        if self.norm not in MODEL_NORMS.get(self.model, NORMS):
            raise ValueError(f"model {self.model!r} supports the norms "
                             f"{list(MODEL_NORMS[self.model])}, received norm={self.norm!r}. Pick "
                             f"one of those (--norm), or another model.")
        check_choice(self.optimizer, OPTIMIZERS, "optimizer")
        check_choice(self.device, DEVICES, "device")
        if not isinstance(self.batch_size, int) or isinstance(self.batch_size, bool) \
                or self.batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, received {self.batch_size!r}. "
                             f"Pass e.g. --batch-size 32.")
        if (self.epochs is None) == (self.steps is None):
            raise ValueError(f"give exactly one of epochs and steps, received epochs="
                             f"{self.epochs!r}, steps={self.steps!r}. Set the other one to None.")
        if self.steps is not None and (not isinstance(self.steps, int) or self.steps < 1):
            raise ValueError(f"steps must be an integer >= 1, received {self.steps!r}. "
                             f"Pass e.g. steps=100.")
        if self.epochs is not None and not (self.epochs > 0 and math.isfinite(self.epochs)):
            raise ValueError(f"epochs must be a positive number, received {self.epochs!r}. "
                             f"Pass e.g. epochs=2.")
        for name in ("eval_every", "checkpoint_every"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or v < 1):
                raise ValueError(f"{name} must be None or an integer >= 1, received {v!r}. "
                                 f"Pass None for the default.")
        if not isinstance(self.sync_bn, bool):
            raise ValueError(f"sync_bn must be True or False, received {self.sync_bn!r}. "
                             f"Pass a bool.")
        if not isinstance(self.seed, int) or isinstance(self.seed, bool) \
                or not 0 <= self.seed <= SEED_MAX:
            raise ValueError(f"seed must be an integer in [0, {SEED_MAX}] (2**32 - 1), received "
                             f"{self.seed!r}. Pass a smaller seed such as 0.")
        for name in ("model_args", "data_args"):
            if not isinstance(getattr(self, name), dict):
                raise ValueError(f"{name} must be a dict of keyword arguments, received "
                                 f"{getattr(self, name)!r}. Pass e.g. {name}={{}}.")
        if not isinstance(self.lr, (int, float)) or isinstance(self.lr, bool):
            raise ValueError(f"lr must be a number > 0, received {self.lr!r}. Pass e.g. lr=1e-3.")
        if not self.lr > 0:
            raise ValueError(f"lr must be > 0, received {self.lr!r}. Pass e.g. lr=1e-3.")
        return self

    def to_dict(self) -> dict:
        """JSON-normalized (tuples become lists), as stored in config.json."""
        return json.loads(json.dumps(asdict(self), sort_keys=True))

    @classmethod
    def from_dict(cls, d: dict) -> "Config":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"config has unknown fields {unknown}; known fields are "
                             f"{sorted(known)}. Was it written by another version of layernorm?")
        return cls(**d)

    def run_name(self) -> str:
        """The run directory's name inside an experiment's output folder."""
        parts = ([self.tag] if self.tag else []) + [self.norm] + \
            (["syncbn"] if self.sync_bn else []) + [f"bs{self.batch_size}", f"seed{self.seed}"]
        return "-".join(parts)


def with_seed(config: Config, seed: int) -> Config:
    """``config`` at another seed (a test split drawn with the seed follows it)."""
    data_args = {k: (seed if k == "split_seed" and v == config.seed else v)
                 for k, v in config.data_args.items()}
    return replace(config, seed=seed, data_args=data_args)
