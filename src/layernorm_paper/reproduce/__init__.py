"""``layernorm reproduce``: the paper's experiments and those of the two blog summaries it also
checks (``experiments``, ``paper``, ``order``, ``batch_split``), the models they train
(``models``), and the command that runs them and builds the report (``command``). See
docs/paper.md and docs/reproduce.md.

Each experiment module registers its experiments with the runner when imported;
``layernorm_paper.catalog`` imports them all. Nothing here imports ``layernorm_paper.report``:
training code does not depend on the report.
"""
