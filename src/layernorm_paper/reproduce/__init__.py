"""``layernorm reproduce``: the paper's experiments and those of the two blog summaries it also
checks (docs/paper.md), and the commands that run them and build the report (``command``,
``sweep_lr``, ``batch_split``). See docs/reproduce.md.

Importing this package registers every experiment of the reproduction with the runner: the
imports below are the one list of the modules that register the models (``layernorm_paper.models``)
and, last, every record of ``layernorm_paper.records`` (each experiment's configs per scale, its
tier, budget and claims side by side). The runner's own example, ``digits_mlp``, registers with
``layernorm_paper.experiments``. A worker process that the runner spawns receives each config's
model builder by reference, and unpickling it imports the builder's module. Nothing here imports
``layernorm_paper.report``: training code does not depend on the report.
"""
from ..models import classifiers  # noqa: F401  repro_mlp, convnet, rnn_classifier (6.6, 6.7, B)
from ..models import paper  # noqa: F401        draw, reader, mdn, char_lm, order (section 6)
from ..models import novels_lm  # noqa: F401    summary B's char-LM on the novels
from .. import records

records.register_all()     # every experiment of the reproduction
