"""DRAW (Gregor et al. 2015) with layer normalization on the LSTM cells only (paper section 6.4).

The paper normalized DRAW's encoder and decoder LSTMs on the cell state only: the gate
pre-activations ``W_x x_t + W_h h_{t-1} + b`` stay unnormalized and the output is

    h_t = sigmoid(o) * tanh(LN(c_t))          c_t carried unnormalized to the next step

(``layernorm.LSTMCell(norm="layer")`` also normalizes the two gate terms — the reader and
handwriting variant — so DRAW uses ``CellNormLSTMCell`` below).

Reduced form (how it differs from the paper's DRAW on 28x28 binarized MNIST, 256 units,
64 glimpses): small images (e.g. binarized 8x8 digits), few glimpses and units, and read / write
**without attention** (Gregor et al.'s section 3.1: the encoder reads the whole image and the
error image, the decoder writes a whole-canvas update), which the attention window only makes
cheaper on large images. The loss is the same: the negative evidence lower bound

    -ELBO(x) = -log p(x | c_T) + sum_t KL(q(z_t | h_enc_t) || N(0, I))     in nats per image

with a Bernoulli decoder on ``sigmoid(c_T)`` and diagonal-Gaussian posteriors. ``binarize=True``
(dynamic binarization): in training mode x holds grey levels in [0, 1], each pixel's probability
of being on, and every forward draws a fresh binary image from them; the test images come
binarized once (``load_dataset("mnist", binarize="dynamic")``).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from layernorm import functional as LF
from layernorm.recurrence import lstm_step

DRAW_NORMS = ("none", "layer")


class CellNormLSTMCell(nn.Module):
    """An LSTM step with optional layer norm on the cell state only (DRAW's variant, 6.4).

    ``forward(x, (h, c)) -> (h', c')``; x (B, I), h and c (B, H). Gates i, f, o, u from
    ``W_ih x + b_ih + W_hh h + b_hh`` (torch's layout and initialisation, U(-1/sqrt(H), 1/sqrt(H))),
    ``c' = sigmoid(f) c + sigmoid(i) tanh(u)``, ``h' = sigmoid(o) tanh(LN(c'))`` with
    ``cell_norm=True`` (gain 1, bias 0), ``sigmoid(o) tanh(c')`` otherwise — then it computes
    exactly ``torch.nn.LSTMCell``.
    """

    def __init__(self, input_size: int, hidden_size: int, cell_norm: bool = True,
                 eps: float = 1e-5) -> None:
        super().__init__()
        self.input_size, self.hidden_size, self.cell_norm, self.eps = \
            input_size, hidden_size, bool(cell_norm), eps
        G = 4 * hidden_size
        self.weight_ih = nn.Parameter(torch.empty(G, input_size))
        self.weight_hh = nn.Parameter(torch.empty(G, hidden_size))
        self.bias_ih = nn.Parameter(torch.empty(G))
        self.bias_hh = nn.Parameter(torch.empty(G))
        if self.cell_norm:
            self.gain_c = nn.Parameter(torch.empty(hidden_size))
            self.bias_c = nn.Parameter(torch.empty(hidden_size))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.hidden_size)
        for p in (self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh):
            nn.init.uniform_(p, -bound, bound)
        if self.cell_norm:
            nn.init.ones_(self.gain_c)
            nn.init.zeros_(self.bias_c)

    def forward(self, x: torch.Tensor, state: tuple[torch.Tensor, torch.Tensor]):
        """The library's reference LSTM step (``layernorm.recurrence.lstm_step``): the
        recurrent term W_hh h + b_hh un-normalized, the layer norm (or none) on the cell."""
        h, c = state
        return lstm_step(F.linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh,
                         lambda a, t: a + self.bias_hh, self._norm_c)

    def _norm_c(self, c: torch.Tensor, t=None) -> torch.Tensor:
        if not self.cell_norm:
            return c
        return LF.layer_norm(c, self.hidden_size, self.gain_c, self.bias_c, self.eps)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}, cell_norm={self.cell_norm}"


class DRAW(nn.Module):
    """DRAW without attention: ``forward(x) -> negative ELBO (N,)`` in nats, x (N, D) in {0, 1}.

    At each of ``glimpses`` steps: read ``r = [x, x - sigmoid(canvas)]``; encoder
    ``h_enc = LSTM_enc([r, h_dec])``; ``z ~ q = N(mu(h_enc), sigma(h_enc))``; decoder
    ``h_dec = LSTM_dec(z)``; ``canvas += W h_dec``. norm: "none" (LSTM) or "layer" (LN on the
    cells of both LSTMs, 6.4). In eval mode the posterior noise comes from a private generator
    seeded with ``eval_seed`` at every call, so the bound of a test set is a deterministic number
    and every model is scored with the same noise.
    """

    def __init__(self, x_dim: int, hidden: int = 64, z_dim: int = 8, glimpses: int = 8,
                 norm: str = "layer", eval_seed: int = 0, binarize: bool = False) -> None:
        super().__init__()
        if norm not in DRAW_NORMS:
            raise ValueError(f"DRAW norm must be one of {list(DRAW_NORMS)} (the paper compares "
                             f"LSTM with LN on the cell, section 6.4), received {norm!r}.")
        for name, v in (("x_dim", x_dim), ("hidden", hidden), ("z_dim", z_dim),
                        ("glimpses", glimpses)):
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"DRAW {name} must be a positive int, received {v!r}.")
        self.x_dim, self.hidden, self.z_dim, self.glimpses = x_dim, hidden, z_dim, glimpses
        self.norm, self.eval_seed, self.binarize = norm, eval_seed, bool(binarize)
        cell_norm = norm == "layer"
        self.encoder = CellNormLSTMCell(2 * x_dim + hidden, hidden, cell_norm)
        self.decoder = CellNormLSTMCell(z_dim, hidden, cell_norm)
        self.posterior = nn.Linear(hidden, 2 * z_dim)     # mu, log sigma
        self.write = nn.Linear(hidden, x_dim)
        self.canvas0 = nn.Parameter(torch.zeros(x_dim))

    def terms(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per image (N,): ``recon`` = -log p(x | canvas) and ``kl`` = sum over glimpses of
        KL(q || prior), both in nats; ``logits`` (N, D) = the final canvas."""
        if x.dim() != 2 or x.shape[1] != self.x_dim:
            raise ValueError(f"DRAW expected images flattened to (N, {self.x_dim}), received "
                             f"shape {tuple(x.shape)}.")
        n = x.shape[0]
        x = x.float()
        if self.binarize and self.training:
            # dynamic binarization: x holds each pixel's probability of being on; a fresh binary
            # image every time (torch's global generator: the run's seed)
            x = torch.bernoulli(x)
        elif bool(((x != 0) & (x != 1)).any()):
            raise ValueError("DRAW models binary images: x must hold only 0 and 1"
                             + (" in eval mode (the test images, binarized once)"
                                if self.binarize else "")
                             + f", received values in [{float(x.min()):.3g}, {float(x.max()):.3g}]"
                             + ("." if self.binarize else ". For grey levels read as "
                                "probabilities, pass binarize=True (dynamic binarization)."))
        gen = None if self.training else torch.Generator(device=x.device).manual_seed(
            self.eval_seed)
        h_enc = c_enc = h_dec = c_dec = x.new_zeros(n, self.hidden)
        canvas = self.canvas0.expand(n, -1)
        kl = x.new_zeros(n)
        for _ in range(self.glimpses):
            x_hat = x - torch.sigmoid(canvas)                         # error image (N, D)
            h_enc, c_enc = self.encoder(torch.cat([x, x_hat, h_dec], -1), (h_enc, c_enc))
            mu, log_sigma = self.posterior(h_enc).chunk(2, dim=-1)   # (N, Z) each
            eps = torch.randn(mu.shape, generator=gen, device=x.device, dtype=mu.dtype)
            z = mu + log_sigma.exp() * eps
            kl = kl + 0.5 * (mu.pow(2) + (2 * log_sigma).exp() - 2 * log_sigma - 1).sum(-1)
            h_dec, c_dec = self.decoder(z, (h_dec, c_dec))
            canvas = canvas + self.write(h_dec)
        recon = F.binary_cross_entropy_with_logits(canvas, x, reduction="none").sum(-1)
        return {"recon": recon, "kl": kl, "logits": canvas}

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.terms(x)
        return t["recon"] + t["kl"]

    def extra_repr(self) -> str:
        return f"x_dim={self.x_dim}, hidden={self.hidden}, z_dim={self.z_dim}, " \
               f"glimpses={self.glimpses}, norm={self.norm!r}, binarize={self.binarize}"
