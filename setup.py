"""kmq's build: pyproject.toml holds the metadata; this file adds the consumer's per-record hot path compiled by mypyc.

The modules below run for every record a consumer reads or settles (issue #37, docs/performance.md). mypyc compiles
them from the same typed source (mypy --strict clean) into C extensions that sit beside the ``.py`` files; the
``.py`` files stay the reference (``tests/unit/test_compiled.py`` holds the two equal). Pure Python is built instead
with ``KMQ_PURE_PYTHON=1``, when mypyc cannot be imported, or when no C compiler works (one line says which).
"""

from __future__ import annotations

import os
import sys

from setuptools import setup

#: One concept per module, each small and free of monkeypatching and interpreted subclasses (mypyc's rules).
HOT_PATH = [
    "kmq/client/message.py",
    "kmq/client/consumer/record_messages.py",
    "kmq/client/consumer/intake.py",
    "kmq/client/consumer/in_flight.py",
    "kmq/client/consumer/late_acks.py",
    "kmq/client/consumer/hand_out.py",
    "kmq/wire/marker_batch.py",
    "kmq/wire/start_refs.py",
]


def _say(line: str) -> None:
    print(f"kmq: {line}", file=sys.stderr)


def ext_modules() -> list[object]:
    if os.environ.get("KMQ_PURE_PYTHON") == "1":
        _say("KMQ_PURE_PYTHON=1: building pure Python (the hot path is not compiled)")
        return []
    try:
        from mypyc.build import mypycify
    except ImportError as err:
        _say(f"mypyc is not importable ({err}): building pure Python")
        return []
    extensions = mypycify(HOT_PATH, opt_level="3", group_name="kmq_hot_path")
    for extension in extensions:
        # A machine with no working C compiler gets the pure-Python package and one warning line per module.
        extension.optional = True
    return list(extensions)


setup(ext_modules=ext_modules())
