"""``python -m layernorm``: the ``layernorm`` command of the paper's reproduction (``torchrun ...
-m layernorm run EXP`` in docs/distributed.md). Run as a program only: ``import layernorm`` never
loads this file, and the library imports nothing of the reproduction."""
import sys

try:
    from layernorm_paper import main
except ImportError:                # the library installed without the reproduction
    sys.exit("layernorm: error: the command is the paper's reproduction, not installed here; "
             "install it with: pip install 'layernorm[paper]'")

sys.exit(main())
