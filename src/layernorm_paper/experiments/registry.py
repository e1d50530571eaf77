"""Registries of model builders and named experiments.

    @register_model("mlp")
    def mlp(dataset, norm, hidden=(1000, 1000)) -> nn.Module: ...

    @register_experiment("digits_mlp", claim="6.6: ...", section="6.6")
    def digits_mlp(preset) -> list[Config]: ...     # preset: "tiny" | "quick" | "full"
"""
from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from .names import check_choice, check_name

if TYPE_CHECKING:      # the config checks its names against this registry, never the reverse
    from .config import Config

PRESETS = ("tiny", "quick", "full")


def by_preset(preset: str, **values):
    """The value for ``preset`` among ``tiny=..., quick=..., full=...`` (an experiment's settings
    written side by side, one keyword per preset)."""
    check_choice(preset, values, "preset")
    return values[preset]

# Modules whose import registers models and experiments. The runner knows only its own; the
# modules above it declare theirs with ``add_plugins`` (``layernorm_paper.cli`` lists every plugin of
# the command; ``layernorm_paper.reproduce`` declares the reproduction's when imported). Loaded on first
# use, so `import layernorm` stays light.
PLUGIN_MODULES: list[str] = ["layernorm_paper.experiments.builtin"]
EXPERIMENT_MODULES = PLUGIN_MODULES     # its former name


def add_plugins(*modules: str) -> None:
    """Declare modules whose import registers models or experiments (imported on first use)."""
    for name in modules:
        if name not in PLUGIN_MODULES:
            PLUGIN_MODULES.append(name)


def load_registered() -> None:
    """Import every declared plugin module (each registers its models and experiments)."""
    for name in list(PLUGIN_MODULES):
        importlib.import_module(name)

MODELS: dict[str, Callable] = {}
MODEL_NORMS: dict[str, tuple[str, ...]] = {}    # the norms a model supports, where it says so


def register_model(name: str, *, norms: tuple[str, ...] | None = None):
    """Decorator: register ``fn(dataset: Dataset, norm: str, **model_args) -> nn.Module``.

    The module's ``forward(x)`` (or ``forward(x, lengths=...)`` for datasets with lengths) returns
    logits (N, C) or (N, T, C) for "classify" tasks, predictions (N,) or (N, 1) for "regress".
    Optional hook: ``extra_metrics(x) -> dict`` (JSON values), added to every metrics row.
    ``norms``: the norm names the model supports (default: every name of ``layernorm.norms.NORMS``);
    ``Config.validate`` refuses another with that list, before any run starts.
    """
    check_name(name, "model name")

    def deco(fn):
        if name in MODELS:
            raise ValueError(f"model {name!r} is already registered; pick another name.")
        MODELS[name] = fn
        if norms is not None:
            MODEL_NORMS[name] = tuple(norms)
        return fn
    return deco


def build_model(config: "Config", dataset):
    load_registered()
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
    claim: str          # the sentence of the paper (or of summary A / B) it tests, one line
    section: str        # the paper's section ("6.6", ...), or "summary A" / "summary B"
    make_configs: Callable[[str], list["Config"]]
    needs_download: bool = False

    def configs(self, preset: str = "quick") -> list["Config"]:
        """The experiment's configs for ``preset``, validated, with unique run names."""
        check_choice(preset, PRESETS, "preset")
        configs = list(self.make_configs(preset))
        seen: dict[str, Config] = {}
        for c in configs:
            if not c.experiment:
                c.experiment = self.name
            c.validate()
            if c.run_name() in seen:
                raise ValueError(f"experiment {self.name!r} ({preset}) has two configs named "
                                 f"{c.run_name()!r}; give them different `tag`s.")
            seen[c.run_name()] = c
        return configs


EXPERIMENTS: dict[str, Experiment] = {}
# Experiment names are snake_case, like the Python functions that define them; the dashed names of
# earlier releases still resolve.
EXPERIMENT_ALIASES = {"digits-mlp": "digits_mlp", "ddp-batch-split": "ddp_batch_split"}


def register_experiment(name: str, *, claim: str, section: str, needs_download: bool = False):
    """Decorator: register ``fn(preset) -> list[Config]`` as experiment ``name``."""
    check_name(name, "experiment name")

    def deco(fn):
        if name in EXPERIMENTS:
            raise ValueError(f"experiment {name!r} is already registered; pick another name.")
        EXPERIMENTS[name] = Experiment(name, claim, section, fn, needs_download)
        return fn
    return deco


def get_experiment(name: str) -> Experiment:
    load_registered()
    name = EXPERIMENT_ALIASES.get(name, name)
    try:
        check_choice(name, EXPERIMENTS, "experiment")
    except ValueError as err:
        raise ValueError(f"{err} (The paper's experiments register when layernorm_paper.reproduce is "
                         f"imported; the `layernorm` command loads them all.)") from None
    return EXPERIMENTS[name]
