"""Section 6.5: handwriting generation, a mixture-density LSTM vs LN-LSTM — LN reaches the
LSTM's final log-likelihood much faster, to about the same final value. The model is
``layernorm_paper.models.paper``'s ``mdn``; scored on ``report.claims.paper.HW_SPEC``."""
from __future__ import annotations

from functools import partial

from ._record import EMBEDDED, Record, Sweep, arms, pick

NAME = "paper_handwriting"
HEADING = "6.5 handwriting generation (reduced form)"


def configs(scale: str) -> list:
    data = pick(scale, tiny={"length": 12, "n_train": 16, "n_test": 8},
                quick={"length": 100, "n_train": 256, "n_test": 64},
                full={"length": 300, "n_train": 2048, "n_test": 256})
    model = pick(scale, tiny={"hidden": 8, "layers": 2, "mixtures": 2, "embed": 8},
                 quick={"hidden": 48, "layers": 2, "mixtures": 5, "embed": 32},
                 full={"hidden": 128, "layers": 3, "mixtures": 10, "embed": 64})
    length = pick(scale, tiny={"steps": 4, "eval_every": 2},
                  quick={"steps": 500, "eval_every": 25}, full={"steps": 3000, "eval_every": 100})
    return arms(scale, "pen-strokes", "mdn", ("none", "layer"), batch_size=8,
                model_args=model, data_args=data, length=length)


def claims(found, R) -> list:
    return [
        R.Claim("6.5-hw-fast", "paper 6.5", "“LN-LSTM reaches the LSTM's final log-likelihood "
              "much faster” (handwriting)", NAME, R.claim_loss_faster(R.HW_SPEC, ("none",)),
              HEADING, paper="qualitative, Fig. 5"),
        # at a fixed budget (docs/reproduce.md, "Budgets"): both arms still improve by more than
        # the margin at every update count the default tier can afford
        R.Claim("6.5-hw-same", "paper 6.5", "“… to about the same final log-likelihood” (LN's "
              f"NLL within ±{R.HW_MARGIN:g} nats/point of the LSTM's after the same fixed number "
              f"of updates, TOST)", NAME, partial(R.claim_hw_no_worse, fixed_budget=True),
              HEADING, paper="qualitative, Fig. 5"),
    ]


RECORD = Record(
    NAME, position=80, section="6.5",
    claim="a mixture-density LN-LSTM reaches the LSTM's final log-likelihood much faster "
          "(handwriting, IAM-OnDB)",
    tier=EMBEDDED, pack=10, configs=configs, claims=claims,
    sweep=Sweep(1, "test_nll_per_point",
                scored_on="validation NLL per pen point, mean of the last 3 evaluations"),
    paper_experiment=True,
    paper="paper 6.5: 3-layer 400-unit LSTM with a 20-component mixture density output, IAM-OnDB "
          "(12k sequences of length ~700), batch 8, Adam 1e-4",
    paper_numbers={NAME: "paper (Figure 5): LN-LSTM reaches the LSTM's final log-likelihood much "
                         "faster, with about the same final value, IAM-OnDB"},
    data_here={NAME: "generated pen strokes"},
    not_downloaded="IAM-OnDB (section 6.5's data) is distributed only to registered users of the "
                   "FKI IAM On-Line Handwriting Database, so no tier downloads it; every tier "
                   "trains on generated pen strokes")
