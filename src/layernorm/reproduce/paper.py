"""The paper's section 6 experiments in reduced form, registered with the runner.

    paper_draw         6.4  DRAW, LSTM vs LN on the cell: test negative ELBO (nats) vs epochs
    paper_reader       6.2  attentive reader, LSTM vs BN-LSTM vs LN-LSTM: validation error vs
                            updates on a generated cloze task
    paper_handwriting  6.5  mixture-density LSTM vs LN-LSTM on generated pen strokes: test NLL
                            vs updates
    paper_charlm       summary B: LSTM vs BN-LSTM vs LN-LSTM character-level language model on
                            the standard library's docstrings: test bits per character vs updates

Presets: ``tiny`` (seconds; tests), ``quick`` (embedded data, 5 seeds, part of ``reproduce
--quick``), ``full`` (the same embedded data at a larger scale: the paper's own data sets —
binarized MNIST, the CNN questions, IAM-OnDB — are not wired here).

Density models (DRAW, handwriting) go through the runner's "regress" task: the registered model
returns ``sqrt(loss + floor)`` per example against zero targets, so the runner's squared error is
the model's loss (nats) plus a constant ``floor`` that makes it non-negative (0 for DRAW, whose
negative ELBO is >= 0; the NLL's lower bound for the mixture density), and ``test_loss`` is the
test set's mean loss. The exact scores are added to each metrics row by ``extra_metrics``.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from ..experiments import Config, register_experiment, register_model
from ..data import docstrings as _docstrings  # noqa: F401  (registers "docstrings")
from ..data import paper_tasks as _paper_tasks  # noqa: F401  (registers the generated tasks)
from ..models import DRAW, AttentiveReader, HandwritingMDN
from .._vocabulary import RNN_NORMS
from ..rnn import LSTM

# quick: 5 seeds (the verdict rules need >= 5 per arm), lengths cut so that 5 seeds cost what 3
# did: measured with /usr/bin/time, `layernorm run NAME --preset quick --jobs 1 --threads 1`, all
# 5 seeds of every arm: DRAW 35, handwriting 31, reader 104, char-LM 76 CPU-s (user + sys), 246
# CPU-s in all (266 s wall on a loaded 2-core machine); the BN-LSTM arms (per-step statistics, a
# Python loop over time steps) are most of the reader's and the char-LM's.
SEEDS = {"tiny": (0,), "quick": (0, 1, 2, 3, 4), "full": (0, 1, 2, 3, 4)}


def _pick(preset: str, **by_preset):
    return by_preset[preset]


class LossAsRegression(nn.Module):
    """Wrap a model whose ``forward`` returns a per-example loss (N,) so the runner's regression
    (squared error against zero targets) trains it: returns ``sqrt(loss + floor)``.

    ``floor`` >= -(the smallest loss the model can return), so the root is real; the gradient of
    the runner's squared error is then exactly the gradient of the loss. A loss below ``-floor``
    would mean the bound is wrong: it raises instead of training on a clamped value.
    """

    def __init__(self, model: nn.Module, floor: float = 0.0):
        super().__init__()
        self.model, self.floor = model, float(floor)

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        loss = self.model(x) if lengths is None else self.model(x, lengths=lengths)
        shifted = loss + self.floor
        if bool((shifted < 0).any()):
            raise RuntimeError(f"{type(self.model).__name__} returned a loss of "
                               f"{float(loss.min()):.4g}, below its lower bound {-self.floor:.4g}; "
                               f"the runner's squared-error form of the loss would be wrong.")
        return shifted.sqrt()


class DrawForRunner(LossAsRegression):
    @torch.no_grad()
    def extra_metrics(self, x: torch.Tensor) -> dict:
        """On the test probe (the runner's first 256 test images): mean reconstruction and KL
        terms of the negative ELBO (nats per image) and their sum."""
        t = self.model.terms(x)
        return {"probe_recon": float(t["recon"].mean()), "probe_kl": float(t["kl"].mean()),
                "probe_nelbo": float((t["recon"] + t["kl"]).mean())}


@register_model("draw", norms=("none", "layer"))
def draw(dataset, norm: str, hidden: int = 64, z_dim: int = 8, glimpses: int = 8):
    """DRAW without attention (``layernorm.models.DRAW``); negative ELBO in nats per image."""
    if len(dataset.input_shape) != 1:
        raise ValueError(f"draw expects flat binary images (N, D), received dataset "
                         f"{dataset.name!r} with input shape {dataset.input_shape}. Use "
                         f"'digits-binary'.")
    return DrawForRunner(DRAW(dataset.input_shape[0], hidden, z_dim, glimpses, norm=norm))


class MdnForRunner(LossAsRegression):
    @torch.no_grad()
    def extra_metrics(self, x: torch.Tensor) -> dict:
        """The exact NLL on the test probe (the runner's first 256 test sequences; the whole test
        set when it has no more): nats per sequence and per scored point."""
        nll = self.model(x)
        return {"test_nll": float(nll.mean()),
                "test_nll_per_point": float(nll.mean() / (x.shape[1] - 1)),
                "probe_sequences": int(x.shape[0])}


@register_model("mdn", norms=RNN_NORMS)
def mdn(dataset, norm: str, hidden: int = 64, layers: int = 2, mixtures: int = 5,
        gain_init: float | None = None):
    """Mixture-density LSTM (``layernorm.models.HandwritingMDN``); NLL in nats per sequence."""
    if len(dataset.input_shape) != 2 or dataset.input_shape[1] != 3:
        raise ValueError(f"mdn expects pen points (T, 3), received dataset {dataset.name!r} with "
                         f"input shape {dataset.input_shape}. Use 'pen-strokes'.")
    length = dataset.input_shape[0]
    model = HandwritingMDN(hidden, layers, mixtures, norm=norm, max_length=length,
                           gain_init=gain_init)
    return MdnForRunner(model, floor=-(length - 1) * model.nll_floor_per_step)


@register_model("reader", norms=RNN_NORMS)
def reader(dataset, norm: str, hidden: int = 64, embed: int = 32,
           gain_init: float | None = None) -> AttentiveReader:
    """The attentive reader (``layernorm.models.AttentiveReader``) on a cloze dataset."""
    if "passage_len" not in dataset.info:
        raise ValueError(f"reader expects a cloze dataset whose info gives passage_len, received "
                         f"{dataset.name!r}. Use 'cloze'.")
    return AttentiveReader(dataset.vocab_size, dataset.num_classes, dataset.info["passage_len"],
                           hidden, embed, norm=norm, gain_init=gain_init)


class CharLM(nn.Module):
    """Character-level LSTM language model: embedding, ``layernorm.LSTM`` (norm none / batch /
    layer), linear logits at every step (N, T, V). ``extra_metrics`` names the corpus read
    (Python version and SHA-256 of the docstring corpus) in every metrics row."""

    def __init__(self, vocab: int, length: int, norm: str, hidden: int, embed: int,
                 corpus: dict):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = LSTM(embed, hidden, batch_first=True, norm=norm, max_length=length)
        self.head = nn.Linear(hidden, vocab)
        self.corpus = corpus

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.head(out)

    def extra_metrics(self, x: torch.Tensor) -> dict:
        return dict(self.corpus)


@register_model("char_lm", norms=RNN_NORMS)
def char_lm(dataset, norm: str, hidden: int = 128, embed: int = 32) -> CharLM:
    if dataset.vocab_size < 1 or len(dataset.input_shape) != 1:
        raise ValueError(f"char_lm expects (T,) character ids, received dataset {dataset.name!r} "
                         f"with input shape {dataset.input_shape}. Use 'docstrings'.")
    corpus = {k: v for k, v in dataset.info.items() if k in ("corpus_python", "corpus_sha256",
                                                             "corpus_characters")}
    return CharLM(dataset.vocab_size, dataset.input_shape[0], norm, hidden, embed, corpus)


# ----------------------------------------------------------------------------- experiments

def _arms(preset: str, dataset: str, model: str, norms: tuple[str, ...], *, batch_size: int,
          model_args: dict, data_args: dict, length: dict, lr_full: float = 1e-3) -> list[Config]:
    """One Config per (norm, seed) with the settings the four experiments share: Adam at 1e-3
    (tiny; ``lr_full`` for full) or 3e-3 (quick), gradients clipped at norm 10."""
    return [Config(dataset=dataset, model=model, norm=norm, batch_size=batch_size, seed=seed,
                   optimizer="adam", lr=_pick(preset, tiny=1e-3, quick=3e-3, full=lr_full),
                   grad_clip=10.0, model_args=dict(model_args), data_args=dict(data_args),
                   **length)
            for norm in norms for seed in SEEDS[preset]]


@register_experiment("paper_draw", section="6.4",
                     claim="DRAW with LN on the LSTM cells reaches a lower test variational bound "
                           "(82.36 -> 82.09 nats, MNIST) about twice as fast as the LSTM")
def paper_draw(preset: str) -> list[Config]:
    model = _pick(preset, tiny={"hidden": 8, "z_dim": 2, "glimpses": 2},
                  quick={"hidden": 64, "z_dim": 8, "glimpses": 8},
                  full={"hidden": 256, "z_dim": 16, "glimpses": 16})
    length = _pick(preset, tiny={"steps": 4, "eval_every": 2}, quick={"epochs": 6},
                   full={"epochs": 100})
    return _arms(preset, "digits-binary", "draw", ("none", "layer"),
                 batch_size=_pick(preset, tiny=16, quick=64, full=128), model_args=model,
                 data_args={"limit_test": 32} if preset == "tiny" else {}, length=length)


@register_experiment("paper_reader", section="6.2",
                     claim="the attentive reader with LN-LSTM trains faster and reaches a lower "
                           "validation error than with LSTM and BN-LSTM")
def paper_reader(preset: str) -> list[Config]:
    data = _pick(preset, tiny={"n_train": 64, "n_test": 32, "n_facts": 3},
                 quick={"n_train": 4000, "n_test": 500, "n_facts": 3},
                 full={"n_train": 20000, "n_test": 2000, "n_facts": 10})
    model = _pick(preset, tiny={"hidden": 8, "embed": 8}, quick={"hidden": 32, "embed": 32},
                  full={"hidden": 128, "embed": 64})
    length = _pick(preset, tiny={"steps": 4, "eval_every": 2},
                   quick={"steps": 250, "eval_every": 25}, full={"steps": 4000, "eval_every": 100})
    return _arms(preset, "cloze", "reader", ("none", "batch", "layer"),
                 batch_size=_pick(preset, tiny=16, quick=32, full=64), model_args=model,
                 data_args=data, length=length)


@register_experiment("paper_handwriting", section="6.5",
                     claim="a mixture-density LN-LSTM reaches the LSTM's final log-likelihood "
                           "much faster (handwriting, IAM-OnDB)")
def paper_handwriting(preset: str) -> list[Config]:
    data = _pick(preset, tiny={"length": 12, "n_train": 16, "n_test": 8},
                 quick={"length": 100, "n_train": 256, "n_test": 64},
                 full={"length": 300, "n_train": 2048, "n_test": 256})
    model = _pick(preset, tiny={"hidden": 8, "layers": 2, "mixtures": 2},
                  quick={"hidden": 48, "layers": 2, "mixtures": 5},
                  full={"hidden": 128, "layers": 3, "mixtures": 10})
    length = _pick(preset, tiny={"steps": 4, "eval_every": 2},
                   quick={"steps": 200, "eval_every": 20}, full={"steps": 3000, "eval_every": 100})
    return _arms(preset, "pen-strokes", "mdn", ("none", "layer"), batch_size=8,
                 model_args=model, data_args=data, length=length)


@register_experiment("paper_charlm", section="summary B",
                     claim="LN-LSTM language model converges fastest and reaches the best score, "
                           "vs LSTM and BN-LSTM (character-level, the standard library's "
                           "docstrings)")
def paper_charlm(preset: str) -> list[Config]:
    data = _pick(preset, tiny={"seq_len": 16, "max_chars": 5000, "limit_train": 64,
                               "limit_test": 16},
                 quick={"seq_len": 16, "max_chars": 200_000},
                 full={"seq_len": 100, "max_chars": None})
    model = _pick(preset, tiny={"hidden": 8, "embed": 8}, quick={"hidden": 64, "embed": 32},
                  full={"hidden": 256, "embed": 64})
    length = _pick(preset, tiny={"steps": 4, "eval_every": 2},
                   quick={"steps": 250, "eval_every": 25}, full={"steps": 5000, "eval_every": 250})
    return _arms(preset, "docstrings", "char_lm", ("none", "batch", "layer"),
                 batch_size=_pick(preset, tiny=8, quick=32, full=64), model_args=model,
                 data_args=data, length=length, lr_full=2e-3)


PAPER_EXPERIMENTS = ("paper_draw", "paper_reader", "paper_handwriting", "paper_charlm")
BITS_PER_NAT = 1 / math.log(2)     # paper_charlm: bits per character = test_loss * BITS_PER_NAT
