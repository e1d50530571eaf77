"""Files that survive kills: atomic writes (a reader, or a run resumed after a kill, never sees a
half-written file), stale temporary files cleared, locks that a dead holder releases, output
directories checked up front, the one reader of the runner's JSON-lines metrics, of JSON files
and of checkpoints (each failure names the file and the fix), and an error's text on one line."""
from __future__ import annotations

import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

from layernorm.files import atomic_write_bytes, atomic_write_text


def atomic_write_json(path: str | os.PathLike, obj) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def clean_stale_temp_files(folder: str | os.PathLike, pattern: str = ".*.tmp",
                           older_than: float = 0.0) -> list[Path]:
    """Remove the temporary files of atomic writes cut short by a kill (``.<name>.<random>.tmp``).

    Call it only while holding the folder's lock (a live writer's temporary file must survive);
    ``older_than`` (seconds) spares files younger than that for folders without a lock.
    """
    import time
    removed = []
    folder = Path(folder)
    if not folder.is_dir():
        return removed
    now = time.time()
    for tmp in folder.glob(pattern):
        try:
            if tmp.is_file() and now - tmp.stat().st_mtime >= older_than:
                tmp.unlink()
                removed.append(tmp)
        except OSError:
            continue
    return removed


class BusyError(RuntimeError):
    """Another live process holds the lock."""


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike, busy: str, *, error: type[Exception] = BusyError):
    """Hold an exclusive lock on the file ``path`` (created; it records this process's pid) while
    the block runs. Another live holder: ``error(busy.format(pid=...))``, nothing waits.

    A lock left by a dead process is taken over: the OS releases an flock lock when its holder
    dies, even by SIGKILL (without flock, a recorded pid that is not running is stale).
    """
    path = Path(path)
    if path.is_dir():
        raise error(f"the lock file {path} is a directory; expected a plain file (layernorm "
                    f"creates it). Remove that directory and run again.")
    try:
        import fcntl
    except ImportError:      # not POSIX: fall back to the recorded pid
        fcntl = None
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+", encoding="utf-8") as f:
        f.seek(0)
        holder = f.read().strip()
        if fcntl is not None:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise error(busy.format(pid=holder or "unknown")) from None
        elif holder.isdigit() and int(holder) != os.getpid() and _alive(int(holder)):
            raise error(busy.format(pid=holder))
        f.seek(0)
        f.truncate()
        f.write(f"{os.getpid()}\n")
        f.flush()
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def output_dir(path: str | os.PathLike, option: str = "--out") -> Path:
    """``path`` as a writable directory (created): a file, an unwritable or read-only place
    raise a ValueError naming the path, what went wrong and the fix."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(f"{option} must be a directory, received {str(path)!r}, which is a file. "
                         f"Pass a directory path (it is created if missing).")
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = tempfile.NamedTemporaryFile(dir=path, prefix=".write-test.", delete=True)
        probe.close()
    except OSError as err:
        raise ValueError(f"{option} must be a writable directory, received {str(path)!r}: "
                         f"{err.strerror or err}. Pass a directory on a writable filesystem."
                         ) from None
    return path


# ----------------------------------------------------------------------------- tables
def format_table(rows: list[dict], columns: list[str]) -> str:
    """A plain-text table; floats with 3 significant decimals."""
    def cell(v):
        return f"{v:.3f}" if isinstance(v, float) else str(v)
    body = [[cell(r.get(c, "")) for c in columns] for r in rows]
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c)
              for i, c in enumerate(columns)]
    line = lambda cells: "  ".join(s.rjust(w) for s, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(columns), line(["-" * w for w in widths])] + [line(b) for b in body])


# ----------------------------------------------------------------------------- JSON lines
class MetricsError(ValueError):
    """A metrics file holds a line that is not a complete metrics row."""


METRIC_REQUIRED = ("step", "test_error")


def read_jsonl(path: str | os.PathLike, *, required: tuple[str, ...] = ()) -> list[dict]:
    """The rows of a JSON-lines file written by appending one complete line at a time.

    A torn last line (a kill during an append: no final newline, not valid JSON) is skipped, since
    nothing after it was written. Any other line that is not a JSON object holding ``required``
    raises a ``MetricsError`` naming the file and the line number: rows are never dropped
    silently. A missing file has no rows.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    except (OSError, UnicodeDecodeError) as err:
        raise MetricsError(f"cannot read {path}: {err}. Delete the run directory to retrain "
                           f"it.") from err
    lines = text.split("\n")
    rows = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            if number < len(lines) and line:
                raise MetricsError(f"{path} line {number}: expected a JSON object, received a "
                                   f"blank line. Delete the run directory to retrain it.")
            continue
        torn = number == len(lines)       # the last piece has no newline after it
        try:
            row = json.loads(line)
        except json.JSONDecodeError as err:
            if torn:
                break
            raise MetricsError(f"{path} line {number}: expected a JSON object, received "
                               f"{line[:60]!r} ({err.msg}). The file was damaged after it was "
                               f"written; delete the run directory to retrain it.") from None
        missing = [k for k in required if not isinstance(row, dict) or k not in row]
        if missing:
            if torn:
                break
            raise MetricsError(f"{path} line {number}: expected a metrics row with "
                               f"{list(required)}, received "
                               f"{sorted(row) if isinstance(row, dict) else type(row).__name__} "
                               f"(missing {missing}). Was it written by another program? "
                               f"Delete the run directory to retrain it.")
        rows.append(row)
    return rows


def read_metrics(run_dir: str | os.PathLike) -> list[dict]:
    """The rows of ``run_dir/metrics.jsonl``, the one reader of metrics for the whole project
    (the runner's resume, the runner's summary and the report). See ``read_jsonl``."""
    return read_jsonl(Path(run_dir) / "metrics.jsonl", required=METRIC_REQUIRED)


# ----------------------------------------------------------------------------- errors as text
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_FRAME = re.compile(r'^(\s*)File ".*", line \d+')


def error_text(err: BaseException | str, limit: int = 1000) -> str:
    """An error's message on one line, with what informs kept. torch's multi-line errors lose
    their separator rows (of '=' or '-'), blank lines, repeated lines and traceback frames; a
    failed rank's report from torch's elastic launcher puts its "Root Cause" section right after
    its title. The kept lines are joined with " | "; past ``limit`` characters the start and the
    end (the exception that ended the failed process) are kept."""
    text = _ANSI.sub("", err if isinstance(err, str) else str(err))
    kept, frame = [], None
    for line in text.splitlines():
        indent = len(line) - len(line.lstrip())
        if frame is not None and indent > frame and line.strip():
            continue                           # a frame's source line or its ^^^ marker
        frame = None
        if _FRAME.match(line):
            frame = indent
            continue
        header = "Traceback (most recent call last):"
        s = " ".join(line.replace(header, "").split())
        if (not s or set(s) <= {"=", "-"} or s == "<NO_OTHER_FAILURES>" or s in kept
                or (header in line and s.endswith(":"))):     # "traceback : Traceback (...):"
            continue
        kept.append(s)
    if not kept:
        return type(err).__name__ if isinstance(err, BaseException) else ""
    root = next((i for i, s in enumerate(kept) if s.startswith("Root Cause")), None)
    if root:
        others = [s for s in kept[1:root] if s != "Failures:"]
        kept = kept[:1] + kept[root:] + (["Other failures:"] + others if others else [])
    out = " | ".join(kept)
    if len(out) > limit:
        head = limit // 3
        out = out[:head] + " ... " + out[len(out) - (limit - head - 5):]
    return out


# ----------------------------------------------------------------------------- JSON, checkpoints
def read_json(path: str | os.PathLike, what: str, fix: str, *,
              error: type[Exception] = ValueError, required: bool = False):
    """The JSON value in ``path``; None when the file does not exist and is not ``required``.
    A missing required file, an unreadable one or one that is not JSON raises ``error`` naming
    the file, ``what`` it holds and ``fix`` (what to do about it)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        if required:
            raise error(f"{path} not found; expected {what}. {fix}") from None
        return None
    except OSError as err:
        raise error(f"{path} cannot be read ({err.strerror or err}); expected {what}. "
                    f"{fix}") from None
    except UnicodeDecodeError as err:
        raise error(f"{path} is not valid JSON (not UTF-8 text: {err.reason}); expected "
                    f"{what}. {fix}") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise error(f"{path} is not valid JSON ({err}); expected {what}. {fix}") from None


def load_weights(path: str | os.PathLike, fix: str, *, error: type[Exception] = ValueError):
    """``torch.load(path, weights_only=True)`` onto the CPU. A checkpoint layernorm writes holds
    tensors and plain containers only; a file that needs more is refused (it may be malicious,
    and is never loaded with ``weights_only=False``). Any failure raises ``error`` naming the
    file, torch's reason (without its advice to load with ``weights_only=False``) and ``fix``."""
    import torch
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 — torch raises many types for a damaged file
        text = _ANSI.sub("", str(err))
        if "Weights only load failed" in text:
            after = text.split("WeightsUnpickler error:", 1)[-1]
            detail = " ".join(re.split(r"Please use|Check the documentation", after)[0].split())
            if detail.startswith("Unsupported global"):
                reason = (f"it holds objects other than tensors and plain containers, which a "
                          f"layernorm checkpoint never does ({detail}); it may be malicious: do "
                          f"not load it with weights_only=False")
            else:
                reason = f"it is damaged or not a checkpoint ({detail or 'unreadable pickle'})"
        else:
            reason = f"{type(err).__name__}: {error_text(err, 300)}"
        raise error(f"{path} cannot be read as a checkpoint ({reason}). {fix}") from None
