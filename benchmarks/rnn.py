"""LN-LSTM / LN-GRU (fused) vs torch.nn.LSTM / GRU: time, ratios and peak memory, one run; the
cells at batch 1 and 32; BN-LSTM vs LN-LSTM.

    python benchmarks/rnn.py [--quick] [--shapes 100x32x128x256 ...] [--json out.json]

Same as ``layernorm bench rnn`` (see ``layernorm_paper.bench.rnn``).
"""
import sys

from layernorm_paper.cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", "rnn", *sys.argv[1:]]))
