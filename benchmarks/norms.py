"""LayerNorm, BatchNorm and RMSNorm forward+backward time vs torch's (ratios from one run).

    python benchmarks/norms.py [--norms layer batch rms] [--shapes NxH ...] [--repeat N] [--json out.json]

Same as ``layernorm bench norms``.
"""
import sys

from layernorm_paper.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "norms", *sys.argv[1:]]))
