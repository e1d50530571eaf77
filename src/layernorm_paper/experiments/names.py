"""The one place names are checked: names chosen from a list (datasets, models, norms,
experiments, scales: ``check_choice``) and names that become folder names (experiments, models,
tags: ``check_name``)."""
from __future__ import annotations

import re

from layernorm.checks import check_choice

__all__ = ["check_choice", "check_name"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*")


def check_name(value, what: str, *, empty: bool = False) -> str:
    """The one check of the names that become file or registry names (experiment, model, tag):
    letters, digits and ``_ . + -``, not starting with a dot or a dash, so a name is one path
    component and a run directory never resolves outside its output folder."""
    if empty and value == "":
        return value
    if not isinstance(value, str) or not _NAME.fullmatch(value) or len(value) > 100:
        raise ValueError(f"{what} must be a name of letters, digits and '_.+-' (not starting with "
                         f"'.' or '-', at most 100 characters), received {value!r}. Use e.g. "
                         f"'gain1' or 'rnn_norms'; a name is one folder name, never a path.")
    return value
