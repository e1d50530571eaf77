"""Sections 5.1 and 5.2 (and summary A, docs/paper.md section 6): Table 1's invariances, the
curvature along w_i, the implicit learning-rate decay — measured by ``layernorm_paper.analysis``
(``layernorm reproduce``'s analysis part, not a registered experiment)."""
from __future__ import annotations

from ._record import Record

NAME = "analysis"


def claims(found, R) -> list:
    return [
        R.Claim("table1", "paper 5.1 (Table 1); summary A", "“invariance properties of batch, "
              "weight and layer normalization” (Table 1)", NAME, R.claim_table1, "Analysis",
              R.CHECK, paper="Table 1", data="n/a"),
        R.Claim("5.2-curvature", "paper 5.2; summary A", "“the normalization scalar σ implicitly "
              "reduces the learning rate”: curvature along w_i scales as ||w_i||⁻²", NAME,
              R.claim_curvature, "Analysis", R.CHECK, paper="qualitative, derivation (5.2)",
              data="n/a"),
        R.Claim("5.2-lr-decay", "paper 5.2", "“a growing weight norm acts as an implicit "
              "learning-rate decay” (early-stopping effect): the KL between the output "
              "distributions before and after an SGD update falls, late against early in "
              "training, more with layer norm than without", NAME, R.claim_lr_decay, "Analysis",
              paper="qualitative, derivation (5.2)", data="n/a"),
    ]


RECORD = Record(
    NAME, position=170, section="5.1; 5.2; summary A",
    claim="Table 1's invariances hold; the curvature along w_i scales as ||w_i||^-2; a growing "
          "weight norm acts as an implicit learning-rate decay",
    claims=claims)
