"""The paper's section 6 experiments in reduced form: their models, registered with the runner.
The experiments themselves (configs per preset, tiers, claims, the paper's numbers) are records,
``layernorm_paper.records``, registered by ``reproduce.experiments``.

    paper_draw         6.4  DRAW, LSTM vs LN on the cell: test negative ELBO (nats) vs epochs
    paper_reader       6.2  attentive reader, LSTM vs BN-LSTM vs LN-LSTM: validation error vs
                            updates on a generated cloze task
    paper_handwriting  6.5  mixture-density LSTM vs LN-LSTM on generated pen strokes: test NLL
                            vs updates
    paper_charlm       summary B (docs/paper.md): LSTM vs BN-LSTM vs LN-LSTM character-level
                            language model on the standard library's docstrings: test bits per
                            character vs updates

Presets: ``tiny`` (seconds; tests), ``quick`` (embedded data, 5 seeds, run by ``reproduce
--preset standard``), ``full`` (the paper's data where it can be downloaded: DRAW on MNIST,
dynamically binarized, the reader on the CNN questions of the DeepMind Q&A corpus; handwriting stays
on generated strokes, IAM-OnDB being available on registration only; the char-LM on the whole
docstring corpus).

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

from .. import records
from ..experiments import register_model
from ..records._record import SEEDS, arms  # noqa: F401  (shared with order.py)
from ..data import docstrings as _docstrings  # noqa: F401  (registers "docstrings")
from ..data import paper_tasks as _paper_tasks  # noqa: F401  (registers the generated tasks)
from ..data.completion import CANDIDATES, CHANCE, completion_test
from ..models import DRAW, AttentiveReader, HandwritingMDN
from layernorm.vocabulary import RNN_NORMS
from layernorm.rnn import LSTM
from .models import RNN_TRAIN_SAMPLE, Scored

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
    """DRAW without attention (``layernorm_paper.models.DRAW``); negative ELBO in nats per image."""
    if len(dataset.input_shape) != 1:
        raise ValueError(f"draw expects flat binary images (N, D), received dataset "
                         f"{dataset.name!r} with input shape {dataset.input_shape}. Use "
                         f"'digits-binary', 'binarized-mnist' or 'mnist' with "
                         f"binarize='dynamic'.")
    return DrawForRunner(DRAW(dataset.input_shape[0], hidden, z_dim, glimpses, norm=norm,
                              binarize=dataset.info.get("binarize") == "dynamic"))


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
        gain_init: float | None = None, embed: int = 32):
    """Mixture-density LSTM (``layernorm_paper.models.HandwritingMDN``); NLL in nats per sequence."""
    if len(dataset.input_shape) != 2 or dataset.input_shape[1] != 3:
        raise ValueError(f"mdn expects pen points (T, 3), received dataset {dataset.name!r} with "
                         f"input shape {dataset.input_shape}. Use 'pen-strokes'.")
    length = dataset.input_shape[0]
    model = HandwritingMDN(hidden, layers, mixtures, norm=norm, max_length=length,
                           gain_init=gain_init, embed=embed)
    return MdnForRunner(model, floor=-(length - 1) * model.nll_floor_per_step)


class ScoredReader(AttentiveReader, Scored):
    """The attentive reader with the fair scores of the reproduction (``Scored``) in every
    metrics row: for BN-LSTM the test error with population statistics recomputed by
    ``layernorm.recompute_batch_stats`` from one pass over a training sample (``eval_test_*``)
    beside the running-average (EMA) score (the runner's ``test_*``); for every norm the
    eval-mode training NLL. Parameters and state dict are the reader's own."""

    def extra_metrics(self, x: torch.Tensor) -> dict:
        return self.scores()


@register_model("reader", norms=RNN_NORMS)
def reader(dataset, norm: str, hidden: int = 64, embed: int = 32,
           gain_init: float | None = None) -> ScoredReader:
    """The attentive reader (``layernorm_paper.models.AttentiveReader``) on a cloze dataset."""
    if "passage_len" not in dataset.info:
        raise ValueError(f"reader expects a cloze dataset whose info gives passage_len, received "
                         f"{dataset.name!r}. Use 'cloze' or 'cnn-questions'.")
    model = ScoredReader(dataset.vocab_size, dataset.num_classes, dataset.info["passage_len"],
                         hidden, embed, norm=norm, gain_init=gain_init)
    model._attach(dataset, norm, train_sample=RNN_TRAIN_SAMPLE)
    return model


class CharLM(Scored):
    """Character-level LSTM language model: embedding, ``layernorm.LSTM`` (norm none / batch /
    layer), linear logits at every step (N, T, V).

    ``extra_metrics`` adds to every metrics row the corpus read (Python version and SHA-256 of the
    docstring corpus) and the 5-way sentence-completion accuracy (``layernorm_paper.data.completion``):
    each question's five completed sentences scored by their total log-likelihood, the best one
    picked (``completion_accuracy``). With ``population_scoring`` also the fair scores
    (``Scored``: BN-LSTM with population statistics, ``eval_*``), and the completion accuracy
    with the same statistics; without it BN-LSTM is scored with its running averages
    (``bn_scoring = "ema"``), as the runner's ``test_loss`` always is."""

    def __init__(self, vocab: int, length: int, norm: str, hidden: int, embed: int,
                 corpus: dict, completion: dict | None = None, population_scoring: bool = True):
        super().__init__()
        self.embed = nn.Embedding(vocab, embed)
        self.lstm = LSTM(embed, hidden, batch_first=True, norm=norm, max_length=length)
        self.head = nn.Linear(hidden, vocab)
        self.corpus, self.population_scoring = corpus, population_scoring
        self.__dict__["_completion"] = completion       # not state: checkpoints stay the LM's

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.embed(x))
        return self.head(out)

    @torch.no_grad()
    def sequence_log_likelihood(self, ids: torch.Tensor, lengths: torch.Tensor,
                                batch: int = 256) -> torch.Tensor:
        """(N,) total log-likelihood (nats) of each right-padded sequence of character ids: the
        sum over t = 1 .. length - 1 of log p(ids[t] | ids[:t]) (the first character is given).
        Sequences are scored in batches of similar length, each cut to its longest."""
        dev = next(self.parameters()).device
        order = torch.argsort(lengths, stable=True)
        out = torch.empty(len(ids))
        for i in range(0, len(ids), batch):
            rows = order[i:i + batch]
            n = lengths[rows].to(dev)
            x = ids[rows, :int(n.max())].to(dev)
            logp = torch.log_softmax(self(x[:, :-1]).float(), -1)
            tok = logp.gather(-1, x[:, 1:, None]).squeeze(-1)          # (B, L - 1)
            steps = torch.arange(1, x.shape[1], device=dev)[None]
            out[rows] = (tok * (steps < n[:, None])).sum(1).cpu()
        return out

    def completion_accuracy(self) -> float:
        """The fraction of completion questions whose answer's sentence scores highest."""
        c = self._completion
        scores = self.sequence_log_likelihood(c["ids"], c["lengths"]).view(-1, CANDIDATES)
        return float((scores.argmax(1) == c["answers"]).float().mean())

    def extra_metrics(self, x: torch.Tensor) -> dict:
        out = dict(self.corpus)
        c = self._completion
        if c is not None:
            out.update({f"completion_{k}": v for k, v in c["info"].items()})
        if self.population_scoring:
            probe = None if c is None else \
                (lambda m: {"completion_accuracy": m.completion_accuracy()})
            return {**out, **self.scores(probe=probe)}
        if self._scoring["norm"] == "batch":
            out["bn_scoring"] = "ema"
        if c is not None:
            was_training = self.training
            self.eval()
            out["completion_accuracy"] = round(self.completion_accuracy(), 7)
            self.train(was_training)
        return out


def encode_completion(questions: list[dict], alphabet: str) -> dict:
    """The completed sentences of ``questions`` as right-padded character ids (unknown
    characters: id 0, as the docstring dataset), their lengths and the answers."""
    table = {ch: i + 1 for i, ch in enumerate(alphabet)}
    texts = [q["left"] + w + q["right"] for q in questions for w in q["candidates"]]
    width = max(len(t) for t in texts)
    ids = torch.zeros(len(texts), width, dtype=torch.long)
    for i, t in enumerate(texts):
        ids[i, :len(t)] = torch.tensor([table.get(ch, 0) for ch in t])
    return {"ids": ids, "lengths": torch.tensor([len(t) for t in texts]),
            "answers": torch.tensor([q["answer"] for q in questions])}


@register_model("char_lm", norms=RNN_NORMS)
def char_lm(dataset, norm: str, hidden: int = 128, embed: int = 32,
            completion_questions: int = 100, population_scoring: bool = True) -> CharLM:
    """The character-level LM; with ``completion_questions`` > 0 (docstring corpus only) it is
    also scored on that many 5-way sentence-completion questions (``layernorm_paper.data.completion``,
    built from the same corpus' held-out split) at every evaluation. ``population_scoring``:
    BN-LSTM also scored with population statistics at every evaluation (see ``CharLM``)."""
    if dataset.vocab_size < 1 or len(dataset.input_shape) != 1:
        raise ValueError(f"char_lm expects (T,) character ids, received dataset {dataset.name!r} "
                         f"with input shape {dataset.input_shape}. Use 'docstrings'.")
    info = dataset.info
    corpus = {k: v for k, v in info.items() if k in ("corpus_python", "corpus_sha256",
                                                     "corpus_characters")}
    completion = None
    if completion_questions:
        if "alphabet" not in info or "corpus_max_chars" not in info:
            raise ValueError(f"char_lm's sentence-completion test is built from the docstring "
                             f"corpus, received dataset {dataset.name!r}. Use 'docstrings', or "
                             f"pass model_args completion_questions=0.")
        questions, test = completion_test(info["corpus_max_chars"],
                                          test_every=info["test_every"],
                                          n_questions=completion_questions)
        completion = {**encode_completion(questions, info["alphabet"]),
                      "info": {"chance": CHANCE, "questions": test["questions"],
                               "sha256": test["sha256"], "python": test["python"]}}
    model = CharLM(dataset.vocab_size, dataset.input_shape[0], norm, hidden, embed, corpus,
                   completion, population_scoring)
    model._attach(dataset, norm, train_sample=RNN_TRAIN_SAMPLE)
    return model


# ----------------------------------------------------------------------------- experiments

# Registered from their records (configs, claims, tiers, the paper's numbers) by
# ``reproduce.experiments``: ``layernorm_paper.records``.
PAPER_EXPERIMENTS = ("paper_draw", "paper_reader", "paper_handwriting", "paper_charlm")
paper_draw, paper_reader, paper_handwriting, paper_charlm = (
    records.RECORDS[n].configs for n in PAPER_EXPERIMENTS)   # their configs, by name

# The papers' data sets that no preset downloads, with the reason (the report lists them as not
# run; the experiment named runs on a stand-in).
NOT_DOWNLOADED = records.not_downloaded()
BITS_PER_NAT = 1 / math.log(2)     # paper_charlm: bits per character = test_loss * BITS_PER_NAT
