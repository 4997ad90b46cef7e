"""kmq's build: pyproject.toml holds the metadata; this file adds the consumer's per-record hot path compiled by mypyc.

The modules below run for every record a consumer reads or settles (issue #37, docs/performance.md). With
``KMQ_COMPILE=1`` (``make compiled``, ``make dist``), mypyc compiles them from the same typed source (mypy --strict
clean) into C extensions that sit beside the ``.py`` files; the ``.py`` files stay the reference
(``tests/unit/test_compiled.py`` holds the two equal). Without it, or when mypyc cannot be imported, or when no C
compiler works (one line says which), the build is pure Python: opt-in, so the many ``pip install -e`` of a
checkout stay quick and ``make compiled`` builds the extensions once per venv.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import tempfile
from pathlib import Path

from setuptools import setup

#: One concept per module, each small and free of monkeypatching and interpreted subclasses (mypyc's rules).
HOT_PATH = [
    "kmq/client/message.py",
    "kmq/client/consumer/record_messages.py",
    "kmq/client/consumer/intake.py",
    "kmq/client/consumer/settle_sink.py",
    "kmq/client/consumer/in_flight.py",
    "kmq/client/consumer/late_acks.py",
    "kmq/client/consumer/hand_out.py",
    "kmq/client/consumer/groups/marker_floor.py",
    "kmq/wire/marker_batch.py",
    "kmq/wire/marker_bytes.py",
    "kmq/wire/start_refs.py",
    "kmq/worker/handler_runs.py",
    "kmq/worker/prefetch.py",
    "kmq/worker/settle.py",
    "kmq/worker/metrics.py",
]


def _say(line: str) -> None:
    print(f"kmq: {line}", file=sys.stderr)


def _compiler_problem() -> str | None:
    """Why no C extension can be built here (no compiler, no Python headers), or None."""
    from distutils.ccompiler import new_compiler  # setuptools' own copy (setuptools is imported)
    from distutils.errors import CCompilerError, DistutilsError
    from distutils.sysconfig import customize_compiler

    compiler = new_compiler()
    customize_compiler(compiler)
    with tempfile.TemporaryDirectory() as tmp:
        probe = Path(tmp, "probe.c")
        probe.write_text("#include <Python.h>\nint kmq_probe(void) { return 0; }\n")
        try:
            compiler.compile([str(probe)], output_dir=tmp, include_dirs=[sysconfig.get_paths()["include"]])
        except (CCompilerError, DistutilsError, OSError) as err:
            return f"no working C compiler or Python headers ({str(err).splitlines()[0] if str(err) else err!r})"
    return None


#: setuptools commands that build code; the others (egg_info while a build asks for its requirements, sdist) need
#: no extensions, and mypyc is not installed yet when they run.
BUILDS = {"build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop"}


def ext_modules() -> list[object]:
    if os.environ.get("KMQ_COMPILE") != "1" or not BUILDS & set(sys.argv[1:]):
        return []  # said nowhere: the default (a make target or a release wheel asks for the compiled path)
    try:
        from mypyc.build import mypycify
    except ImportError as err:
        _say(f"mypyc is not importable ({err}): building pure Python")
        return []
    problem = _compiler_problem()
    if problem is not None:
        _say(f"{problem}: building pure Python (the hot path is not compiled)")
        return []
    # Not optional extensions: the modules share one library (kmq._hot_path__mypyc), and a package with some of them
    # built would not import. With a compiler that works, a failure here is a bug to see, not to hide.
    return list(mypycify(HOT_PATH, opt_level="3", group_name="kmq._hot_path"))


setup(ext_modules=ext_modules())
