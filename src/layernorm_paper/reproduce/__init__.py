"""``layernorm reproduce``: the paper's experiments and those of the two blog summaries it also
checks (docs/paper.md), the models they train (``models``), and the command that runs them and
builds the report (``command``). See docs/reproduce.md.

Importing this package registers every experiment of the reproduction with the runner: the
imports below are the one list of the modules that register them (the runner's own example,
``digits_mlp``, registers with ``layernorm_paper.experiments``). A worker process that the runner
spawns receives each config's model builder by reference, and unpickling it imports this package
with the builder's module. Nothing here imports ``layernorm_paper.report``: training code does
not depend on the report.
"""
from . import batch_split  # noqa: F401  section 3: ddp_batch_split
from . import experiments  # noqa: F401  sections 6.2, 6.6, 6.7 and summary B
from . import order  # noqa: F401        section 6.1: paper_order
from . import paper  # noqa: F401        sections 6.2, 6.4, 6.5 and summary B's char-LM
from ..models import novels_lm  # noqa: F401  summary B's char-LM on the novels: novels_charlm
