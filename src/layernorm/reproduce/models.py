"""Models of the reproduction experiments, registered with the runner (``register_model``).

    convnet          small ConvNet, norm none / batch / layer (ConvLayerNorm) / weight after every
                     convolution, global average pooling, linear logits (never normalized)
    rnn_classifier   one-layer LSTM / BN-LSTM / LN-LSTM (``layernorm.LSTM``) reading a sequence,
                     a linear head on the last hidden state (or on every step for per-step
                     targets); ``extra_metrics`` reports the hidden-state statistics per time step

The MLP of section 6.6 is the runner's ``mlp`` (LN on hidden layers only, BN with the unbiased
variance at small batch): one model, not two.
"""
from __future__ import annotations

import torch
from torch import nn

from ..experiments import register_model
from ..norms import norm_block
from ..rnn import LSTM


class ConvNet(nn.Module):
    """conv3x3(C0) - [norm] - ReLU, then conv3x3 stride 2 blocks doubling channels, global average
    pooling, linear. Input (N, C, H, W). Normalization acts on the summed inputs of every conv
    layer (``norm_block``); batch norm on a feature map averages over batch *and* positions, so
    it still has statistics at batch size 1 — very noisy ones."""

    def __init__(self, in_channels: int, num_classes: int, norm: str, channels=(16, 32, 32),
                 unbiased: bool = False):
        super().__init__()
        kw = {"unbiased": unbiased} if norm == "batch" else {}
        layers, c_in = [], in_channels
        for i, c in enumerate(channels):
            conv = nn.Conv2d(c_in, c, 3, stride=1 if i == 0 else 2, padding=1)
            layers += [norm_block(conv, norm, **kw), nn.ReLU()]
            c_in = c
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(c_in, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).mean(dim=(2, 3)))   # (N, C) -> logits (N, classes)


@register_model("convnet")
def convnet(dataset, norm: str, channels=(16, 32, 32), unbiased: bool = False) -> ConvNet:
    if len(dataset.input_shape) != 3:
        raise ValueError(f"convnet expects image inputs (C, H, W), received dataset "
                         f"{dataset.name!r} with input shape {dataset.input_shape}. Use an image "
                         f"view such as 'digits-image'.")
    return ConvNet(dataset.input_shape[0], dataset.output_size, norm, tuple(channels), unbiased)


class SequenceClassifier(nn.Module):
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
        self.lstm = LSTM(embed or width, hidden, batch_first=True, norm=norm,
                         gain_init=gain_init, max_length=length // chunk)
        self.head = nn.Linear(hidden, output_size)

    def _run(self, x: torch.Tensor, lengths: torch.Tensor | None = None):
        """(h_t for every step (N, T', H) with zeros past each length, h at the last true step
        (N, H))."""
        if x.dim() == 3:
            n, t, f = x.shape
            x = x.reshape(n, t // self.chunk, f * self.chunk)
        e = self.embed(x)
        if lengths is None:
            out, _ = self.lstm(e)
            return out, out[:, -1]
        packed = nn.utils.rnn.pack_padded_sequence(e, lengths.cpu(), batch_first=True,
                                                   enforce_sorted=False)
        out, (h_n, _) = self.lstm(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True,
                                                  total_length=e.shape[1])
        return out, h_n[-1]

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        h, last = self._run(x, lengths)
        if self.per_step:
            return self.head(h).repeat_interleave(self.chunk, dim=1)   # (N, T, C)
        y = self.head(last)                                              # (N, C)
        return y.squeeze(-1) if self.head.out_features == 1 else y      # regression: (N,)

    @torch.no_grad()
    def extra_metrics(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> dict:
        """Per time step t: mean and std of h_t over the probe batch and the hidden units
        (padded steps excluded)."""
        h, _ = self._run(x, lengths)                          # (N, T', H)
        n, t, width = h.shape
        valid = torch.ones(n, t, 1) if lengths is None else \
            (torch.arange(t)[None, :] < lengths.cpu()[:, None]).float()[..., None]
        valid = valid.to(h.device)
        count = (valid.sum(0) * width).clamp_min(1).squeeze(-1)               # (T',)
        mean_t = (h * valid).sum((0, 2)) / count
        var_t = (((h - mean_t[None, :, None]) ** 2) * valid).sum((0, 2)) / count
        keep = int((count > 1).sum())     # steps that some probe sequence still reaches
        mean = [round(v, 6) for v in mean_t[:keep].tolist()]
        std = [round(v, 6) for v in var_t[:keep].clamp_min(0).sqrt().tolist()]
        return {"hidden_mean": mean, "hidden_std": std}


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
    return SequenceClassifier(F, dataset.output_size, T, norm, hidden, gain_init, chunk, per_step,
                              embed, dataset.vocab_size)
