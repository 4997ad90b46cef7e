"""The public names: ``kmq.__version__``, every name of ``kmq.__all__``, and every name the README and the docs'
samples import from ``kmq`` (``from kmq import …``) exist."""

from __future__ import annotations

import ast
import importlib.util
import re
from pathlib import Path

import kmq

ROOT = Path(__file__).resolve().parents[2]


def _imported_from_kmq(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "kmq":
            names.update(alias.name for alias in node.names)
    return names


def test_the_version_and_every_name_of_all_exist() -> None:
    assert re.fullmatch(r"\d+\.\d+\.\d+", kmq.__version__)
    missing = [name for name in kmq.__all__ if not hasattr(kmq, name)]
    assert missing == []


def test_every_name_the_readme_and_the_doc_samples_import_from_kmq_is_in_all() -> None:
    sources = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)
    sources += [p.read_text() for p in (ROOT / "docs" / "snippets").rglob("*.py")]
    used = set().union(*(_imported_from_kmq(s) for s in sources))
    assert used, "the README and the samples import from kmq"
    submodules = {name for name in used if importlib.util.find_spec(f"kmq.{name}") is not None}  # from kmq import otel
    assert used - set(kmq.__all__) - submodules == set()
