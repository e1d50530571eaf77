"""Section 6.2: initializing the LN-LSTM gains to 1.0 is significantly better than 0.1."""
from __future__ import annotations

from ._record import QUICK, SEEDS, Record, Sweep, config
from .rnn_norms import rnn_tasks

NAME = "lstm_gain_init"


def configs(scale: str) -> list:
    t = [t for t in rnn_tasks(scale) if t["tag"] == "mnist1d"][0]
    return [config(dataset=t["dataset"], model="rnn_classifier", norm="layer",
                   batch_size=t["batch_size"], seed=seed, optimizer="adam",
                   lr=1e-3 if scale == "full" else 3e-3, grad_clip=10.0, tag=f"gain{gain:g}",
                   data_args=t["data_args"], model_args={**t["model_args"], "gain_init": gain},
                   **t["length"])
            for gain in (1.0, 0.1) for seed in SEEDS[scale]]


def claims(found, R) -> list:
    return [R.Claim("6.2-gain", "paper 6.2", "“initializing the LN gain to 1.0 is significantly "
                  "better than 0.1” (LN-LSTM)", NAME, R.claim_gain_init(NAME),
                  "6.2 gain initialisation", paper="qualitative, text")]


RECORD = Record(
    NAME, position=160, section="6.2",
    claim="initializing the LN-LSTM gains to 1.0 is significantly better than 0.1",
    tier=QUICK, pack=3, configs=configs, claims=claims,
    sweep=Sweep(5),
    paper="paper 6.2: attentive reader, LN-LSTM 240 units, CNN QA corpus")
