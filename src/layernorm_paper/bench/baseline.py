"""The TorchScript LN-LSTM that ``bench rnn`` times as a baseline (a scripted cell-by-cell
LN-LSTM in the style of PyTorch's fastrnns benchmarks).

It is not this package's code but a comparison point, so it lives beside the tests' references in
the source checkout's ``tests/reference.py`` (where the tests check it against the float64
reference) and is loaded from that file by path, never through ``sys.path`` (a ``tests`` package
of the user's own would otherwise shadow it). An installed package has no ``tests/``: then
``script_ln_lstm`` returns None and ``bench rnn`` says that the row was left out and why.
"""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

# In the source checkout this file is <root>/src/layernorm/bench/baseline.py, beside
# <root>/pyproject.toml and <root>/tests/; installed, it sits in site-packages, with neither.
_ROOT = Path(__file__).resolve().parents[3]
_IN_CHECKOUT = Path(__file__).resolve().parents[2].name == "src" and \
    (_ROOT / "pyproject.toml").is_file()
REFERENCE = _ROOT / "tests" / "reference.py" if _IN_CHECKOUT else None
MISSING = ("TorchScript LN-LSTM rows left out: they need the source checkout's tests/reference.py "
           "(not part of an installed package)")
_MODULE = "layernorm_bench_reference"


def script_ln_lstm():
    """The class ``ScriptLNLSTM`` of ``tests/reference.py``, or None where that file is absent."""
    if _MODULE in sys.modules:
        return sys.modules[_MODULE].ScriptLNLSTM
    if REFERENCE is None or not REFERENCE.is_file():
        return None
    spec = importlib.util.spec_from_file_location(_MODULE, REFERENCE)
    module = importlib.util.module_from_spec(spec)
    sys.modules[_MODULE] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[_MODULE]
        raise
    return module.ScriptLNLSTM
