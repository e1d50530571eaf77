"""How far a bfloat16 LN-LSTM / LN-GRU can be from the float64 module, whatever its kernels do.

The half-type tests compare a bfloat16 module with the float64 module holding the same bfloat16
values (docs/rnnfast.md). Over long sequences that distance is mostly the model's own
sensitivity, not the kernels' rounding: this script rounds only the input term W_x x to bfloat16
(as torch's bfloat16 ``F.linear`` returns it) inside an otherwise float64 forward, then also each
layer's input and h_{t-1} before W_hh (what a forward on bfloat16 dot products rounds, as torch's
bfloat16 LSTM does), and prints how far the output moves, next to the distance of the library's
bfloat16 forward (inference and training) from the float64 module. Distances are
max |a - b| / (1 + |b|) over the output, in units of bfloat16's eps; randomly initialized
models with their gains and biases jittered by 0.1.

    python benchmarks/bf16_sensitivity.py [--seeds 3]
"""
from __future__ import annotations

import argparse
import copy
import types

import torch
import torch.nn.functional as F

import layernorm
from layernorm import ops
from layernorm.recurrence import steps

EPS = torch.finfo(torch.bfloat16).eps
# (T, B, H, layers): input size 16; one layer, and the 2-layer bidirectional model of the tests
SHAPES = ((9, 5, 24, 1), (50, 8, 64, 1), (100, 4, 128, 1), (9, 5, 24, 2))


def _model(cls: str, H: int, seed: int, layers: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    m = getattr(layernorm, cls)(16, H, num_layers=layers, bidirectional=layers > 1)
    with torch.no_grad():
        for name, p in m.named_parameters():
            if name.startswith(("gain", "bias")):
                p.add_(0.1 * torch.randn_like(p))
    return m.bfloat16().eval()


def _distance(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b).abs() / (1 + b.abs())).max().item() / EPS


def _rounded(a: torch.Tensor) -> torch.Tensor:
    return a.to(torch.bfloat16).to(a.dtype)


# the reference step's functional namespace with W_hh h_{t-1} reading h_{t-1} rounded
_ROUNDED_H = types.ModuleType("rounded_h")
_ROUNDED_H.__dict__.update(F.__dict__)
_ROUNDED_H.linear = lambda a, w, b=None: F.linear(_rounded(a), w, b)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    real = ops.input_linear
    print("cell  T    B  H    L | W_x x rounded | + inputs, h_{t-1} rounded | bf16 inference | "
          "bf16 with grad")
    for cls in ("LSTM", "GRU"):
        for T, B, H, layers in SHAPES:
            worst = [0.0, 0.0, 0.0, 0.0]
            for seed in range(args.seeds):
                m = _model(cls, H, seed, layers)
                ref = copy.deepcopy(m).double()
                x = torch.randn(T, B, 16).bfloat16()
                with torch.no_grad():
                    out64 = ref(x.double())[0]
                    ops.input_linear = lambda a, w: _rounded(real(a, w))
                    try:
                        rounded = ref(x.double())[0]
                        ops.input_linear = lambda a, w: _rounded(real(_rounded(a), w))
                        steps.F = _ROUNDED_H
                        rounded_h = ref(x.double())[0]
                    finally:
                        ops.input_linear, steps.F = real, F
                with torch.inference_mode():
                    inference = m(x)[0]
                trained = m(x)[0].detach()
                for k, out in enumerate((rounded, rounded_h, inference, trained)):
                    worst[k] = max(worst[k], _distance(out, out64))
            print(f"{cls:4s}  {T:<4d} {B:<2d} {H:<4d} {layers} | {worst[0]:13.1f} | "
                  f"{worst[1]:25.1f} | {worst[2]:14.1f} | {worst[3]:14.1f}")


if __name__ == "__main__":
    main()
