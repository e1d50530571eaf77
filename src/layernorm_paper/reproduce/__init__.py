"""``layernorm reproduce``: the paper's experiments and those of the two blog summaries it also
checks (``experiments``, ``batch_split``), the models they train (``models``), and the command that
runs them and builds the report (``command``). See docs/paper.md and docs/reproduce.md.

Importing this package declares its experiments to the runner's registry (they register on first
use). It never imports ``layernorm_paper.report``: training code does not depend on the report.
"""
from ..experiments.registry import add_plugins

PLUGIN_MODULES = ("layernorm_paper.reproduce.experiments", "layernorm_paper.reproduce.batch_split",
                  "layernorm_paper.reproduce.paper",
                  "layernorm_paper.reproduce.order")
add_plugins(*PLUGIN_MODULES)
