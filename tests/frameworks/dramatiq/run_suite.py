"""Runs Dramatiq's own test suite against the kmq broker: ``python -m tests.frameworks.dramatiq.run_suite [ARGS]``.

The pinned sdist is downloaded at run time (never copied into this repository: LGPL) into ``~/.cache/kmq/``
(``$KMQ_CACHE_DIR``), and its ``tests/test_*.py`` are linked into a package of our own beside a ``common.py`` that
re-exports our helpers; pytest then runs them with our conftest as a plugin (fixtures backed by kmq) and
``excluded.txt`` deselected. Files listed whole in ``excluded.txt`` are not collected at all.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

from tests.frameworks.dramatiq.conftest import SUITE_PACKAGE, read_exclusions

VERSION = "2.2.1"
ROOT = Path(__file__).resolve().parents[3]


def cache_dir() -> Path:
    return Path(os.environ.get("KMQ_CACHE_DIR", Path.home() / ".cache" / "kmq"))


def sdist_tests() -> Path:
    """The sdist's tests/ folder, downloaded and unpacked once."""
    unpacked = cache_dir() / f"dramatiq-{VERSION}"
    tests = unpacked / "tests"
    if tests.is_dir():
        return tests
    downloads = cache_dir() / "sdists"
    archive = downloads / f"dramatiq-{VERSION}.tar.gz"
    if not archive.exists():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                        "--dest", str(downloads), f"dramatiq=={VERSION}"], check=True)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"dramatiq-{VERSION}/tests/")]
        tar.extractall(cache_dir(), members=members, filter="data")
    return tests


def suite_dir(tests: Path) -> Path:
    """A package holding links to the sdist's test files we run, and our common.py in place of theirs."""
    run = cache_dir() / f"dramatiq-{VERSION}-suite"
    package = run / SUITE_PACKAGE
    package.mkdir(parents=True, exist_ok=True)
    for old in package.glob("test_*.py"):
        old.unlink()
    skipped_files = {name for name in read_exclusions() if "::" not in name}
    for source in sorted(tests.glob("test_*.py")):
        if source.name not in skipped_files:
            (package / source.name).symlink_to(source)
    (package / "__init__.py").write_text("")
    (package / "common.py").write_text("from tests.frameworks.dramatiq.common import *  # noqa: F403\n")
    return run


def main(argv: list[str]) -> int:
    """``argv``: pytest options, and optionally some of the suite's files or tests (``test_actors.py::test_x``)."""
    run = suite_dir(sdist_tests())
    picked = [str(run / SUITE_PACKAGE / a.removeprefix(f"{SUITE_PACKAGE}/")) for a in argv
              if a.removeprefix(f"{SUITE_PACKAGE}/").startswith("test_")]
    options = [a for a in argv if not a.removeprefix(f"{SUITE_PACKAGE}/").startswith("test_")]
    args = [sys.executable, "-m", "pytest", *(picked or [str(run / SUITE_PACKAGE)]), "--rootdir", str(run),
            "--confcutdir", str(run), "-p", "tests.frameworks.dramatiq.conftest", "-p", "no:cacheprovider",
            "--timeout", "120", "-ra", *options]
    # Run from the repository, so ``tests`` and ``kmq`` import from it.
    return subprocess.run(args, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
