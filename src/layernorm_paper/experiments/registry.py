"""Registries of model builders and named experiments.

    @register_model("mlp")
    def mlp(dataset, norm, hidden=(1000, 1000)) -> nn.Module: ...

    @register_experiment("digits_mlp", claim="6.6: ...", section="6.6")
    def digits_mlp(scale) -> list[Config]: ...      # scale: "tiny" | "quick" | "full"

A module registers its own when imported; importing ``layernorm_paper.reproduce`` imports every
module of the reproduction that does. The config checks its names against these registries, never
the reverse: this module imports no config (an experiment's configs are whatever objects its
function returns, each with ``validate()`` and ``run_name()``).
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

from .names import check_choice, check_name

# The scales of one experiment (``layernorm run NAME --scale SCALE``): how long and on how many
# seeds each of its configs trains. ``layernorm reproduce`` has tiers of its own
# (docs/reproduce.md) that pick which experiments run, each at one of these scales.
SCALES = ("tiny", "quick", "full")


def by_scale(scale: str, **values):
    """The value for ``scale`` among ``tiny=..., quick=..., full=...`` (an experiment's settings
    written side by side, one keyword per scale)."""
    check_choice(scale, values, "scale")
    return values[scale]


MODELS: dict[str, Callable] = {}
MODEL_NORMS: dict[str, tuple[str, ...]] = {}    # the norms a model supports, where it says so
STACKABLE: set[str] = set()     # models whose seeds the runner may train as one stacked model


def register_model(name: str, *, norms: tuple[str, ...] | None = None, stackable: bool = False):
    """Decorator: register ``fn(dataset: Dataset, norm: str, **model_args) -> nn.Module``.

    The module's ``forward(x)`` (or ``forward(x, lengths=...)`` for datasets with lengths) returns
    logits (N, C) or (N, T, C) for "classify" tasks, predictions (N,) or (N, 1) for "regress".
    Optional hook: ``extra_metrics(x) -> dict`` (JSON values), added to every metrics row.
    ``norms``: the norm names the model supports (default: every name of ``layernorm.norms.NORMS``);
    ``Config.validate`` refuses another with that list, before any run starts.
    ``stackable``: the runner may train several seeds of one arm together as one stacked model
    (``experiments.stacked``, under ``torch.func.vmap``): only for a model whose training uses no
    random numbers after it is built (no dropout) and whose modules work under ``vmap``.
    """
    check_name(name, "model name")

    def deco(fn):
        if name in MODELS:
            raise ValueError(f"model {name!r} is already registered; pick another name.")
        MODELS[name] = fn
        if norms is not None:
            MODEL_NORMS[name] = tuple(norms)
        if stackable:
            STACKABLE.add(name)
        return fn
    return deco


def build_model(config, dataset):
    """The model of ``config`` (a ``Config``) for ``dataset``, from its registered builder."""
    check_choice(config.model, MODELS, "model")
    fn = MODELS[config.model]
    params = inspect.signature(fn).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        accepted = [n for n in params][2:]
        unknown = sorted(set(config.model_args) - set(accepted))
        if unknown:
            raise ValueError(f"model {config.model!r} got unknown model_args {unknown}; it "
                             f"accepts {accepted}. Fix the names in model_args.")
    return fn(dataset, config.norm, **config.model_args)


@dataclass(frozen=True)
class Experiment:
    name: str
    claim: str          # the sentence of the paper (or of summary A / B, docs/paper.md) it tests
    section: str        # the paper's section ("6.6", ...), or "summary A" / "summary B"
    make_configs: Callable[[str], list]     # scale -> the experiment's Configs
    needs_download: bool = False

    def configs(self, scale: str = "quick") -> list:
        """The experiment's configs (``Config``) at the scale ``scale``, validated, with unique
        run names."""
        check_choice(scale, SCALES, "scale")
        configs = list(self.make_configs(scale))
        seen = {}
        for c in configs:
            if not c.experiment:
                c.experiment = self.name
            c.validate()
            if c.run_name() in seen:
                raise ValueError(f"experiment {self.name!r} ({scale}) has two configs named "
                                 f"{c.run_name()!r}; give them different `tag`s.")
            seen[c.run_name()] = c
        return configs


EXPERIMENTS: dict[str, Experiment] = {}    # named in snake_case, like the functions that define them


def register_experiment(name: str, *, claim: str, section: str, needs_download: bool = False):
    """Decorator: register ``fn(scale) -> list[Config]`` as experiment ``name``."""
    check_name(name, "experiment name")

    def deco(fn):
        if name in EXPERIMENTS:
            raise ValueError(f"experiment {name!r} is already registered; pick another name.")
        EXPERIMENTS[name] = Experiment(name, claim, section, fn, needs_download)
        return fn
    return deco


def get_experiment(name: str) -> Experiment:
    try:
        check_choice(name, EXPERIMENTS, "experiment")
    except ValueError as err:
        raise ValueError(f"{err} (The paper's experiments register when layernorm_paper.reproduce is "
                         f"imported; the `layernorm` command imports it.)") from None
    return EXPERIMENTS[name]
