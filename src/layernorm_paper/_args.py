"""argparse types shared by the commands: a bad value is refused by argparse itself (one error
line, exit 2) with what was expected, what was received and the fix."""
from __future__ import annotations

import argparse

# The one bound of a seed, for --seed and for the runner's Config: numpy's range too; the runner
# derives per-epoch seeds from it.
SEED_MAX = 2**32 - 1


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, received {text!r}") from None


def seed(text: str) -> int:
    """A random seed in [0, 2**32 - 1]."""
    value = _int(text, f"an integer seed in [0, {SEED_MAX}]")
    if not 0 <= value <= SEED_MAX:
        raise argparse.ArgumentTypeError(f"expected a seed in [0, {SEED_MAX}] (2**32 - 1), "
                                         f"received {text}; pass a smaller seed such as 0")
    return value


def _finite(text: str, positive: bool) -> float:
    what, example = ("> 0", "1e-5") if positive else (">= 0", "0 or 1e-5")
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 if positive else value >= 0) or value == float("inf"):
        raise argparse.ArgumentTypeError(f"expected a finite number {what}, received {text!r}; "
                                         f"pass e.g. {example}")
    return value


def positive_float(text: str) -> float:
    """A finite number > 0."""
    return _finite(text, True)


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


positive_int = int_at_least(1)          # an integer >= 1
nonnegative_int = int_at_least(0)       # an integer >= 0


def nonnegative_float(text: str) -> float:
    """A finite number >= 0."""
    return _finite(text, False)
