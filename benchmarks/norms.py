"""LayerNorm forward+backward time vs torch.nn.LayerNorm (ratios from one run).

    python benchmarks/norms.py [--repeat N] [--device cuda] [--json out.json]

Same as ``layernorm bench norms``.
"""
import sys

from layernorm.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "norms", *sys.argv[1:]]))
