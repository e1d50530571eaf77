"""The reproduction's experiments, registered with the runner, each tagged with the paper section or
summary claim it tests. Presets: ``tiny`` (seconds, tests only), ``quick`` (embedded data, minutes on
2 CPU cores, 5 seeds), ``full`` (the paper's scale where the data can be downloaded).

The report (``layernorm_paper.report``) finds runs by these experiment names; keep them in step.
"""
from __future__ import annotations

from ..experiments import Config, register_experiment
from ..experiments.registry import by_preset as _pick
from . import models  # noqa: F401  (registers convnet and rnn_classifier)

# Five seeds per configuration in quick mode: the verdict rules need >= 3 and their standard
# errors shrink with more. The CNN's BN-vs-LN comparison at batch 128 (a 0.5 pp margin) gets ten.
SEEDS = {"tiny": (0,), "quick": (0, 1, 2, 3, 4), "full": (0, 1, 2, 3, 4)}
FF_SEEDS = SEEDS
CNN128_SEEDS = {"tiny": (0,), "quick": tuple(range(10)), "full": tuple(range(10))}

# How each experiment that compares batch sizes sets the training length of its arms. "to
# convergence": each arm is trained until its test error has flattened (checked in pilot runs;
# the report can check the slope of the last evaluations); "same updates": every arm gets the same
# number of optimizer updates. Every config gives ``steps`` (the update count of its arm).
BUDGETS = {
    "mlp_batch_size": {
        "rule": "to convergence",
        "text": "each batch size trained until its test error flattened: batch 128 for 800 "
                "updates (73 epochs of digits; flat from ~700), batch 4 for 3200 updates "
                "(9 epochs; the noise of Adam at batch 4 remains)"},
    "cnn_batch_size": {
        "rule": "to convergence",
        "text": "batch 128 for 600 updates (55 epochs; flat from ~450), batch 4 for 2400 updates "
                "(7 epochs), batch 1 for 2400 updates (as far as the budget allows: 1.7 epochs)"},
}


# --- 1. section 6.6: batch-size sensitivity of an MLP ------------------------------------------

@register_experiment("mlp_batch_size", section="6.6",
                     claim="LN is robust to the batch size and trains faster than BN; BN suffers "
                           "at batch 4 (MLP, Adam, batch 128 vs 4)")
def mlp_batch_size(preset: str) -> list[Config]:
    """Arms: none, batch (BN on the hidden layers, as LN), batch with tag "bnall" (BN on all
    layers, the logits too: the paper's wording), layer; full adds weight and rms. Each evaluated
    every ``eval_every`` updates with ``steps = eval_every * 2**k``, so the log-spaced update
    counts eval_every * 2**j are all rows (for "trains faster" on a log scale)."""
    norms = _pick(preset, tiny=("batch", "layer"), quick=("none", "batch", "layer"),
                  full=("none", "batch", "layer", "weight", "rms"))
    dataset = _pick(preset, tiny="digits", quick="digits", full="mnist")
    hidden = _pick(preset, tiny=[16, 16], quick=[128, 128], full=[1000, 1000])
    # (steps, eval_every) per batch size: see BUDGETS
    length = _pick(preset, tiny={128: (8, 2), 4: (8, 2)}, quick={128: (800, 25), 4: (3200, 50)},
                   full={128: (12800, 100), 4: (51200, 400)})
    arms = [(norm, "", False) for norm in norms] + [("batch", "bnall", True)]
    out = []
    for norm, tag, bn_logits in arms:
        for bs in (128, 4):
            steps, every = length[bs]
            for seed in FF_SEEDS[preset]:
                args = {"hidden": hidden, "unbiased": bs < 16}   # paper: n - 1 at batch 4
                if bn_logits:
                    args["bn_logits"] = True
                out.append(Config(dataset=dataset, model="repro_mlp", norm=norm, batch_size=bs,
                                  seed=seed, optimizer="adam", lr=1e-3, tag=tag,
                                  steps=steps, eval_every=every, checkpoint_every=steps // 4,
                                  data_args=_split(dataset, seed), model_args=args))
    return out


def _split(dataset: str, seed: int) -> dict:
    """The test split varies with the seed where the data allows (digits: a seeded split)."""
    return {"split_seed": seed} if dataset.startswith("digits") else {}


# --- 2. section 6.7 + summary B's claim: a ConvNet at batch 128, 4, 1 --------------------------------

@register_experiment("cnn_batch_size", section="6.7 + summary B",
                     claim="ConvNet: LN beats no normalization but BN beats LN (paper); BN wins "
                           "slightly at batch 128 and collapses at batch 1 and 4 while LN stays "
                           "stable (summary B)")
def cnn_batch_size(preset: str) -> list[Config]:
    dataset = _pick(preset, tiny="digits-image", quick="digits-image", full="mnist")
    channels = _pick(preset, tiny=[4, 8], quick=[16, 32, 32], full=[32, 64, 64])
    batches = _pick(preset, tiny=(128, 1), quick=(128, 4, 1), full=(128, 4, 1))
    # (steps, eval_every) per batch size: see BUDGETS
    length = _pick(preset, tiny={128: (6, 3), 1: (6, 3)},
                   quick={128: (600, 25), 4: (2400, 100), 1: (2400, 100)},
                   full={128: (6000, 250), 4: (30000, 1000), 1: (30000, 1000)})
    out = []
    for norm in ("none", "batch", "layer"):
        for bs in batches:
            steps, every = length[bs]
            seeds = CNN128_SEEDS[preset] if bs == 128 and norm != "none" else FF_SEEDS[preset]
            for seed in seeds:
                data_args = {"view": "image"} if preset == "full" else _split(dataset, seed)
                out.append(Config(dataset=dataset, model="convnet", norm=norm, batch_size=bs,
                                  seed=seed, optimizer="adam", lr=1e-3, steps=steps,
                                  eval_every=every, checkpoint_every=steps // 4,
                                  data_args=data_args,
                                  model_args={"channels": channels, "unbiased": bs < 16}))
    return out


# --- 3. RNNs: LSTM vs BN-LSTM vs LN-LSTM (seed experiment 1, paper 6.2 / 6.5) -------------------

def rnn_tasks(preset: str) -> list[dict]:
    """Sequence tasks: pixel-sequence digits (one fixed permutation), MNIST-1D, and a long
    synthetic task (the adding problem). Each: dataset, data_args, model_args, tag, length."""
    if preset == "tiny":
        return [dict(tag="mnist1d", dataset="mnist1d-seq", data_args={"num_samples": 400},
                     model_args={"hidden": 8, "chunk": 4, "embed": 8},
                     length={"steps": 4, "eval_every": 2},
                     batch_size=16)]
    big = preset == "full"
    # quick: 600 Adam steps of batch 32, evaluated every 30 (20 evaluations); hidden 48; the
    # digits and MNIST-1D sequences are read 4 values per step (16 and 10 steps), the adding
    # problem 1 per step (30).
    # BN-LSTM's per-step statistics make it the slowest model: the adding length sets the cost.
    length = {"steps": 3000, "eval_every": 100} if big else {"steps": 600, "eval_every": 30}
    model = {"hidden": 128, "chunk": 1, "embed": 64} if big else \
        {"hidden": 48, "chunk": 4, "embed": 32}
    return [
        dict(tag="pixels", dataset="digits-pixels", data_args={"permute": True},
             model_args=model, length=length, batch_size=32),
        dict(tag="mnist1d", dataset="mnist1d-seq", data_args={}, model_args=model, length=length,
             batch_size=32),
        dict(tag="adding", dataset="adding",
             data_args={"length": 200, "n_train": 10000, "n_test": 1000} if big else
             {"length": 30, "n_train": 2000, "n_test": 500},
             model_args={**model, "chunk": 1}, length=length, batch_size=32),
    ]


@register_experiment("rnn_norms", section="summary B exp. 1; 6.2/6.5; 3.1",
                     claim="LN-LSTM converges fastest, reaches the best accuracy and keeps the "
                           "hidden-state distribution stable, vs LSTM and BN-LSTM")
def rnn_norms(preset: str) -> list[Config]:
    out = []
    for t in rnn_tasks(preset):
        for norm in ("none", "batch", "layer"):
            for seed in SEEDS[preset]:
                out.append(Config(dataset=t["dataset"], model="rnn_classifier", norm=norm,
                                  batch_size=t["batch_size"], seed=seed, optimizer="adam",
                                  lr=1e-3 if preset == "full" else 3e-3, grad_clip=10.0,
                                  tag=t["tag"], data_args=_seeded(t, seed),
                                  model_args=dict(t["model_args"]), **t["length"]))
    return out


def _seeded(task: dict, seed: int) -> dict:
    """The task's data args with a test split that varies with the seed where that is cheap:
    digits (a seeded split) and the adding problem (a seeded generated set). MNIST-1D keeps its
    one generated set (generating it takes seconds per seed)."""
    extra = {"digits-pixels": {"split_seed": seed}, "adding": {"seed": seed}}
    return {**task["data_args"], **extra.get(task["dataset"], {})}


# --- 3b. hidden-state stability on long sequences (seed experiment 1, paper 3.1) ----------------

@register_experiment("rnn_stability", section="summary B exp. 1; 3.1",
                     claim="LN keeps the hidden-state distribution stable over a long sequence "
                           "(T >= 100), while the plain LSTM's changes sharply")
def rnn_stability(preset: str) -> list[Config]:
    """The adding problem at T = 100 (full: 200), read one value pair per step. Per evaluation
    the metrics rows carry, per time step, the mean / std of h_t and of the summed inputs
    a_t = W_x e_t + W_h h_{t-1} on a fixed test probe. quick: LSTM and LN-LSTM only (BN-LSTM's
    per-step loop costs ~10x LN-LSTM's fused kernel at this length); full adds BN-LSTM."""
    norms = _pick(preset, tiny=("none", "layer"), quick=("none", "layer"),
                  full=("none", "batch", "layer"))
    T = _pick(preset, tiny=100, quick=100, full=200)
    n = _pick(preset, tiny=(64, 32), quick=(2000, 256), full=(10000, 1000))
    length = _pick(preset, tiny={"steps": 4, "eval_every": 2},
                   quick={"steps": 400, "eval_every": 40}, full={"steps": 3000, "eval_every": 100})
    hidden = _pick(preset, tiny=8, quick=48, full=128)
    return [Config(dataset="adding", model="rnn_classifier", norm=norm, batch_size=32, seed=seed,
                   optimizer="adam", lr=1e-3 if preset == "full" else 3e-3, grad_clip=10.0,
                   tag=f"adding{T}", data_args={"length": T, "n_train": n[0], "n_test": n[1],
                                                 "seed": seed},
                   model_args={"hidden": hidden, "chunk": 1, "embed": 32}, **length)
            for norm in norms for seed in SEEDS[preset]]


# --- 4. section 6.2: LN-LSTM gain initialisation 1.0 vs 0.1 ------------------------------------

@register_experiment("lstm_gain_init", section="6.2",
                     claim="initializing the LN-LSTM gains to 1.0 is significantly better than 0.1")
def lstm_gain_init(preset: str) -> list[Config]:
    t = [t for t in rnn_tasks(preset) if t["tag"] == "mnist1d"][0]
    return [Config(dataset=t["dataset"], model="rnn_classifier", norm="layer",
                   batch_size=t["batch_size"], seed=seed, optimizer="adam",
                   lr=1e-3 if preset == "full" else 3e-3, grad_clip=10.0, tag=f"gain{gain:g}",
                   data_args=t["data_args"], model_args={**t["model_args"], "gain_init": gain},
                   **t["length"])
            for gain in (1.0, 0.1) for seed in SEEDS[preset]]


# --- 5. seed experiment 1 on its own data (downloads; full mode only) ---------------------------

@register_experiment("rnn_downloads", section="summary B exp. 1", needs_download=True,
                     claim="LSTM vs BN-LSTM vs LN-LSTM on IMDb sentiment and on a character-level "
                           "language model (tiny-shakespeare, standing in for the MSR Sentence "
                           "Completion Challenge, which has no stable public download)")
def rnn_downloads(preset: str) -> list[Config]:
    tasks = [dict(tag="imdb", dataset="imdb", data_args={"vocab_size": 20000, "max_len": 200},
                  model_args={"hidden": 128, "embed": 128}, batch_size=32,
                  length={"steps": 4000, "eval_every": 250}),
             dict(tag="charlm", dataset="tiny-shakespeare", data_args={"seq_len": 100},
                  model_args={"hidden": 256, "embed": 64}, batch_size=32,
                  length={"steps": 4000, "eval_every": 250})]
    if preset != "full":     # tiny / quick: a few steps, for checking the wiring only
        for t in tasks:
            t["length"] = {"steps": 4, "eval_every": 2}
    return [Config(dataset=t["dataset"], model="rnn_classifier", norm=norm,
                   batch_size=t["batch_size"], seed=seed, optimizer="adam", lr=1e-3,
                   grad_clip=10.0, tag=t["tag"], data_args=t["data_args"],
                   model_args=dict(t["model_args"]), **t["length"])
            for t in tasks for norm in ("none", "batch", "layer") for seed in SEEDS[preset]]
