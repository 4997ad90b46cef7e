"""kombu's own integration test classes, from the pinned PyPI sdist, downloaded at test time (never copied here).

``python -m tests.frameworks.kombu.sdist`` (run by ``make test-celery``) downloads ``kombu==KOMBU_VERSION`` with
pip into ``$KMQ_CACHE_DIR`` (default ``~/.cache/kmq``) and unpacks it; ``ensure()`` does the same from a test
session, so ``pytest tests/frameworks/kombu`` also works alone.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

KOMBU_VERSION = "5.7.0"


def cache_dir() -> Path:
    return Path(os.environ.get("KMQ_CACHE_DIR") or Path.home() / ".cache" / "kmq")


def ensure(version: str = KOMBU_VERSION) -> Path:
    """The unpacked sdist's root (it holds ``t/integration/common.py``), downloading it once."""
    root = cache_dir() / f"kombu-{version}"
    if (root / "t" / "integration" / "common.py").is_file():
        return root
    downloads = cache_dir() / "sdists"
    downloads.mkdir(parents=True, exist_ok=True)
    archive = downloads / f"kombu-{version}.tar.gz"
    if not archive.is_file():
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-binary", ":all:", "--no-deps",
                        "--no-build-isolation", f"kombu=={version}", "-d", str(downloads)], check=True)
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(f"kombu-{version}/t/")]
        tar.extractall(cache_dir(), members=members, filter="data")
    return root


if __name__ == "__main__":
    print(ensure())
