"""The one MLP of the reproduction (section 6.6's shape): input - [Linear - norm - activation] per
hidden layer - Linear logits, the logits never normalized. The runner's ``mlp`` builder (its
example experiment's, ``experiments.builtin``) and the geometry analysis' training runs (section
5.2) are built from it; ``batch_kwargs`` is every model's rule for batch norm's variance."""
from __future__ import annotations

from torch import nn

from layernorm.norms import norm_block

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


def mlp_layers(width: int, hidden, out: int, norm: str, *, activation: str = "relu",
               bias: bool = True, **norm_kwargs) -> list[nn.Module]:
    """The layers of an MLP from ``width`` inputs through the ``hidden`` widths to ``out`` logits:
    each hidden layer is ``norm_block(Linear, norm, **norm_kwargs)`` then the activation; the last
    Linear is plain. ``bias=False`` drops the hidden layers' bias (a norm that centers would
    remove it anyway); the logits keep theirs."""
    if activation not in ACTIVATIONS:
        raise ValueError(f"mlp activation must be one of {sorted(ACTIVATIONS)}, received "
                         f"{activation!r}.")
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [norm_block(nn.Linear(width, h, bias=bias), norm, **norm_kwargs),
                   ACTIVATIONS[activation]()]
        width = h
    layers.append(nn.Linear(width, out))
    return layers


def batch_kwargs(norm: str, unbiased: bool) -> dict:
    """The keyword arguments of ``norm_block`` for ``norm``: only batch norm takes ``unbiased``
    (the variance divided by n - 1, as the paper at small batch sizes)."""
    return {"unbiased": unbiased} if norm == "batch" else {}

