"""The API reference (mkdocs.yml): the site builds in strict mode, every warning an error (broken
links in docs/*.md, pages left out of the nav, docstrings griffe cannot parse), from the source
alone (torch, triton and the packages themselves blocked from import), and every public name of
the library has an entry of its own in it, as do the user docs."""
from __future__ import annotations

import html.parser
import inspect
import zlib
from pathlib import Path

import pytest

import layernorm
import layernorm.functional
import layernorm.kernels
import layernorm.rnn
import layernorm.rnn.fused
import layernorm.sync_bn
from tests.blocked import run_blocked

pytest.importorskip("mkdocstrings_handlers.python",
                    reason="the docs extra is not installed: pip install -e '.[docs]'")

ROOT = Path(__file__).resolve().parents[1]

# The modules whose public names the reference must render: ``__all__`` where a module has one,
# else the functions and classes defined in it whose names do not start with "_".
MODULES = (layernorm, layernorm.functional, layernorm.rnn, layernorm.rnn.fused,
           layernorm.sync_bn, layernorm.kernels)

# mkdocs in a fresh interpreter where torch, triton and this project's packages fail to import:
# the pages come from reading the source (griffe), so building them must not need any of them.
_BUILD = r"""
from mkdocs.__main__ import cli
cli(["build", "--strict", "--config-file", sys.argv[1], "--site-dir", sys.argv[2]],
    standalone_mode=False)
"""


def public_names(module) -> list[str]:
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n, v in vars(module).items()
                 if not n.startswith("_") and (inspect.isfunction(v) or inspect.isclass(v))
                 and v.__module__ == module.__name__]
    return [f"{module.__name__}.{n}" for n in names]


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    run_blocked(_BUILD, ("torch", "triton", "layernorm", "layernorm_paper"),
                ROOT / "mkdocs.yml", out, cwd=ROOT)
    return out


def inventory(site: Path) -> dict[str, str]:
    """name -> page#anchor of the primary entries of the site's objects.inv (Sphinx's format:
    four header lines, then zlib-compressed ``name domain:role priority uri display`` lines)."""
    data = (site / "objects.inv").read_bytes()
    *header, body = data.split(b"\n", 4)
    assert header[0] == b"# Sphinx inventory version 2", header
    entries = {}
    for line in zlib.decompress(body).decode().splitlines():
        name, _role, priority, uri, _display = line.split(" ", 4)
        if priority == "1":
            entries[name] = uri.replace("$", name) if uri.endswith("$") else uri
    return entries


class _Ids(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs) -> None:
        self.ids.update(v for k, v in attrs if k == "id" and v)


def page_ids(site: Path, page: str) -> set[str]:
    parser = _Ids()
    parser.feed((site / page / "index.html").read_text(encoding="utf-8"))
    return parser.ids


def test_every_public_name_has_an_entry_in_the_api_reference(site):
    entries = inventory(site)
    expected = [n for m in MODULES for n in public_names(m)]
    assert len(expected) > 50, expected              # the derivation found the names
    missing = [n for n in expected if n not in entries]
    assert not missing, f"not rendered in the API reference (docs/api/*.md, mkdocs.yml): {missing}"
    ids: dict[str, set[str]] = {}
    for name in expected:
        page, _, anchor = entries[name].partition("#")
        assert anchor == name, (name, entries[name])
        if page not in ids:
            ids[page] = page_ids(site, page)
        assert anchor in ids[page], f"{name}: no anchor on {page}"


def test_the_api_reference_renders_the_docstrings(site):
    ids = page_ids(site, "api/layernorm")
    assert "layernorm.LayerNorm" in ids
    text = (site / "api/layernorm/index.html").read_text(encoding="utf-8")
    assert "paper eq. 3" in text                     # LayerNorm's docstring
    fused = (site / "api/fused/index.html").read_text(encoding="utf-8")
    assert "force the torch-ops path" in fused       # USE_NATIVE, a module property


def test_every_user_doc_is_a_page(site):
    docs = sorted(p.stem for p in (ROOT / "docs").glob("*.md"))
    assert "norms" in docs and "index" in docs
    for stem in docs:
        page = site / ("index.html" if stem == "index" else f"{stem}/index.html")
        assert page.is_file(), f"docs/{stem}.md has no page in the site"
