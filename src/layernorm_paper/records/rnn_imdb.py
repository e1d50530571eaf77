"""Summary B's first experiment on its own data (docs/paper.md, section 6): LSTM vs BN-LSTM vs
LN-LSTM sentiment classifiers on IMDb (Maas et al. 2011) — LN-LSTM converges fastest and reaches
the best accuracy — in the default tier, on the real reviews: the original archive's train/test
split, or where only the package-index copy is reachable, its seeded stratified split
(docs/runner.md, "Downloads"). The model is ``layernorm_paper.models.classifiers``'
``rnn_classifier`` (word embedding, then the LSTM, then a linear layer on the last step's h)."""
from __future__ import annotations

from ._record import EMBEDDED, REAL, SEEDS, Record, config, pick
from .rnn_stability import task_claims

NAME = "rnn_imdb"
TASK = "imdb"
HEADING = "Summary B: LSTM vs BN-LSTM vs LN-LSTM on IMDb sentiment (real reviews)"
# paper 3.1's gradient growth: the sequence lengths it is measured at (``reproduce.growth``)
GROWTH_LENGTHS = (50, 100, 200, 500, 1000)
GROWTH_HEADING = "Paper 3.1: the backward Jacobian's growth with the sequence length"


def configs(scale: str) -> list:
    """Each review's last ``max_len`` words (its verdict is usually at its end), a 5,000-word
    vocabulary; Adam, gradients clipped at 10; 5 seeds. The quick scale's test set is the first
    2,500 test reviews (0.04 pp each), for the cost of the 15 evaluations of each run."""
    data = pick(scale,
                tiny={"vocab_size": 200, "max_len": 12, "keep": "last", "limit_train": 256,
                      "limit_test": 64},
                quick={"vocab_size": 5000, "max_len": 100, "keep": "last", "limit_test": 2500},
                full={"vocab_size": 20000, "max_len": 400, "keep": "last"})
    model = pick(scale, tiny={"hidden": 8, "embed": 8}, quick={"hidden": 64, "embed": 64},
                 full={"hidden": 128, "embed": 128})
    length = pick(scale, tiny={"steps": 4, "eval_every": 2},
                  quick={"steps": 1500, "eval_every": 100},
                  full={"steps": 4000, "eval_every": 250})
    return [config(dataset="imdb", model="rnn_classifier", norm=norm,
                   batch_size=pick(scale, tiny=16, quick=32, full=32), seed=seed,
                   optimizer="adam", lr=pick(scale, tiny=1e-3, quick=3e-3, full=1e-3),
                   grad_clip=10.0, tag=TASK, data_args=dict(data), model_args=dict(model),
                   **length)
            for norm in ("none", "batch", "layer") for seed in SEEDS[scale]]


def claims(found, R) -> list:
    return [
        R.Claim("imdb-fast", "summary B", "“LSTM with LN converges fastest” (IMDb sentiment, "
                "the real reviews: updates to the LSTM's final test error)", NAME,
                R.claim_rnn_fastest(NAME, TASK), HEADING),
        R.Claim("imdb-best", "summary B", "“LN-LSTM reaches the best accuracy” (IMDb sentiment, "
                "the real reviews)", NAME, R.claim_rnn_best(NAME, TASK), HEADING),
        # the hidden-state stability on these same runs (T = the reviews' last 100 words), judged
        # only where both arms learned (the rule's learning guard)
        *task_claims([(NAME, TASK)], R),
        # paper 3.1 where it lives: the backward Jacobian's growth with T, measured by
        # `layernorm reproduce` after these runs (layernorm_paper.reproduce.growth)
        *(R.Claim(f"growth-{stage}", "paper 3.1", f"“much more stable hidden-to-hidden "
                  f"dynamics” ({what}: LN-LSTM's |dL/dW_hh| spans ≥ {R.GROWTH_MARGIN:g} decade "
                  f"less than {others}'s over T = {GROWTH_LENGTHS[0]} .. "
                  f"{GROWTH_LENGTHS[-1]})", NAME,
                  R.claim_growth_stable(stage, NAME), GROWTH_HEADING,
                  paper="qualitative: an argument (3.1), no measurement", data=data)
          # at initialization the models read random inputs: no data of the source's
          for stage, what, others, data in (
              ("init", "at initialization", "LSTM's and LN-GRU", "n/a"),
              ("trained", "after training on IMDb", "LSTM", REAL))),
    ]


RECORD = Record(
    NAME, position=130, data=REAL, section="summary B exp. 1",
    claim="LN-LSTM converges fastest and reaches the best accuracy, vs LSTM and BN-LSTM, on "
          "IMDb sentiment (the real reviews, downloaded)",
    tier=EMBEDDED, pack=2, configs=configs, claims=claims,
    paper="summary B: LSTM vs BN-LSTM vs LN-LSTM on IMDb sentiment (no sizes or numbers given)",
    paper_numbers={NAME: "summary B: LN-LSTM converges fastest and reaches the best accuracy "
                         "(no number is given)"},
    data_here={NAME: "IMDb (Maas et al. 2011), downloaded: the original's 25,000 / 25,000 split, "
                     "or the npm copy's seeded stratified split of its 49,582 distinct reviews "
                     "(24,791 / 24,791); each review's last 100 words, 5,000-word vocabulary, "
                     "hidden 64, 1,500 updates of batch 32 (quick scale)"})
