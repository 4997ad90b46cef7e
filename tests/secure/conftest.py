"""The secured broker of ``make test-secure``: SASL_SSL with SCRAM-SHA-512, a throwaway CA, the StandardAuthorizer.

Two tenants, each a SCRAM user with a topic set of its own and the ACLs ``kmq acl plan --tenant NAME --apply``
gives it (applied by the harness's super user through the CLI). Every kmq command a test runs is a subprocess
with a tenant's configuration file; what each one printed, and every log file, is kept for the check that no
secret was ever logged (test_tenants.py's last test).
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

from kmq import Config
from kmq.testing.broker import BrokerError, LocalKafka
from tests.helpers import ROOT

TENANTS = ("tenant-a", "tenant-b")
#: Queues a.* live in tenant-a's set, b.* in tenant-b's.
ROUTES = [{"queues": "a.*", "set": "tenant-a"}, {"queues": "b.*", "set": "tenant-b"}]


@dataclass
class SecureRun:
    """The secured broker's tenants: a configuration file each (and the super user's, and one with a wrong
    password), their passwords, and everything kmq printed or logged in this session."""

    broker: LocalKafka
    folder: Path
    passwords: dict[str, str]
    files: dict[str, Path] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)
    log_files: list[Path] = field(default_factory=list)

    def config(self, who: str) -> Config:
        return Config.from_yaml(self.files[who], env={})

    def kmq(self, who: str, *args: str, stdin: str | None = None,
            timeout: float = 90) -> subprocess.CompletedProcess[str]:
        """``kmq ARGS --config <who's file>``, its output kept."""
        done = subprocess.run([sys.executable, "-m", "kmq.cli", *args, "--config", str(self.files[who])], cwd=ROOT,
                              env=self.env(), input=stdin, capture_output=True, text=True, timeout=timeout,
                              check=False)
        self.outputs += [done.stdout, done.stderr]
        return done

    def start(self, who: str, *args: str, log_name: str) -> subprocess.Popen[str]:
        """A long-running ``kmq ARGS`` (a worker, a tracker) as ``who``, its stderr in a kept log file."""
        log_file = self.folder / f"{log_name}.log"
        self.log_files.append(log_file)
        with open(log_file, "w") as sink:
            return subprocess.Popen([sys.executable, "-m", "kmq.cli", *args, "--config", str(self.files[who])],
                                    cwd=ROOT, env=self.env(), stdout=subprocess.DEVNULL, stderr=sink, text=True)

    def env(self) -> dict[str, str]:
        # No KMQ_* variable of the outer run: each process reads its tenant's file and nothing else.
        env = {k: v for k, v in os.environ.items() if not k.startswith("KMQ_")}
        return {**env, "PYTHONPATH": str(ROOT), "SECURE_TEST_DIR": str(self.folder)}


@pytest.fixture(scope="session")
def secure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureRun]:
    try:
        broker = LocalKafka(secure=True).start()
    except BrokerError as err:
        pytest.fail(str(err), pytrace=False)
    try:
        assert broker.security is not None
        run = SecureRun(broker, tmp_path_factory.mktemp("secure"),
                        {t: secrets.token_urlsafe(16) for t in TENANTS})
        _add_users(broker, run.passwords)
        base = {"bootstrap_servers": broker.bootstrap_servers, "topic_sets": {t: {} for t in TENANTS},
                "routes": ROUTES, "redelivery_timeout_ms": 4000}
        logins = {"admin": broker.admin_settings(),
                  **{t: broker.security.client_settings(t, p) for t, p in run.passwords.items()},
                  "wrong": broker.security.client_settings("tenant-a", secrets.token_urlsafe(16))}
        run.passwords["admin"] = broker.security.admin_password
        run.passwords["wrong"] = logins["wrong"]["sasl.password"]
        for who, kafka in logins.items():
            run.files[who] = run.folder / f"{who}.yaml"
            run.files[who].write_text(yaml.safe_dump({**base, "kafka": kafka}))
        for tenant in TENANTS:
            created = run.kmq("admin", "topics", "create", "--set", tenant, "--partitions", "3",
                              "--marker-partitions", "2")
            assert created.returncode == 0, created.stderr
            applied = run.kmq("admin", "acl", "plan", "--tenant", tenant, "--apply")
            assert applied.returncode == 0, applied.stderr
        yield run
    finally:
        broker.stop()


def _add_users(broker: LocalKafka, passwords: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers, **broker.admin_settings()})
    upserts = [UserScramCredentialUpsertion(user, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                                            password.encode()) for user, password in passwords.items()]
    for future in admin.alter_user_scram_credentials(upserts).values():
        future.result(30)
