"""Summary B's first experiment and paper 3.1 (docs/paper.md, section 6): LN keeps the
hidden-state distribution stable over a long sequence (T >= 100), while the plain LSTM's changes
sharply."""
from __future__ import annotations

from ._record import QUICK, SEEDS, Record, Sweep, config, pick
from .rnn_norms import TASK_NAMES

NAME = "rnn_stability"


def configs(scale: str) -> list:
    """The adding problem at T = 100 (full: 200), read one value pair per step. Per evaluation
    the metrics rows carry, per time step, the mean / std of h_t and of the summed inputs
    a_t = W_x e_t + W_h h_{t-1} on a fixed test probe. quick: LSTM and LN-LSTM only (BN-LSTM's
    per-step loop costs ~10x LN-LSTM's fused kernel at this length); full adds BN-LSTM."""
    norms = pick(scale, tiny=("none", "layer"), quick=("none", "layer"),
                 full=("none", "batch", "layer"))
    T = pick(scale, tiny=100, quick=100, full=200)
    n = pick(scale, tiny=(64, 32), quick=(2000, 256), full=(10000, 1000))
    length = pick(scale, tiny={"steps": 4, "eval_every": 2},
                  quick={"steps": 400, "eval_every": 40}, full={"steps": 3000, "eval_every": 100})
    hidden = pick(scale, tiny=8, quick=48, full=128)
    return [config(dataset="adding", model="rnn_classifier", norm=norm, batch_size=32, seed=seed,
                   optimizer="adam", lr=1e-3 if scale == "full" else 3e-3, grad_clip=10.0,
                   tag=f"adding{T}", data_args={"length": T, "n_train": n[0], "n_test": n[1],
                                                "seed": seed},
                   model_args={"hidden": hidden, "chunk": 1, "embed": 32}, **length)
            for norm in norms for seed in SEEDS[scale]]


def task_claims(tasks: list[tuple[str, str]], R) -> list:
    out = []
    for exp, t in tasks:
        name = TASK_NAMES.get(t, t)
        out.append(R.Claim(f"rnn-hidden-{t}", "summary B; paper 3.1",
                         f"“LN keeps the hidden-state distribution stable, while the plain "
                         f"LSTM's changes sharply” ({name}, T ≥ {R.MIN_HIDDEN_T})", exp,
                         R.claim_rnn_hidden_stable(exp, t),
                         f"RNNs: hidden-state stability on {name}",
                         paper="qualitative: an argument (3.1); summary B: no number"))
    return out


def claims(found, R) -> list:
    """For every task of this experiment found (the adding problem listed even when absent)."""
    return task_claims(found.tasks(NAME) or [(NAME, "adding")], R)


RECORD = Record(
    NAME, position=150, section="summary B exp. 1; 3.1",
    claim="LN keeps the hidden-state distribution stable over a long sequence (T >= 100), while "
          "the plain LSTM's changes sharply",
    tier=QUICK, pack=2, configs=configs, claims=claims,
    sweep=Sweep(6, "test_loss", scored_on="validation loss, mean of the last 3 evaluations"),
    paper="paper 3.1 argues LN stabilizes the hidden-to-hidden dynamics (no experiment of its "
          "own); summary B: a stable hidden-state distribution on IMDb / MSR")
