"""The records package finds its record modules itself (``records.discover``): a module dropped
into a package is listed, in the order of its records' ``position``, with nothing else to edit."""
import sys
import textwrap

import pytest

from layernorm_paper import records
from layernorm_paper.records import RECORDS, Record, discover

# the report's order before the records were discovered (the hand-written list it replaced)
REPORT_ORDER = ("mlp_batch_size", "mlp_mnist", "cnn_batch_size", "skip_thoughts", "paper_order",
                "paper_draw", "paper_reader", "paper_handwriting", "paper_charlm",
                "novels_charlm", "rnn_norms", "rnn_downloads", "rnn_imdb", "rnn_pixels_mnist",
                "rnn_stability", "lstm_gain_init", "analysis", "ddp_batch_split")


def _package(tmp_path, name, modules: dict[str, str]):
    root = tmp_path / name
    root.mkdir()
    (root / "__init__.py").write_text("")
    for mod, body in modules.items():
        (root / f"{mod}.py").write_text(textwrap.dedent(body))
    return name


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for mod in [m for m in sys.modules if m.startswith("droppedrecs")]:
        del sys.modules[mod]


def test_the_package_lists_its_records_in_their_positions():
    assert tuple(RECORDS) == REPORT_ORDER
    assert discover() == RECORDS
    assert [r.position for r in RECORDS.values()] == sorted(r.position for r in RECORDS.values())


def test_a_record_module_dropped_into_a_package_is_found(on_path):
    pkg = _package(on_path, "droppedrecs", {
        "swept_thing": """
            from layernorm_paper.records import Record, Sweep
            RECORD = Record("swept_thing", section="6.6", claim="a new swept experiment",
                            position=25, sweep=Sweep(rank=9))
            """,
        "first": """
            from layernorm_paper.records import Record
            A = Record("first_a", section="6.1", claim="one", position=5)
            B = Record("first_b", section="6.1", claim="two", position=40)
            """,
        "imports_another": """
            from .first import A      # a record imported from another module: listed once
            """,
        "_helpers": """
            from layernorm_paper.records import Record
            HIDDEN = Record("hidden", section="6.1", claim="private", position=1)
            """})
    found = discover(pkg)
    assert list(found) == ["first_a", "swept_thing", "first_b"]
    assert found["swept_thing"].sweep.rank == 9


@pytest.mark.parametrize("body, match", [
    ("""
     from layernorm_paper.records import Record
     R = Record("a", section="6.1", claim="x")
     """, "has no position"),
    ("""
     from layernorm_paper.records import Record
     R = Record("a", section="6.1", claim="x", position=3)
     S = Record("b", section="6.1", claim="y", position=3)
     """, "same position 3"),
    ("""
     from layernorm_paper.records import Record
     R = Record("a", section="6.1", claim="x", position=3)
     S = Record("a", section="6.1", claim="y", position=4)
     """, "same name 'a'"),
])
def test_an_undetermined_order_is_refused(on_path, body, match):
    pkg = _package(on_path, "droppedrecs", {"mod": body})
    with pytest.raises(ValueError, match=match):
        discover(pkg)


def test_position_must_be_an_int():
    with pytest.raises(TypeError, match="position must be an int"):
        Record("a", section="6.1", claim="x", position="3")
    assert records.RECORDS["rnn_imdb"].position is not None
