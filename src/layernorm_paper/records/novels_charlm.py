"""Summary B's language-model claim on text of the kind its data is made of (docs/paper.md,
section 6): LSTM vs BN-LSTM vs LN-LSTM character-level language models trained on eight
19th-century novels (dataset ``novels``, downloaded: docs/runner.md, "Downloads") — LN-LSTM
converges fastest and reaches the best score — each scored at every evaluation on a 5-way
sentence-completion test in the MSR format built from the two held-out novels (2,525 questions;
MSR's own questions have no public source). The model is ``layernorm_paper.models.novels_lm``;
its bits per character are judged by the char-LM rules (``CHARLM_SPEC`` on this experiment); the
completion accuracy is recorded in every metrics row (``completion_accuracy``)."""
from __future__ import annotations

from dataclasses import replace
from functools import partial

from ._record import REAL, STANDARD, Record, arms, pick

NAME = "novels_charlm"
HEADING = "Summary B: character-level language model on 19th-century novels"


def configs(preset: str) -> list:
    data = pick(preset, tiny={"seq_len": 16, "limit_train": 64, "limit_test": 16},
                quick={"seq_len": 100, "limit_test": 1000},
                full={"seq_len": 100, "limit_test": 2000})
    model = pick(preset, tiny={"hidden": 8, "embed": 8, "completion_questions": 10},
                 quick={"hidden": 128, "embed": 32, "completion_questions": 1000},
                 full={"hidden": 256, "embed": 64, "completion_questions": 2000})
    length = pick(preset, tiny={"steps": 4, "eval_every": 2},
                  quick={"steps": 2000, "eval_every": 100},
                  full={"steps": 8000, "eval_every": 250})
    return arms(preset, "novels", "novels_lm", ("none", "batch", "layer"),
                batch_size=pick(preset, tiny=8, quick=32, full=64), model_args=model,
                data_args=data, length=length, lr_full=2e-3)


def claims(found, R) -> list:
    spec = replace(R.CHARLM_SPEC, experiment=NAME)
    return [
        R.Claim("novels-best", "summary B", "“LN-LSTM reaches the best score” (char-level LM on "
                "19th-century novels: lower test bits/char than LSTM and BN-LSTM)", NAME,
                R.claim_loss_lower(spec, R.BPC_MARGIN, ("none", "batch")), HEADING),
        R.Claim("novels-fast", "summary B", "“LN-LSTM converges fastest” (char-level LM on "
                "19th-century novels: updates to the LSTM's final bits/char)", NAME,
                R.claim_loss_faster(spec, ("none", "batch")), HEADING),
        R.Claim("novels-completion", "summary B", "“LN-LSTM reaches the best accuracy” "
                "(MSR-format 5-way sentence completion of the held-out novels, scored by the "
                "char-level LM)", NAME, partial(R.claim_completion, spec=spec), HEADING,
                paper="qualitative, no number"),
    ]


RECORD = Record(
    NAME, data=REAL, section="summary B",
    claim="LN-LSTM language model converges fastest and reaches the best score, vs LSTM and "
          "BN-LSTM (character-level, 19th-century novels, downloaded), with an MSR-format "
          "completion test of the held-out novels",
    tier=STANDARD, pack=3, configs=configs, claims=claims,
    paper="summary B: LSTM vs BN-LSTM vs LN-LSTM on the MSR Sentence Completion Challenge "
          "(trained on 19th-century Project Gutenberg novels; its questions from Sherlock Holmes "
          "novels)",
    paper_numbers={NAME: "summary B: LN-LSTM converges fastest and reaches the best accuracy on "
                         "MSR Sentence Completion (no number is given)",
                   f"{NAME}_completion": "summary B: LN-LSTM reaches the best accuracy on the MSR "
                                         "Sentence Completion Challenge (no number is given; 5 "
                                         "candidates per question, chance 20%)"},
    data_here={NAME: "ten Project Gutenberg novels from Debian's R packages janeaustenr, "
                     "tokenizers, tidytext: eight for training (6.4 M characters), Persuasion and "
                     "The War of the Worlds held out",
               f"{NAME}_completion": "5-way completion questions in MSR's format built from the "
                                     "held-out novels (Persuasion, The War of the Worlds): the "
                                     "blank the sentence's rarest word seen >= 5 times in the "
                                     "training novels, impostors of its frequency band"})
