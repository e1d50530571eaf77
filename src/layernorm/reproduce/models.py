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
                 gain_init: float | None, chunk: int, per_step: bool, embed: int = 0):
        super().__init__()
        if length % chunk:
            raise ValueError(f"rnn_classifier chunk={chunk} must divide the sequence length "
                             f"{length}. Pick a divisor of {length}.")
        self.chunk, self.per_step = chunk, per_step
        width = input_size * chunk
        self.embed = nn.Sequential(nn.Linear(width, embed), nn.Tanh()) if embed else nn.Identity()
        self.lstm = LSTM(embed or width, hidden, batch_first=True, norm=norm,
                         gain_init=gain_init, max_length=length // chunk)
        self.head = nn.Linear(hidden, output_size)

    def _hidden(self, x: torch.Tensor) -> torch.Tensor:
        n, t, f = x.shape
        out, _ = self.lstm(self.embed(x.reshape(n, t // self.chunk, f * self.chunk)))
        return out                                           # (N, T', H): h_t for every step

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self._hidden(x)
        if self.per_step:
            return self.head(h).repeat_interleave(self.chunk, dim=1)   # (N, T, C)
        return self.head(h[:, -1]).squeeze(-1) if self.head.out_features == 1 \
            else self.head(h[:, -1])                                     # (N, C) or (N,)

    @torch.no_grad()
    def extra_metrics(self, x: torch.Tensor) -> dict:
        """Per time step t: mean and std of h_t over the probe batch and the hidden units."""
        h = self._hidden(x)                                   # (N, T', H)
        std, mean = torch.std_mean(h.transpose(0, 1).flatten(1), dim=1, correction=0)
        return {"hidden_mean": [round(v, 6) for v in mean.tolist()],
                "hidden_std": [round(v, 6) for v in std.tolist()]}


@register_model("rnn_classifier")
def rnn_classifier(dataset, norm: str, hidden: int = 64, gain_init: float | None = None,
                   chunk: int = 1, embed: int = 0) -> SequenceClassifier:
    if len(dataset.input_shape) != 2:
        raise ValueError(f"rnn_classifier expects sequences (T, F), received dataset "
                         f"{dataset.name!r} with input shape {dataset.input_shape}. Use a "
                         f"sequence view such as 'digits-pixels' or 'mnist1d-seq'.")
    T, F = dataset.input_shape
    per_step = dataset.y_train.dim() == 2
    return SequenceClassifier(F, dataset.output_size, T, norm, hidden, gain_init, chunk, per_step,
                              embed)
