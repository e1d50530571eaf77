"""The models of the paper's section 6 experiments in reduced form as the runner trains them
(registered with ``register_model``; the experiments themselves, configs per scale, tiers, claims
and the paper's numbers, are records: ``layernorm_paper.records``):

    draw       6.4  DRAW (``models.DRAW``): the negative ELBO (nats) of each image
    reader     6.2  the attentive reader (``models.AttentiveReader``) with the fair scores
    mdn        6.5  the mixture-density LSTM (``models.HandwritingMDN``): NLL per sequence
    char_lm    summary B (docs/paper.md): character-level LSTM language model (``CharLM``) and
               its 5-way sentence-completion test
    order      6.1  order embeddings (``models.OrderEmbedding``) with retrieval metrics at every
               evaluation, and ``best_validation``, the model selection of Vendrov et al.

Density and ranking models (DRAW, handwriting, order embeddings) go through the runner's
"regress" task: the registered model returns ``sqrt(loss + floor)`` per example against zero
targets, so the runner's squared error is the model's loss (nats) plus a constant ``floor`` that
makes it non-negative (0 for DRAW, whose negative ELBO is >= 0; the NLL's lower bound for the
mixture density; 1 for the order embeddings' per-pair loss), and ``test_loss`` is the test set's
mean loss. The exact scores are added to each metrics row by ``extra_metrics``.

The order embeddings' runs: the registered model returns ``sqrt(loss + 1)`` per pair
(``LossAsRegression``), so ``train_loss - 1`` is the mean per-pair contrastive loss; the
retrieval metrics are computed by ``extra_metrics`` over the whole validation and test splits at
every evaluation, and the best validation model is the one with the highest caption -> image
R@1 + R@5 + R@10 (``best_validation``).
"""
from __future__ import annotations

import torch
from torch import nn

from ..experiments import register_model
from ..data import captions as _captions  # noqa: F401  (registers "digit-captions")
from ..data import docstrings as _docstrings  # noqa: F401  (registers "docstrings")
from ..data import paper_tasks as _paper_tasks  # noqa: F401  (registers the generated tasks)
from ..data.captions import PIXELS, GREY_LEVELS
from ..data.completion import CANDIDATES, CHANCE, completion_test
from layernorm.vocabulary import RNN_NORMS
from layernorm.rnn import LSTM
from .classifiers import RNN_TRAIN_SAMPLE, Scored
from .draw import DRAW
from .mdn import HandwritingMDN
from .order import OrderEmbedding, retrieval_metrics, split_order_loss, violation_matrix
from .reader import AttentiveReader


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


# ----------------------------------------------------------------------------- 6.1
SELECTION = "val_c2i_rsum"        # the validation criterion of the best model (Vendrov et al.)
RSUM_KEYS = ("c2i_r1", "c2i_r5", "c2i_r10")
MEAN_KEYS = ("c2i_r1", "c2i_r10", "i2c_r1", "i2c_r10")


class _PairRows(nn.Module):
    """The runner's rows (N, 64 + L) int64 = grey levels then caption tokens, with lengths (N,):
    the per-pair contrastive loss of ``OrderEmbedding``, the batch's other pairs the negatives.
    In eval mode (the runner's ``test_loss``) the negatives are the pair's block of
    ``eval_block`` consecutive rows: the training batch's size, not the runner's 1000-row
    evaluation chunks (whose all-pairs loss would cost more than the retrieval metrics)."""

    def __init__(self, model: OrderEmbedding, eval_block: int = 128):
        super().__init__()
        self.model, self.eval_block = model, eval_block

    @staticmethod
    def split(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[:, :PIXELS].float() / GREY_LEVELS, x[:, PIXELS:]

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        images, tokens = self.split(x)
        if self.training:
            return self.model(tokens, lengths, images)
        b = self.eval_block
        return torch.cat([self.model(tokens[a:a + b], lengths[a:a + b], images[a:a + b])
                          for a in range(0, len(x), b)])


class OrderForRunner(LossAsRegression):
    """``OrderEmbedding`` trained by the runner; ``extra_metrics`` scores retrieval on the whole
    validation and test splits (held here, not in the state dict)."""

    def __init__(self, model: OrderEmbedding, splits: dict, captions_per_image: int,
                 eval_block: int = 128):
        super().__init__(_PairRows(model, eval_block), floor=1.0)
        self.splits, self.per_image = splits, captions_per_image

    @torch.no_grad()
    def score(self, x: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Retrieval metrics of one split: rows image-major, ``captions_per_image`` per image."""
        n = len(x) // self.per_image * self.per_image
        device = next(self.parameters()).device
        x, lengths = x[:n].to(device), lengths[:n]
        images, tokens = _PairRows.split(x[::self.per_image])
        model = self.model.model
        s = torch.cat([model.encode_captions(tokens_, lengths_) for tokens_, lengths_ in
                       zip(_PairRows.split(x)[1].split(1024), lengths.split(1024))])
        e = violation_matrix(s, model.encode_images(images))
        image_of = torch.arange(n, device=device) // self.per_image
        out = retrieval_metrics(e, image_of)
        out["c2i_rsum"] = sum(out[k] for k in RSUM_KEYS)
        out["r_mean"] = sum(out[k] for k in MEAN_KEYS) / len(MEAN_KEYS)
        out["order_loss"] = split_order_loss(e, image_of, model.margin)
        out["violation"] = float(e.gather(1, image_of[:, None]).mean())
        out["images"] = n // self.per_image
        return out

    def extra_metrics(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> dict:
        row = {"captions_per_image": self.per_image}
        for name, (xs, ls) in self.splits.items():
            row.update({f"{name}_{k}": v for k, v in self.score(xs, ls).items()})
        return row


@register_model("order", norms=("none", "layer"))
def order(dataset, norm: str, dim: int = 64, word_dim: int = 32, image_hidden: int = 128):
    """Order embeddings (``layernorm_paper.models.OrderEmbedding``) on "digit-captions"; the caption
    encoder a GRU (norm "none") or LN-GRU ("layer")."""
    if getattr(dataset, "x_val", None) is None or "captions_per_image" not in dataset.info:
        raise ValueError(f"order expects a caption dataset with a validation split, received "
                         f"{dataset.name!r}. Use 'digit-captions'.")
    model = OrderEmbedding(dataset.vocab_size, PIXELS, dim, word_dim, image_hidden, norm=norm)
    splits = {"val": (dataset.x_val, dataset.lengths_val),
              "test": (dataset.x_test, dataset.lengths_test)}
    return OrderForRunner(model, splits, dataset.info["captions_per_image"])


def best_validation(rows: list[dict]) -> dict:
    """The metrics row of the best validation model: the first row with the highest
    ``val_c2i_rsum`` (caption -> image R@1 + R@5 + R@10 on the validation images, Vendrov et
    al.'s criterion). Its ``step`` is the updates to the best validation model, its ``test_*``
    fields that model's test scores."""
    scored = [r for r in rows if SELECTION in r]
    if not scored:
        raise ValueError(f"best_validation needs metrics rows with {SELECTION!r} (rows of a "
                         f"paper_order run), received {len(rows)} rows without it.")
    return max(scored, key=lambda r: (r[SELECTION], -r["step"]))
