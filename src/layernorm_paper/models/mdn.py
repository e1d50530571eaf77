"""Handwriting sequence generation (Graves 2013) with LN-LSTM (paper section 6.5).

A stack of ``layernorm.LSTM`` layers reads pen points ``(dx, dy, end_of_stroke)``, each through a
learned embedding ``tanh(Linear(3 -> embed))``, and predicts the next one with a mixture-density
output (Graves 2013, eqs. 15-25): ``M`` bivariate Gaussians over the offset and a Bernoulli
end-of-stroke bit. The loss is the negative log-likelihood of every next point, summed over the
sequence (nats per sequence).

Reduced form (how it differs from the paper's 3 x 400 LN-LSTM on IAM-OnDB, length 500, batch 8):
fewer and smaller layers, generated pen strokes (``layernorm_paper.data`` "pen-strokes") instead of
IAM-OnDB, no skip connections from the input to every layer, and a lower bound on the standard
deviations (``sigma_min``) and on ``1 - rho^2`` (``rho_max``) so the density, and so the NLL, is
bounded below (``nll_floor_per_step``).

Why the embedding: layer norm of the input term ``W_x x`` is invariant to re-scaling x (paper
section 5.1, Table 1), so an LN-LSTM reading the raw point could not tell a stroke from the same
stroke drawn twice as large, and could not learn stroke sizes from its input. The tanh in
between makes the term depend on the offsets' length. Every norm gets the same embedding, so the
LSTM and LN-LSTM arms differ only in the norm (as the reproduction's sequence classifiers,
``layernorm_paper.models.classifiers.SequenceClassifier``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from layernorm.rnn import LSTM


def _check_points(x: torch.Tensor, least: int) -> None:
    if x.dim() != 3 or x.shape[-1] != 3:
        raise ValueError(f"HandwritingMDN expected pen points (N, T, 3) = (dx, dy, "
                         f"end_of_stroke), received shape {tuple(x.shape)}.")
    if x.shape[1] < least:
        raise ValueError(f"HandwritingMDN needs sequences of at least {least} point"
                         f"{'s' if least > 1 else ''}, received T={x.shape[1]}.")


class Mixture(NamedTuple):
    """The predicted distribution of a next pen point (Graves 2013, eqs. 17-22): the
    end-of-stroke logit and the M bivariate Gaussians' log weights, means, standard deviations
    and correlations."""
    eos_logit: torch.Tensor
    log_pi: torch.Tensor
    mu_x: torch.Tensor
    mu_y: torch.Tensor
    sigma_x: torch.Tensor
    sigma_y: torch.Tensor
    rho: torch.Tensor


class HandwritingMDN(nn.Module):
    """``forward(x, lengths=None) -> NLL (N,)`` in nats: x (N, T, 3) pen points (dx, dy, eos).

    Point t+1 is scored from the LSTM state after point t (T - 1 scored points per sequence; with
    ``lengths``, only points before each length). norm: "none", "batch" or "layer", passed to
    ``layernorm.LSTM``. embed: the width of the input embedding ``tanh(Linear(3 -> embed))``.
    """

    def __init__(self, hidden: int = 64, layers: int = 2, mixtures: int = 5, norm: str = "layer",
                 max_length: int = 500, sigma_min: float = 1e-2, rho_max: float = 0.95,
                 gain_init: float | None = None, embed: int = 32) -> None:
        super().__init__()
        if not (sigma_min > 0 and 0 < rho_max < 1):
            raise ValueError(f"HandwritingMDN needs sigma_min > 0 and 0 < rho_max < 1, received "
                             f"sigma_min={sigma_min!r}, rho_max={rho_max!r}.")
        if isinstance(embed, bool) or not isinstance(embed, int) or embed < 1:
            raise ValueError(f"HandwritingMDN needs an embedding width embed >= 1 (an integer), "
                             f"received embed={embed!r}. Pass e.g. embed=32.")
        self.mixtures, self.sigma_min, self.rho_max, self.norm = mixtures, sigma_min, rho_max, norm
        self.embed = nn.Sequential(nn.Linear(3, embed), nn.Tanh())
        self.lstm = LSTM(embed, hidden, num_layers=layers, batch_first=True, norm=norm,
                         gain_init=gain_init, max_length=max_length)
        self.head = nn.Linear(hidden, 1 + 6 * mixtures)   # eos, pi, mu_x, mu_y, s_x, s_y, rho

    @property
    def nll_floor_per_step(self) -> float:
        """The smallest NLL one point can have: -log of the largest density the bounds allow."""
        return math.log(2 * math.pi * self.sigma_min ** 2 * math.sqrt(1 - self.rho_max ** 2))

    def mixture(self, x: torch.Tensor) -> Mixture:
        """The predicted distribution of the point after each point of x (N, T, 3): every field
        (N, T, M), ``eos_logit`` (N, T); step t is predicted from points 0..t."""
        _check_points(x, 1)
        out, _ = self.lstm(self.embed(x))                              # (N, T, H)
        p = self.head(out)
        M = self.mixtures
        mu_x, mu_y, s_x, s_y, r = p[..., 1 + M:].split(M, dim=-1)
        return Mixture(eos_logit=p[..., 0], log_pi=F.log_softmax(p[..., 1:1 + M], dim=-1),
                       mu_x=mu_x, mu_y=mu_y, sigma_x=self.sigma_min + F.softplus(s_x),
                       sigma_y=self.sigma_min + F.softplus(s_y),
                       rho=self.rho_max * torch.tanh(r))

    def point_nll(self, x: torch.Tensor) -> torch.Tensor:
        """(N, T-1): the NLL of points 1..T-1 given the points before each."""
        _check_points(x, 2)
        m = self.mixture(x[:, :-1])
        target = x[:, 1:]
        dx, dy = target[..., :1] - m.mu_x, target[..., 1:2] - m.mu_y   # broadcast over M
        zx, zy = dx / m.sigma_x, dy / m.sigma_y
        one_m_rho2 = 1 - m.rho ** 2
        log_n = -(zx ** 2 + zy ** 2 - 2 * m.rho * zx * zy) / (2 * one_m_rho2) \
            - torch.log(2 * math.pi * m.sigma_x * m.sigma_y * one_m_rho2.sqrt())
        offset_nll = -torch.logsumexp(m.log_pi + log_n, dim=-1)
        eos_nll = F.binary_cross_entropy_with_logits(m.eos_logit, target[..., 2],
                                                     reduction="none")
        return offset_nll + eos_nll

    def forward(self, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
        nll = self.point_nll(x if x.is_floating_point() else x.float())
        if lengths is not None:
            scored = torch.arange(nll.shape[1], device=nll.device)[None, :] < \
                (lengths.to(nll.device)[:, None] - 1)
            nll = nll * scored
        return nll.sum(-1)
