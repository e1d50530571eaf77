"""Summary B's RNN claims (docs/paper.md, section 6) on permuted sequential MNIST: LSTM vs BN-LSTM
vs LN-LSTM reading the real MNIST digits one pixel per step in a fixed random order — LN-LSTM
converges fastest and reaches the best accuracy. Each pixel goes through a learned embedding
(``tanh(Linear(1 -> embed))``, the same for every arm) before the LSTM: LN-LSTM normalizes the
input term ``W_x x_t``, and of a raw scalar input that term keeps only the sign. At the quick
scale the digits are averaged over 2x2 blocks to 14x14 (196 steps; the 28x28 form, 784 steps, is
the full scale's and Cooijmans et al.'s). It runs in ``reproduce --paper`` only: its 5 seeds at the
quick scale cost more than the default tier's time holds (docs/reproduce.md, "Cost"). The model is ``layernorm_paper.models.classifiers``'
``rnn_classifier``."""
from __future__ import annotations

from ._record import PAPER, REAL, SEEDS, Record, config, pick

NAME = "rnn_pixels_mnist"
TASK = "mnist"
HEADING = "Summary B: LSTM vs BN-LSTM vs LN-LSTM on permuted pixel-by-pixel MNIST (real digits)"


def configs(scale: str) -> list:
    """One fixed pixel permutation (``permute_seed`` 0) for every run; Adam at 1e-3 for every
    arm (not swept), gradients clipped at 10, batch 32; 5 seeds. The quick scale's test set is
    the first 2,000 of MNIST's 10,000 test digits (0.05 pp each), for the cost of scoring
    196-step sequences at each evaluation."""
    data = pick(scale, tiny={"side": 14, "limit_train": 256, "limit_test": 64},
                quick={"side": 14, "limit_test": 2000}, full={"side": 28})
    model = pick(scale, tiny={"hidden": 8, "embed": 4}, quick={"hidden": 64, "embed": 16},
                 full={"hidden": 100, "embed": 32})
    length = pick(scale, tiny={"steps": 4, "eval_every": 2},
                  quick={"steps": 1200, "eval_every": 100},
                  full={"steps": 20000, "eval_every": 1000})
    return [config(dataset=TASK, model="rnn_classifier", norm=norm, batch_size=32, seed=seed,
                   optimizer="adam", lr=1e-3, grad_clip=10.0, tag="pixels",
                   data_args={"view": "pixels", "permute": True, **data},
                   model_args={"chunk": 1, **model}, **length)
            for norm in ("none", "batch", "layer") for seed in SEEDS[scale]]


def claims(found, R) -> list:
    """Both at the run's fixed budget: the quick scale's arms are still learning at every
    update count the default tier affords (docs/reproduce.md, "Budgets")."""
    return [
        R.Claim("pmnist-fast", "summary B", "“LSTM with LN converges fastest” (permuted "
                "pixel-by-pixel MNIST: updates to the LSTM's final test error)", NAME,
                R.claim_rnn_fastest(NAME, TASK), HEADING, paper="qualitative, no number"),
        R.Claim("pmnist-best", "summary B", "“LN-LSTM reaches the best accuracy” (permuted "
                "pixel-by-pixel MNIST: the lowest test error after the same fixed number of "
                "updates)", NAME, R.claim_rnn_best(NAME, TASK, fixed_budget=True), HEADING,
                paper="qualitative, no number"),
    ]


RECORD = Record(
    NAME, position=140, data=REAL, section="summary B exp. 1",
    claim="LN-LSTM converges fastest and reaches the best accuracy, vs LSTM and BN-LSTM, on "
          "permuted pixel-by-pixel MNIST (the real digits, downloaded)",
    tier=PAPER, pack=3, configs=configs, claims=claims,
    paper="summary B: LSTM vs BN-LSTM vs LN-LSTM (IMDb, MSR Sentence Completion; no pixel "
          "task); Cooijmans et al. (2016), BN-LSTM's paper: permuted MNIST, 784 steps, "
          "100 units",
    paper_numbers={NAME: "summary B: LN-LSTM converges fastest and reaches the best accuracy "
                         "(no number is given)"},
    data_here={NAME: "MNIST (60,000 / 10,000), downloaded, averaged over 2x2 blocks to 14x14 "
                     "and read one grey level per step (196 steps) in one fixed random order; "
                     "a learned 16-unit embedding of each pixel, hidden 64, 1,200 updates of "
                     "batch 32 (0.64 epoch), the first 2,000 test digits (quick scale); full "
                     "scale: 28x28 (784 steps), hidden 100, 20,000 updates"})
