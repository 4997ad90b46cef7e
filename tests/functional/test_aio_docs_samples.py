"""The asyncio and OpenTelemetry guides' samples (docs/snippets) run as written against a real broker,
with the KMQ_* environment that makes ``Config.load()`` give the test's config. Long-running samples (workers) run
until the test has seen them work, then get SIGTERM and must exit 0."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from kmq import Config, Service
from tests.helpers import ROOT, ConfigFactory, env_for
from tests.markers_io import wait_for

pytestmark = pytest.mark.timeout(240)

SNIPPETS = ROOT / "docs" / "snippets"


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    target = tmp_path / "snippets"
    shutil.copytree(SNIPPETS, target)
    return target


def sample_env(config: Config) -> dict[str, str]:
    env = env_for(config)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # the `kmq` command
    return env


def run(config: Config, workdir: Path, sample: str) -> str:
    done = subprocess.run([sys.executable, sample], cwd=workdir, env=sample_env(config), capture_output=True,
                          text=True, timeout=150, check=False)
    assert done.returncode == 0, f"{sample} exited {done.returncode}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_the_asyncio_library_sample_sends_receives_and_settles(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    out = run(config, workdir, "aio_library.py")
    assert "sent " in out and "sending email to ada@example.com" in out


@pytest.mark.parametrize("sample", ["sh/aio_worker.sh", "aio_decorated_worker.py"])
def test_the_coroutine_worker_samples_run_jobs_and_drain_on_sigterm(
    kmq_config: ConfigFactory, workdir: Path, sample: str,
) -> None:
    """sh/aio_worker.sh runs the handler of "aio_handlers.py"; the decorated sample has its own."""
    config = kmq_config()
    if sample.endswith(".sh"):
        (line,) = [x for x in (workdir / sample).read_text().splitlines() if x.strip()]
        command = ["bash", "-euc", f"exec {line}"]
    else:
        command = [sys.executable, sample]
    out_file = workdir / "worker.out"
    with out_file.open("w") as out:
        proc = subprocess.Popen(command, cwd=workdir, env=sample_env(config), stdout=out, stderr=subprocess.PIPE,
                                text=True)
    try:
        with Service(config).queue("emails").producer() as producer:
            for i in range(5):
                producer.send(f"job-{i}".encode())
        assert wait_for(lambda: out_file.read_text().count("done job-") == 5, timeout_s=90), out_file.read_text()
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err[-3000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=30)


def test_the_opentelemetry_sample_traces_send_process_and_ack(kmq_config: ConfigFactory, workdir: Path) -> None:
    config = kmq_config()
    out = run(config, workdir, "otel_setup.py")
    for needle in ('"name": "checkout"', '"name": "send emails"', '"name": "process emails"', '"name": "ack"',
                   '"messaging.kmq.delivery_count": 1'):
        assert needle in out, needle
