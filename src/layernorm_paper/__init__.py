"""layernorm_paper: the paper's reproduction, beside the ``layernorm`` library.

Every experiment of "Layer Normalization" (Ba, Kiros, Hinton 2016) and of the two summaries it is
known by (docs/paper.md), rerun at reduced scale on embedded data: the datasets (``data``), the
resumable runner (``experiments``), the models of section 6 (``models``), the experiments
(``reproduce``), the report and its verdicts (``report``, ``verdicts``), the theory measured
(``analysis``), the benchmarks (``bench``) and the ``layernorm`` command (``cli``).

Installed by ``pip install "layernorm[paper]"``; the library never imports it.
"""
from __future__ import annotations

import importlib.util
import sys

# What the reproduction needs beyond torch (pyproject.toml's [paper] extra), by import name.
REQUIRES = ("numpy", "tqdm", "sklearn", "matplotlib", "mnist1d", "scipy", "mlxtend", "rdata")


def missing_requirements() -> list[str]:
    """The import names of REQUIRES that this environment lacks."""
    return [name for name in REQUIRES if importlib.util.find_spec(name) is None]


def main(argv: list[str] | None = None) -> int:
    """The ``layernorm`` command: checks that the [paper] extra is installed, then runs the CLI."""
    missing = missing_requirements()
    if missing:
        print(f"layernorm: error: the command needs the paper's reproduction dependencies; "
              f"missing: {', '.join(missing)}. Install them with: pip install 'layernorm[paper]'",
              file=sys.stderr)
        return 2
    from .cli import main as cli_main      # after the check: the CLI imports numpy and the rest
    return cli_main(argv)
