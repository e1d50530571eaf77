"""The exact Fisher information of the normalized softmax GLM (paper section 5.2; docs/paper.md
section 4), by forward-mode autograd, and the log-log slope the geometry measurements fit.

    fisher_block(method, W, g, b, x, wrt="g" | "w<i>")   F over one parameter block
    kl_divergence(method, (W, g, b), (W2, g2, b2), x)     the KL the Fisher is the Hessian of
    fit_exponent(scales, values)                          slope of log(value) vs log(scale)
"""
from __future__ import annotations

import functools
import math
import warnings

import torch

from .layer import normalized_layer


@functools.cache
def _load_forward_ad() -> None:
    """torch's forward-mode AD loads its jvp decompositions on first use through
    ``torch.jit.script``, which torch itself now reports as deprecated (a DeprecationWarning raised
    inside torch, on every forward-mode first use). Load them once here with that one warning
    silenced, so ``filterwarnings = error`` still catches everything else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*torch.jit.script.*deprecated",
                                category=DeprecationWarning)
        try:
            import torch._decomp.decompositions_for_jvp  # noqa: F401
        except ImportError:                                    # other torch versions: nothing to do
            pass


def _glm_logp(method: str, W: torch.Tensor, g: torch.Tensor, b: torch.Tensor, x: torch.Tensor,
              eps: float) -> torch.Tensor:
    """log p(y | x) of the normalized softmax GLM, (N, K)."""
    return normalized_layer(method, W, x, g, b, eps=eps).log_softmax(-1)


def fisher_block(method: str, W: torch.Tensor, g: torch.Tensor, b: torch.Tensor,
                 x: torch.Tensor, *, wrt: str, eps: float = 1e-5) -> torch.Tensor:
    """Exact Fisher block of one parameter: ``wrt`` is ``"g"`` (the K gains, -> (K, K)) or
    ``"w<i>"`` (row i of W, -> (D, D)).

    F = (1/N) sum_n sum_y p(y|x_n) J_ny J_ny^T with J_ny = d log p(y|x_n) / d theta by autograd.
    """
    if wrt == "g":
        def logp(theta):
            return _glm_logp(method, W, theta, b, x, eps)
        theta = g
    elif wrt.startswith("w") and wrt[1:].isdigit() and int(wrt[1:]) < W.shape[0]:
        i = int(wrt[1:])

        def logp(theta):
            return _glm_logp(method, torch.cat([W[:i], theta[None], W[i + 1:]]), g, b, x, eps)
        theta = W[i]
    else:
        raise ValueError(f"fisher_block expected wrt='g' or 'w<i>' with 0 <= i < {W.shape[0]}, "
                         f"received {wrt!r}. Use e.g. wrt='w0' for the first unit's weights.")
    _load_forward_ad()
    J = torch.func.jacfwd(logp)(theta)                          # (N, K, P)
    p = logp(theta).exp().detach()                              # (N, K)
    return torch.einsum("nk,nki,nkj->ij", p, J, J) / x.shape[0]


def kl_divergence(method: str, params: tuple, params2: tuple, x: torch.Tensor,
                  eps: float = 1e-5) -> float:
    """Mean over x of KL(p(.|x; params) || p(.|x; params2)); params = (W, g, b)."""
    lp, lq = _glm_logp(method, *params, x, eps), _glm_logp(method, *params2, x, eps)
    return float((lp.exp() * (lp - lq)).sum(-1).mean())


def fit_exponent(scales, values) -> float:
    """Least-squares slope of log(value) against log(scale)."""
    xs = torch.tensor([math.log(s) for s in scales], dtype=torch.float64)
    ys = torch.tensor([math.log(v) for v in values], dtype=torch.float64)
    xc = xs - xs.mean()
    return float((xc * (ys - ys.mean())).sum() / xc.square().sum())
