"""argparse types shared by the commands: a bad value is refused by argparse itself (usage line,
one error line, exit 2) with what was expected, what was received and the fix."""
from __future__ import annotations

import argparse

SEED_MAX = 2**32 - 1     # numpy's range too; the runner derives per-epoch seeds from it


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, received {text!r}") from None


def positive_int(text: str) -> int:
    """An integer >= 1."""
    value = _int(text, "an integer >= 1")
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, received {text}; pass 1 or "
                                         f"more")
    return value


def seed(text: str) -> int:
    """A random seed in [0, 2**32 - 1]."""
    value = _int(text, f"an integer seed in [0, {SEED_MAX}]")
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, {SEED_MAX}] (2**32 - 1), "
                                         f"received {text}; pass a smaller seed such as 0")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number > 0, received {text!r}; pass "
                                         f"e.g. 1e-5")
    return value


def nonnegative_int(text: str) -> int:
    """An integer >= 0."""
    value = _int(text, "an integer >= 0")
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, received {text}; pass 0 or "
                                         f"more")
    return value


def int_at_least(low: int):
    """The type of an integer >= ``low``."""
    def check(text: str) -> int:
        value = _int(text, f"an integer >= {low}")
        if value < low:
            raise argparse.ArgumentTypeError(f"expected an integer >= {low}, received {text}; "
                                             f"pass {low} or more")
        return value
    check.__name__ = f"integer >= {low}"
    return check


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 <= value < float("inf")):
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0, received {text!r}; pass "
                                         f"e.g. 0 or 1e-5")
    return value
