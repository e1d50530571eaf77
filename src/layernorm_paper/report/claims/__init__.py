"""The claims: pure functions from measured numbers (``Inputs``, read by ``runs.py``) to verdicts
(``layernorm_paper.verdicts``). No file is read and nothing is drawn here: a claim names the figures it
wants (``Figure``) and ``figures.py`` draws them. The per-run numbers the rules compare are
``scoring.py``'s.

    base.py         the margins of every rule, the result types, "not run", how a claim could
                    be wrong (``how_wrong``)
    sources.py      the paper's side, gathered from the records (``layernorm_paper.records``):
                    its settings and numbers per experiment, what runs here instead, the
                    section 6 experiments not run and why
    feedforward.py  6.6 / 6.7 (and summary B's CNN claim; summary A and summary B are the two
                    blog summaries the reproduction checks, docs/paper.md section 6): the
                    batch-size experiments
    rnn.py          LSTM vs BN-LSTM vs LN-LSTM per task (summary B, 6.2), hidden-state
                    stability, 6.2's gain initialisation
    losses.py       claims scored on a loss per evaluation (``LossSpec``): lower, faster, no
                    worse
    paper.py        section 6 in reduced form: DRAW, the attentive reader, handwriting, the
                    character-level language model and its sentence completion test; the
                    downloaded full forms
    order.py        6.1 order embeddings: recall and updates to the best validation model
    checks.py       Table 1, 5.2's curvature and learning-rate decay, the distributed batch split
    rules.py        the rule library handed to the records, which write their catalog lines with it
    catalog.py      the claim list, assembled from the records' catalog lines; ``judge``

Everything is re-exported here: ``from layernorm_paper.report.claims import judge`` and the rest keep
working.
"""
from __future__ import annotations

from .base import (BAD_LOSS, BEATS_MARGIN, BPC_MARGIN, CHECK, CLAIM, COLLAPSE_MARGIN, COMPOSITE,
                   DDP_DIFF_FACTOR, DDP_REL_TOL, DRAW_MARGIN, DRIFT_MARGIN, FASTER_MARGIN,
                   GAIN_MARGIN, HW_MARGIN, LR_DECAY_MARGIN, MIN_HIDDEN_T, NOT_RUN,
                   RECALL_MARGIN, STABLE_MARGIN, STEPS_FRACTION, STILL_FALLING, SUFFERS_MARGIN,
                   Claim, ClaimResult, Figure, absent, how_wrong, not_run)
from .catalog import (DDP_SECTION, DOWNLOAD_TASKS, PAPER_EXPERIMENTS, RNN_EXPERIMENTS,
                      STABILITY_EXPERIMENT, TASK_NAMES, catalog, claims_for, claims_for_tasks,
                      composite, judge, paper_claims)
from .checks import (claim_batch_split, claim_curvature, claim_lr_decay, claim_table1,
                     ddp_commands, ddp_tolerance)
from .feedforward import (BN_VARIANTS, claim_beats, claim_bn_collapse, claim_bn_suffers,
                          claim_ln_faster_than_bn, claim_ln_stable, ff_figures, for_bn_variants)
from .losses import (F_NLL, F_NLL_POINT, LossSpec, arm_key, claim_loss_faster, claim_loss_lower,
                     final_loss, loss_groups, loss_table, measured_vs_paper, no_worse,
                     paper_figure, steps_to_loss)
from .order import (ORDER_EXPERIMENT, RECALLS, best_row, claim_order_recall, claim_order_sooner,
                    recall_at_best)
from .paper import (CHARLM_SPEC, COMPLETION_CHANCE, DRAW_SPEC, F_COMPLETION, F_COMPLETION_EMA,
                    HW_SPEC, LN2, claim_completion, claim_hw_no_worse,
                    claim_reader, full_forms_run, paper_not_run)
from .rnn import (claim_gain_init, claim_rnn_best, claim_rnn_fastest, claim_rnn_hidden_stable,
                  rnn_figures)
from .sources import DATA_HERE, FULL_FORMS, PAPER_NOT_RUN, PAPER_NUMBERS, PAPER_SETTINGS

__all__ = [
    "BAD_LOSS", "BEATS_MARGIN", "BPC_MARGIN", "CHECK", "CLAIM", "COLLAPSE_MARGIN", "COMPOSITE",
    "DDP_DIFF_FACTOR", "DDP_REL_TOL", "DRAW_MARGIN", "DRIFT_MARGIN", "FASTER_MARGIN",
    "GAIN_MARGIN", "HW_MARGIN", "LR_DECAY_MARGIN", "MIN_HIDDEN_T", "NOT_RUN",
    "RECALL_MARGIN", "STABLE_MARGIN", "STEPS_FRACTION", "STILL_FALLING", "SUFFERS_MARGIN",
    "Claim", "ClaimResult", "Figure", "absent", "how_wrong", "not_run",
    "DDP_SECTION", "DOWNLOAD_TASKS", "PAPER_EXPERIMENTS", "RNN_EXPERIMENTS",
    "STABILITY_EXPERIMENT", "TASK_NAMES", "catalog", "claims_for", "claims_for_tasks",
    "composite", "judge",
    "claim_batch_split", "claim_curvature", "claim_lr_decay", "claim_table1", "ddp_commands",
    "ddp_tolerance",
    "BN_VARIANTS", "claim_beats", "claim_bn_collapse", "claim_bn_suffers",
    "claim_ln_faster_than_bn", "claim_ln_stable", "ff_figures", "for_bn_variants",
    "F_NLL", "F_NLL_POINT", "LossSpec", "arm_key", "claim_loss_faster", "claim_loss_lower",
    "final_loss", "loss_groups", "loss_table", "measured_vs_paper", "no_worse", "paper_figure",
    "steps_to_loss",
    "ORDER_EXPERIMENT", "RECALLS", "best_row", "claim_order_recall", "claim_order_sooner",
    "recall_at_best",
    "CHARLM_SPEC", "COMPLETION_CHANCE", "DRAW_SPEC", "F_COMPLETION", "F_COMPLETION_EMA",
    "HW_SPEC", "LN2", "claim_completion", "claim_hw_no_worse", "claim_reader",
    "full_forms_run", "paper_claims", "paper_not_run",
    "claim_gain_init", "claim_rnn_best", "claim_rnn_fastest", "claim_rnn_hidden_stable",
    "rnn_figures",
    "DATA_HERE", "FULL_FORMS", "PAPER_NOT_RUN", "PAPER_NUMBERS", "PAPER_SETTINGS",
]
