"""Every experiment and model builder of the reproduction, registered with the runner: the one
list of the modules that register them. Importing this module imports each of them; their
decorators (``register_experiment``, ``register_model``) fill the runner's registries. (The
runner's own example, ``digits_mlp``, and its ``mlp`` builder register with the runner itself:
``layernorm_paper.experiments.builtin``.)

    import layernorm_paper.catalog                      # then every experiment is known
    from layernorm_paper.experiments import EXPERIMENTS, get_experiment

The ``layernorm`` command imports it (``list``, ``run``, ``reproduce``); the runner itself never
does (it knows nothing above it). A worker process that the runner spawns receives each config's
model builder by reference, and unpickling it imports the module that registers it.
"""
from __future__ import annotations

from .reproduce import batch_split      # section 3: ddp_batch_split
from .reproduce import experiments      # sections 6.2, 6.6, 6.7 and summary B (docs/paper.md)
from .reproduce import order            # section 6.1: paper_order
from .reproduce import paper            # sections 6.2, 6.4, 6.5 and summary B's char-LM

MODULES = (batch_split, experiments, order, paper)

__all__ = ["MODULES"]
