"""The reproduction's classifiers, registered with the runner (``register_model``).

    repro_mlp        section 6.6's MLP: norm on the hidden layers (LN as the paper), optionally
                     batch norm on the logits too (``bn_logits``: BN "on all layers")
    convnet          small ConvNet, norm none / batch / layer (ConvLayerNorm) / weight after every
                     convolution, a linear head on the flattened last feature map (never
                     normalized)
    rnn_classifier   one-layer LSTM / BN-LSTM / LN-LSTM (``layernorm.LSTM``; norm "none" is
                     torch.nn.LSTM's model) reading a sequence, a linear head on the last hidden
                     state (or on every step for per-step targets)

Every one of them is ``Scored``: its ``extra_metrics`` (called by the runner at every evaluation)
adds the eval-mode NLL on a fixed training sample and, for batch norm, the scores with population
statistics recomputed from that sample (``layernorm.recompute_batch_stats``) next to the
running-average ones; the RNN adds per-step statistics of h_t and of the summed inputs and, for
BN-LSTM, the score with the average of per-batch statistics at the training batch size (the
running averages' limit at fixed weights, ``batchmean_*``).
docs/reproduce.md lists the fields.
"""
from __future__ import annotations

import torch
from torch import nn

from ..experiments import register_model
from .mlp import batch_kwargs
from layernorm.norms import BatchNorm, norm_block
from layernorm.precise_bn import recompute_batch_stats
from layernorm.rnn import LSTM

# Fair scoring at every evaluation: a fixed sample of the training split (its first examples; the
# split is shuffled) for the eval-mode training NLL and, with batch norm, for the population
# statistics; batches of POP_BATCH in that pass.
TRAIN_SAMPLE, POP_BATCH = 1000, 200
RNN_TRAIN_SAMPLE = 256


class Scored(nn.Module):
    """Adds to every metrics row the model's fair eval-mode scores (``eval_*``): batch norm
    scored with population statistics recomputed from one pass over a training sample
    (``layernorm.recompute_batch_stats``), every other norm in plain eval mode; for batch norm
    also the scores with its exponential running averages (``ema_*``). The running averages are
    put back afterwards, so training and its checkpoints are those of plain training.

    ``score_batch_mean`` (BN-LSTM): also score with the average over the training sample's
    batches, at the training batch size, of each batch's mean and unbiased variance
    (``recompute_batch_stats(..., estimator="batch_mean")``): what the running averages tend to
    when the weights stop changing. The EMA score minus it is what the running averages lose to
    their lag (and noise); it minus the population score is what the per-batch statistics
    themselves cost (docs/report.md, "Scoring a run")."""

    score_batch_mean = False

    def _attach(self, dataset, norm: str, train_sample: int = TRAIN_SAMPLE) -> None:
        n = min(train_sample, len(dataset.x_train))
        lengths = dataset.lengths_train
        # plain attributes, not buffers: the state_dict stays the model's own
        self.__dict__["_scoring"] = {
            "dataset": dataset, "norm": norm,
            "train": (dataset.x_train[:n], dataset.y_train[:n],
                      None if lengths is None else lengths[:n]),
            "test": (dataset.x_test, dataset.y_test, dataset.lengths_test)}

    def _score(self, split) -> dict:
        from ..experiments.training import loss_and_errors
        x, y, lengths = split
        ds = self._scoring["dataset"]
        dev = next(self.parameters()).device
        loss_sum, err_sum, count = 0.0, 0, 0
        for i in range(0, len(x), 500):
            sl = slice(i, i + 500)
            out = self(x[sl].to(dev)) if lengths is None else self(x[sl].to(dev),
                                                                   lengths=lengths[sl])
            loss, errors, scored = loss_and_errors(out, y[sl].to(dev), ds)
            loss_sum += float(loss)
            err_sum += int(errors)
            count += int(scored)
        return {"loss": loss_sum / max(count, 1), "error": err_sum / max(count, 1)}

    def _note_train_batch(self, x: torch.Tensor) -> None:
        """Remember the batch size of a training forward (for ``score_batch_mean``)."""
        if self.training and "_scoring" in self.__dict__:
            self._scoring["train_batch"] = len(x)

    def _population_pass(self, estimator: str = "pooled", batch: int = POP_BATCH) -> None:
        x, _, lengths = self._scoring["train"]
        dev = next(self.parameters()).device
        batches = [(x[i:i + batch].to(dev), None if lengths is None else
                    lengths[i:i + batch]) for i in range(0, len(x), batch)
                   if min(batch, len(x) - i) >= 2]
        recompute_batch_stats(self, batches, forward=lambda m, b: m(b[0]) if b[1] is None
                              else m(b[0], lengths=b[1]), estimator=estimator)

    @torch.no_grad()
    def scores(self, probe=None) -> dict:
        """``eval_train_nll`` / ``eval_train_error`` (eval mode, on the training sample) for every
        norm; for batch norm the same and ``eval_test_loss`` / ``eval_test_error`` with population
        statistics, and ``ema_train_nll`` with the running averages (the runner's ``test_*`` are
        the running-average scores; for other norms they already are the eval-mode scores).
        ``probe(model) -> dict`` is called with the fair statistics in place. With
        ``score_batch_mean``, after a training forward: ``batchmean_test_loss`` /
        ``batchmean_test_error`` (and ``batchmean_batch``, the batch size of that pass)."""
        was_training = self.training
        self.eval()
        out = {}
        saved = None
        if self._scoring["norm"] == "batch":
            out["ema_train_nll"] = self._score(self._scoring["train"])["loss"]
            saved = {k: v.clone() for k, v in self.state_dict().items()
                     if "running_" in k or "num_batches_tracked" in k}
            train_batch = self._scoring.get("train_batch")
            if self.score_batch_mean and train_batch and train_batch >= 2:
                self._population_pass("batch_mean", train_batch)
                bm = self._score(self._scoring["test"])
                out.update(batchmean_batch=train_batch, batchmean_test_loss=bm["loss"],
                           batchmean_test_error=bm["error"])
            self._population_pass()
            te = self._score(self._scoring["test"])
            out.update(bn_scoring="population", pop_sample=len(self._scoring["train"][0]),
                       eval_test_loss=te["loss"], eval_test_error=te["error"])
        tr = self._score(self._scoring["train"])
        out.update(eval_train_nll=tr["loss"], eval_train_error=tr["error"])
        if probe is not None:
            out.update(probe(self))
        if saved is not None:
            self.load_state_dict(saved, strict=False)
        self.train(was_training)
        return {k: round(v, 7) if isinstance(v, float) else v for k, v in out.items()}


class MLP(Scored):
    """Section 6.6's MLP: input - [Linear - norm - ReLU] per hidden layer - Linear logits. The
    paper's LN is on the hidden layers only; ``bn_logits`` adds batch norm on the logits too (BN
    "on all layers"), for norm="batch" only."""

    def __init__(self, width: int, num_classes: int, norm: str, hidden, unbiased: bool,
                 bn_logits: bool) -> None:
        super().__init__()
        kw = batch_kwargs(norm, unbiased)
        layers: list[nn.Module] = [nn.Flatten()]
        for h in hidden:
            layers += [norm_block(nn.Linear(width, h), norm, **kw), nn.ReLU()]
            width = h
        layers.append(nn.Linear(width, num_classes))
        if bn_logits:
            layers.append(BatchNorm(num_classes, unbiased=unbiased))
        self.net = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def stacked_forward(self, params: dict, buffers: dict, x: torch.Tensor) -> torch.Tensor:
        """Training-mode forward of S seeds' stacked copies (the runner's seeds trained
        together, ``layernorm_paper.experiments.stacked``): x (S, N, ...) -> logits (S, N, C)."""
        from ..experiments.stacked import sequential_forward
        return sequential_forward(self.net, params, buffers, x, "net.")

    def extra_metrics(self, x: torch.Tensor) -> dict:
        return self.scores()


@register_model("repro_mlp", stackable=True)
def repro_mlp(dataset, norm: str, hidden=(128, 128), unbiased: bool = False,
              bn_logits: bool = False) -> MLP:
    if bn_logits and norm != "batch":
        raise ValueError(f"repro_mlp bn_logits=True puts batch norm on the logits and needs "
                         f"norm='batch', received norm={norm!r}. Drop bn_logits.")
    width = 1
    for d in dataset.input_shape:
        width *= d
    model = MLP(width, dataset.output_size, norm, tuple(hidden), unbiased, bn_logits)
    model._attach(dataset, norm)
    return model


class ConvNet(Scored):
    """conv3x3(C0) - [norm] - ReLU, then conv3x3 stride 2 blocks doubling channels, a linear head
    on the flattened last feature map. Input (N, C, H, W); ``image_size`` (H, W). Normalization
    acts on the summed inputs of every conv layer (``norm_block``); batch norm on a feature map
    averages over batch *and* positions, so it still has statistics at batch size 1 — very noisy
    ones.

    Why a flattened head and not global average pooling: at batch size 1, batch norm's per-channel
    statistics are those of the one image, so the spatial mean of each channel of its output is
    exactly its bias (β). Pooled over positions right after it, every channel reaches the head as
    a function of the shape of that normalized map only (with a 2x2 map: four numbers of mean 0
    and variance 1, then the ReLU), and the network can hardly represent a class at all. A BN
    collapse measured that way would be the architecture's, not batch norm's. The flattened head
    keeps where each value is; every norm arm gets the same head."""

    def __init__(self, in_channels: int, num_classes: int, norm: str, channels=(16, 32, 32),
                 unbiased: bool = False, image_size: tuple[int, int] = (8, 8)):
        super().__init__()
        kw = batch_kwargs(norm, unbiased)
        layers, c_in = [], in_channels
        h, w = image_size
        for i, c in enumerate(channels):
            stride = 1 if i == 0 else 2
            conv = nn.Conv2d(c_in, c, 3, stride=stride, padding=1)
            layers += [norm_block(conv, norm, **kw), nn.ReLU()]
            c_in = c
            h, w = (h - 1) // stride + 1, (w - 1) // stride + 1   # 3x3, padding 1
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in * h * w, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))   # (N, C*H'*W') -> logits (N, classes)

    def extra_metrics(self, x: torch.Tensor) -> dict:
        return self.scores()


@register_model("convnet")
def convnet(dataset, norm: str, channels=(16, 32, 32), unbiased: bool = False) -> ConvNet:
    if len(dataset.input_shape) != 3:
        raise ValueError(f"convnet expects image inputs (C, H, W), received dataset "
                         f"{dataset.name!r} with input shape {dataset.input_shape}. Use an image "
                         f"view such as 'digits-image'.")
    model = ConvNet(dataset.input_shape[0], dataset.output_size, norm, tuple(channels), unbiased,
                    tuple(dataset.input_shape[1:]))
    model._attach(dataset, norm)
    return model


class SequenceClassifier(Scored):
    """``layernorm.LSTM`` over (N, T, F) inputs and a linear head.

    chunk: feed ``chunk`` consecutive input steps as one step ((N, T, F) -> (N, T/chunk, F*chunk)),
    e.g. 4 pixels per step of a 64-pixel sequence. per_step: logits at every step (per-step
    targets, e.g. the copy task) instead of at the last step only. embed: if > 0, an input layer
    ``tanh(Linear(F*chunk -> embed))`` before the LSTM, the same for every norm. Why: LN-LSTM
    normalizes the input term ``W_x x_t`` over the 4H gates; when x_t is one number that term is
    ``x_t * w`` and its normalization keeps only the sign of x_t (LN is invariant to re-scaling a
    single case). A nonlinear embedding, like the word embeddings of the paper's tasks, keeps the
    input's magnitude visible to LN-LSTM.
    """

    score_batch_mean = True      # BN-LSTM: per-step statistics over small batches

    def __init__(self, input_size: int, output_size: int, length: int, norm: str, hidden: int,
                 gain_init: float | None, chunk: int, per_step: bool, embed: int = 0,
                 vocab_size: int = 0):
        super().__init__()
        if length % chunk:
            raise ValueError(f"rnn_classifier chunk={chunk} must divide the sequence length "
                             f"{length}. Pick a divisor of {length}.")
        if vocab_size and (chunk != 1 or embed < 1):
            raise ValueError(f"rnn_classifier on token ids needs embed >= 1 and chunk = 1, "
                             f"received embed={embed}, chunk={chunk}. Pass e.g. embed=128.")
        self.chunk, self.per_step = chunk, per_step
        width = input_size * chunk
        if vocab_size:      # token ids (N, T) -> (N, T, embed)
            self.embed = nn.Embedding(vocab_size, embed)
        else:
            self.embed = nn.Sequential(nn.Linear(width, embed), nn.Tanh()) if embed else \
                nn.Identity()
        # norm="none" is torch.nn.LSTM's equations, parameter names and seeded initialisation:
        # torch's own op on padded input, the C time loop without normalization on packed
        # input (variable lengths: IMDb), where torch's CPU op is several times slower
        # (docs/rnnfast.md)
        self.lstm = LSTM(embed or width, hidden, batch_first=True, norm=norm,
                         gain_init=gain_init, max_length=length // chunk)
        self.head = nn.Linear(hidden, output_size)

    def _run(self, x: torch.Tensor, lengths: torch.Tensor | None = None, with_inputs=False):
        """(h_t for every step (N, T', H) with zeros past each length, h at the last true step
        (N, H)[, the LSTM's inputs (N, T', E)])."""
        if x.dim() == 3:
            n, t, f = x.shape
            x = x.reshape(n, t // self.chunk, f * self.chunk)
        e = self.embed(x)
        if lengths is None:
            out, _ = self.lstm(e)
            return (out, out[:, -1], e) if with_inputs else (out, out[:, -1])
        packed = nn.utils.rnn.pack_padded_sequence(e, lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        out, (h_n, _) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                  total_length=e.shape[1])
        return (out, h_n[-1], e) if with_inputs else (out, h_n[-1])

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        self._note_train_batch(x)
        h, last = self._run(x, lengths)
        if self.per_step:
            return self.head(h).repeat_interleave(self.chunk, dim=1)   # (N, T, C)
        y = self.head(last)                                              # (N, C)
        return y.squeeze(-1) if self.head.out_features == 1 else y      # regression: (N,)

    def extra_metrics(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> dict:
        """The fair scores (``Scored.scores``) and, with the same statistics, per time step
        (``hidden_stats``) on the probe batch ``x``."""
        return self.scores(probe=lambda model: model.hidden_stats(x, lengths))

    @torch.no_grad()
    def hidden_stats(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> dict:
        """Per time step t: mean and std over the probe batch and the units (padded steps
        excluded) of h_t (``hidden_*``) and of the LSTM's summed inputs
        a_t = W_x e_t + W_h h_{t-1} (``summed_*``, the 4H gate pre-activations before any
        normalization or bias)."""
        h, _, e = self._run(x, lengths, with_inputs=True)     # (N, T', H), (N, T', E)
        h_prev = torch.cat([torch.zeros_like(h[:, :1]), h[:, :-1]], 1)
        a = e @ self.lstm.weight_ih_l0.t() + h_prev @ self.lstm.weight_hh_l0.t()
        n, t = h.shape[:2]
        valid = torch.ones(n, t, 1) if lengths is None else \
            (torch.arange(t)[None, :] < lengths.cpu()[:, None]).float()[..., None]
        valid = valid.to(h.device)
        out = {}
        for name, v in (("hidden", h), ("summed", a)):
            count = (valid.sum(0) * v.shape[-1]).clamp_min(1).squeeze(-1)         # (T',)
            mean_t = (v * valid).sum((0, 2)) / count
            var_t = (((v - mean_t[None, :, None]) ** 2) * valid).sum((0, 2)) / count
            keep = int((count > 1).sum())     # steps that some probe sequence still reaches
            out[f"{name}_mean"] = [round(m, 6) for m in mean_t[:keep].tolist()]
            out[f"{name}_std"] = [round(m, 6) for m in var_t[:keep].clamp_min(0).sqrt().tolist()]
        return out


@register_model("rnn_classifier")
def rnn_classifier(dataset, norm: str, hidden: int = 64, gain_init: float | None = None,
                   chunk: int = 1, embed: int = 0) -> SequenceClassifier:
    tokens = dataset.vocab_size > 0
    if len(dataset.input_shape) != (1 if tokens else 2):
        raise ValueError(f"rnn_classifier expects sequences (T, F) of features or (T,) of token "
                         f"ids, received dataset {dataset.name!r} with input shape "
                         f"{dataset.input_shape}. Use a sequence view such as 'digits-pixels'.")
    T, F = (dataset.input_shape[0], 1) if tokens else dataset.input_shape
    per_step = dataset.y_train.dim() == 2
    model = SequenceClassifier(F, dataset.output_size, T, norm, hidden, gain_init, chunk,
                               per_step, embed, dataset.vocab_size)
    model._attach(dataset, norm, train_sample=RNN_TRAIN_SAMPLE)
    return model
