"""How the gradient of a recurrent weight grows with the sequence length (the paper's section 3.1
argument about the hidden-to-hidden dynamics, measured): ``hh_gradient_norm`` is |dL/dW_hh| for a
loss on the last step's output; ``gradient_growth`` measures it over lengths and models from the
same initialization. ``layernorm bench growth`` prints it (docs/rnn.md, "Long sequences"), and the
reproduction judges it on trained models (docs/reproduce.md).

Models (``GROWTH_MODELS``): the LN-LSTM at torch's initialization (gains 1), with the recurrent
term's gain at 0.5 (``recurrent_gain=0.5``) and with the cell norm's gain at 0.5, torch.nn.LSTM,
the LN-GRU and the LN-RNN.
"""
from __future__ import annotations

import math
from typing import Callable

import torch
from torch import nn

LENGTHS = (50, 200, 500, 1000, 2000)
DTYPES = {"float64": torch.float64, "float32": torch.float32}


def _ln(cls: str, gain_c: float | None = None, **options) -> Callable[..., nn.Module]:
    """A builder of layernorm's ``cls`` with norm="layer", ``options``, and gain_c set after
    the initialization (the cell norm's gain has no constructor option)."""
    def build(I: int, H: int) -> nn.Module:
        import layernorm
        m = getattr(layernorm, cls)(I, H, norm="layer", **options)
        if gain_c is not None:
            with torch.no_grad():
                m.gain_c_l0.fill_(gain_c)
        return m
    return build


# name: builder(input_size, hidden_size) -> a one-layer module from torch's initialization
_BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "LN-LSTM (gains 1)": _ln("LSTM"),
    "LN-LSTM recurrent_gain=0.5": _ln("LSTM", recurrent_gain=0.5),
    "LN-LSTM cell-norm gain 0.5": _ln("LSTM", gain_c=0.5),
    "torch.nn.LSTM": nn.LSTM,
    "LN-GRU": _ln("GRU"),
    "LN-RNN": _ln("RNN"),
}
GROWTH_MODELS = tuple(_BUILDERS)


def hh_gradient_norm(module: nn.Module, x: torch.Tensor) -> float:
    """|dL/dW_hh| of ``module`` (one recurrent layer with ``weight_hh_l0``, torch's call
    convention) on the input ``x``, the loss the sum of the last step's output; ``math.nan``
    where that norm is not finite in ``x``'s dtype. ``x`` is (T, B, I), or (B, T, I) for a
    ``batch_first`` module."""
    out = module(x)[0]
    last = out[:, -1] if getattr(module, "batch_first", False) else out[-1]
    (grad,) = torch.autograd.grad(last.sum(), [module.weight_hh_l0])
    norm = grad.norm().item()
    return norm if math.isfinite(norm) else math.nan


def gradient_growth(lengths=LENGTHS, models=GROWTH_MODELS, *, hidden: int = 128, batch: int = 4,
                    input_size: int = 32, dtype: torch.dtype = torch.float64, seed: int = 0,
                    progress: bool = False) -> list[dict]:
    """One row per model: {"model", "T": {T: |dL/dW_hh|}} (``math.nan`` where the gradient is not
    finite in ``dtype``). The loss is ``output[-1].sum()`` of a (T, batch, input_size) N(0, 1)
    input through one layer of ``hidden`` units from torch's initialization (``seed``)."""
    unknown = [m for m in models if m not in _BUILDERS]
    if unknown:
        raise ValueError(f"gradient_growth expected models among {list(GROWTH_MODELS)}, received "
                         f"{unknown}. Pass some of those names.")
    if not lengths or min(lengths) < 1:
        raise ValueError(f"gradient_growth expected sequence lengths >= 1, received "
                         f"{list(lengths)}. Pass e.g. lengths=(50, 200).")
    from tqdm import tqdm
    x_all = torch.randn(max(lengths), batch, input_size,
                        generator=torch.Generator().manual_seed(seed), dtype=dtype)
    rows = []
    jobs = [(name, T) for name in models for T in lengths]
    found: dict[str, dict[int, float]] = {name: {} for name in models}
    for name, T in tqdm(jobs, desc="bench growth", disable=not progress):
        torch.manual_seed(seed)
        m = _BUILDERS[name](input_size, hidden).to(dtype)
        found[name][T] = hh_gradient_norm(m, x_all[:T])
    for name in models:
        rows.append({"model": name, "T": found[name]})
    return rows
