"""Run a snippet in a fresh interpreter in which some top-level packages fail to import, as in an
environment where they were never installed (the library without the reproduction's extra, the
docs built without torch)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

_PREAMBLE = r"""
import importlib.abc, sys
BLOCKED = set(sys.argv[1].split(","))

class _Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked)")
        return None

sys.meta_path.insert(0, _Block())
sys.argv = sys.argv[:1] + sys.argv[2:]
"""

# The snippet's last line: what it loaded of the blocked packages, which must be nothing.
_EPILOGUE = r"""
_loaded = sorted({m.split(".")[0] for m in sys.modules} & BLOCKED)
assert not _loaded, f"blocked packages were loaded: {_loaded}"
print("ok")
"""


def run_blocked(code: str, blocked, *args: str, cwd: Path, timeout: float = 300):
    """Run ``code`` with ``blocked`` (names of top-level packages) unimportable and ``args`` as its
    sys.argv[1:]; asserts it exited 0, loaded none of them and printed "ok" last."""
    done = subprocess.run([sys.executable, "-c", _PREAMBLE + code + _EPILOGUE, ",".join(blocked),
                           *map(str, args)], capture_output=True, text=True, cwd=cwd,
                          timeout=timeout)
    assert done.returncode == 0, (done.stdout + done.stderr)[-5000:]
    assert done.stdout.strip().endswith("ok"), done.stdout[-2000:]
    return done
