"""What a reader of the built site meets: the home page leads to every guide, and a missing page's 404 keeps its
styles and links under whatever path the site is served from."""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "docs" / "hooks"))

from not_found import relative_404  # noqa: E402


def test_the_home_page_leads_to_every_guide() -> None:
    home = (ROOT / "docs" / "index.md").read_text()
    guides = sorted(p.name for p in (ROOT / "docs" / "guides").glob("*.md") if p.name != "index.md")
    missing = [g for g in guides if f"(guides/{g})" not in home]
    assert not missing, f"docs/index.md's 'where to go' does not link {missing}"


def test_the_404_page_links_relative_to_a_root_it_finds_when_it_loads() -> None:
    page = ('<html><head><link rel="stylesheet" href="/assets/main.css"><link href="https://fonts.example/x">'
            '</head><body><a href="/.">Home</a><a href="/guides/worker/">Workers</a>'
            '<script id="__config" type="application/json">{"base": "/", "search": "/assets/search.js"}</script>'
            '<script src="/assets/bundle.js"></script></body></html>')
    out = relative_404(page, {"assets", "guides"})
    assert not re.search(r'(href|src)="/(?!/)', out.replace('<base href="', "")), out
    assert 'href="https://fonts.example/x"' in out and 'href="guides/worker/"' in out
    assert out.index("__kmqSiteRoot") < out.index('href="assets/main.css"')  # the <base> comes first
    assert out.index('id="__config"') < out.index("config[key] = window.__kmqSiteRoot") < out.index("bundle.js")
    assert '["assets", "guides"]' in out
