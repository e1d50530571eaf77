"""The rule library the records' catalog lines are written with (``layernorm_paper.records``):
the claim type, the margins quoted in claims, and every rule. The report hands this module to
each record's ``claims(found, rules)``, so a record imports nothing of the report and the report
depends on the records, not the reverse."""
from __future__ import annotations

from .base import (BPC_MARGIN, CHECK, COMPOSITE, DRAW_MARGIN, HW_MARGIN, MIN_HIDDEN_T,
                   SUFFERS_MARGIN, Claim)
from .checks import claim_batch_split, claim_curvature, claim_lr_decay, claim_table1
from .growth import GROWTH_MARGIN, claim_growth_stable
from .feedforward import (claim_beats, claim_bn_collapse, claim_bn_suffers,
                          claim_ln_faster_than_bn, claim_ln_stable)
from .losses import claim_loss_faster, claim_loss_lower
from .order import claim_order_recall, claim_order_sooner
from .paper import (CHARLM_SPEC, DRAW_SPEC, HW_SPEC, claim_completion, claim_hw_no_worse,
                    claim_reader)
from .rnn import claim_gain_init, claim_rnn_best, claim_rnn_fastest, claim_rnn_hidden_stable

__all__ = ["BPC_MARGIN", "CHECK", "COMPOSITE", "DRAW_MARGIN", "HW_MARGIN", "MIN_HIDDEN_T",
           "SUFFERS_MARGIN", "Claim", "claim_batch_split", "claim_curvature", "claim_lr_decay",
           "claim_table1", "claim_beats", "claim_bn_collapse", "claim_bn_suffers",
           "claim_ln_faster_than_bn", "claim_ln_stable", "claim_loss_faster", "claim_loss_lower",
           "claim_order_recall", "claim_order_sooner", "CHARLM_SPEC", "DRAW_SPEC", "HW_SPEC",
           "claim_completion", "claim_hw_no_worse", "claim_reader", "claim_gain_init",
           "claim_rnn_best", "claim_rnn_fastest", "claim_rnn_hidden_stable",
           "GROWTH_MARGIN", "claim_growth_stable"]
