"""The reproduction's experiments, registered with the runner, each tagged with the paper section or
seed claim it tests. Presets: ``tiny`` (seconds, tests only), ``quick`` (embedded data, minutes on
2 CPU cores, 5 seeds), ``full`` (the paper's scale where the data can be downloaded).

The report (``layernorm.report``) finds runs by these experiment names; keep them in step.
"""
from __future__ import annotations

from ..experiments import Config, register_experiment
from . import models  # noqa: F401  (registers convnet and rnn_classifier)

# Five seeds per configuration in quick mode: the verdict rules need >= 3 and their standard
# errors shrink with more (measured: the quick preset costs ~4 CPU-s per RNN run).
SEEDS = {"tiny": (0,), "quick": (0, 1, 2, 3, 4), "full": (0, 1, 2)}
FF_SEEDS = SEEDS


def _pick(preset: str, **by_preset):
    return by_preset[preset]


# --- 1. section 6.6: batch-size sensitivity of an MLP ------------------------------------------

@register_experiment("mlp_batch_size", section="6.6",
                     claim="LN is robust to the batch size and trains faster than BN; BN suffers "
                           "at batch 4 (MLP, Adam, batch 128 vs 4)")
def mlp_batch_size(preset: str) -> list[Config]:
    every = ("none", "batch", "layer", "weight", "rms")
    norms = _pick(preset, tiny=("batch", "layer"), quick=every, full=every)
    dataset = _pick(preset, tiny="digits", quick="digits", full="mnist")
    hidden = _pick(preset, tiny=[16, 16], quick=[128, 128], full=[1000, 1000])
    length = _pick(preset, tiny={"steps": 6, "eval_every": 3}, quick={"epochs": 8},
                   full={"epochs": 20})
    return [Config(dataset=dataset, model="mlp", norm=norm, batch_size=bs, seed=seed,
                   optimizer="adam", lr=1e-3,
                   # the paper used the unbiased variance for batch norm at batch size 4
                   model_args={"hidden": hidden, "unbiased": bs < 16}, **length)
            for norm in norms for bs in (128, 4) for seed in FF_SEEDS[preset]]


# --- 2. section 6.7 + seed claim: a ConvNet at batch 128, 4, 1 --------------------------------

@register_experiment("cnn_batch_size", section="6.7 + seed 004",
                     claim="ConvNet: LN beats no normalization but BN beats LN (paper); BN wins "
                           "slightly at batch 128 and collapses at batch 1 and 4 while LN stays "
                           "stable (seed)")
def cnn_batch_size(preset: str) -> list[Config]:
    dataset = _pick(preset, tiny="digits-image", quick="digits-image", full="mnist")
    channels = _pick(preset, tiny=[4, 8], quick=[16, 32, 32], full=[32, 64, 64])
    batches = _pick(preset, tiny=(128, 1), quick=(128, 4, 1), full=(128, 4, 1))
    # Each batch size is trained until its error has flattened (a batch-128 epoch is 11 steps on
    # digits, a batch-1 epoch 1437): the claims are about what each batch size reaches.
    length = {
        "tiny": lambda bs: {"steps": 6, "eval_every": 3},
        "quick": lambda bs: {128: {"epochs": 30}, 4: {"epochs": 3},
                             1: {"epochs": 2, "eval_every": 479}}[bs],
        "full": lambda bs: {"epochs": 10},
    }[preset]
    return [Config(dataset=dataset, model="convnet", norm=norm, batch_size=bs, seed=seed,
                   optimizer="adam", lr=1e-3,
                   data_args={"view": "image"} if preset == "full" else {},
                   model_args={"channels": channels, "unbiased": bs < 16}, **length(bs))
            for norm in ("none", "batch", "layer") for bs in batches for seed in FF_SEEDS[preset]]


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
    # quick: 600 Adam steps of batch 32, evaluated every 25; hidden 48; the digits and MNIST-1D
    # sequences are read 4 values per step (16 and 10 steps), the adding problem 1 per step (30).
    # BN-LSTM's per-step statistics make it the slowest model: the adding length sets the cost.
    length = {"steps": 3000, "eval_every": 100} if big else {"steps": 600, "eval_every": 25}
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


@register_experiment("rnn_norms", section="seed 004 exp. 1; 6.2/6.5; 3.1",
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
                                  tag=t["tag"], data_args=t["data_args"],
                                  model_args=dict(t["model_args"]), **t["length"]))
    return out


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

@register_experiment("rnn_downloads", section="seed 004 exp. 1", needs_download=True,
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
