"""``python -m layernorm``: the ``layernorm`` command, whose program is the paper's reproduction's
(``layernorm_paper.__main__``; the installed ``layernorm`` script runs ``layernorm_paper:main``).
``python -m layernorm`` is what docs/distributed.md's ``torchrun ... -m layernorm run EXP`` runs,
so this file hands the process over to that program: it runs ``layernorm_paper``'s ``__main__``
by name, as ``python -m layernorm_paper`` would. It is the library's one reference to the
reproduction, in a program that ``import layernorm`` never loads."""
import importlib.util
import runpy
import sys

PROGRAM = "layernorm_paper"

if importlib.util.find_spec(PROGRAM) is None:   # the library installed without the reproduction
    sys.exit("layernorm: error: the command is the paper's reproduction, not installed here; "
             "install it with: pip install 'layernorm[paper]'")
runpy.run_module(PROGRAM, run_name="__main__", alter_sys=True)
