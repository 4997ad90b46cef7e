"""Resolving jars from Maven Central into kmq's cache with the machine's Maven (broker, Spark's Kafka source)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from kmq.errors import KmqError


class MavenError(KmqError):
    """Raised when Maven is missing or cannot resolve an artifact; the message names the artifact."""


def cache_root() -> Path:
    base = os.environ.get("KMQ_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "kmq")
    return Path(base)


def copy_jars(pom: Path, properties: dict[str, str], dest: Path, artifact: str, *, log: bool = True) -> Path:
    """Runs ``copy-dependencies`` of ``pom`` into ``dest`` once (a stamp file marks it complete)."""
    stamp = dest / ".complete"
    if stamp.exists():
        return dest
    mvn = shutil.which("mvn")
    if mvn is None:
        raise MavenError(f"Maven (mvn) is not on PATH: it is needed once to fetch {artifact}")
    dest.mkdir(parents=True, exist_ok=True)
    if log:
        print(f"kmq: fetching {artifact} from Maven Central into {dest} ...", file=sys.stderr)
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kmq-mvn-") as build_dir:
        cmd = [mvn, "-B", "-q", "-f", str(pom), "package", f"-Dkafka.libs={dest}",
               f"-Dproject.build.directory={build_dir}", *(f"-D{k}={v}" for k, v in properties.items())]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise MavenError(f"Maven could not resolve {artifact} (is Maven Central reachable?):\n{tail}")
    stamp.write_text(artifact)
    if log:
        size_mb = sum(p.stat().st_size for p in dest.glob("*.jar")) / 1e6
        print(f"kmq: fetched {size_mb:.0f} MB of jars in {time.monotonic() - started:.1f}s", file=sys.stderr)
    return dest
