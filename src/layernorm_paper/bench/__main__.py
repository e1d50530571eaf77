"""``python -m layernorm_paper.bench rnn|norms ...`` = ``layernorm bench rnn|norms ...``."""
import sys

from ..cli import main

if __name__ == "__main__":
    sys.exit(main(["bench", *sys.argv[1:]]))
