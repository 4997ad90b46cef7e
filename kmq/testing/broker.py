"""A single-node Apache Kafka (KRaft) broker from Maven Central jars, for tests, demos and benches.

The jars are resolved once with Maven into a cache (``~/.cache/kmq/kafka-<version>/libs``); each broker
gets a fresh temporary directory with its own ``server.properties``, ``log4j2.properties`` and data.

Three ways to use it: ``with LocalKafka() as broker: broker.bootstrap_servers``; the pytest session
fixture in ``tests/conftest.py``; and ``python -m kmq.testing.broker up|down|status`` (``make kafka-up``).
``LocalKafka(secure=True)`` starts it with SASL_SSL, SCRAM users and an authorizer (kmq.testing.security).
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from kmq._maven import MavenError, cache_root, copy_jars
from kmq.errors import KmqError
from kmq.testing.security import Security

KAFKA_VERSION = os.environ.get("KMQ_BROKER_VERSION", "4.4.0")
POM = Path(__file__).with_name("kafka-pom.xml")
DEFAULT_HEAP = "768m"
_PR_SET_PDEATHSIG = 1


class BrokerError(KmqError):
    """Raised when the local Kafka broker cannot be fetched, started or reached; the message names the cause."""


def libs_dir(version: str = KAFKA_VERSION) -> Path:
    return cache_root() / f"kafka-{version}" / "libs"


def fetch_jars(version: str = KAFKA_VERSION, *, log: bool = True) -> Path:
    """Resolve kafka_2.13:<version> and its runtime jars into the cache; a no-op when already there."""
    try:
        return copy_jars(POM, {"kafka.version": version}, libs_dir(version),
                         f"org.apache.kafka:kafka_2.13:{version}", log=log)
    except MavenError as err:
        raise BrokerError(str(err)) from err


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def server_properties(port: int, controller_port: int, data_dir: Path,
                      overrides: Mapping[str, str] | None = None, *, host: str = "127.0.0.1",
                      extra_listeners: Mapping[str, tuple[str, int]] | None = None) -> dict[str, str]:
    """The broker+controller config of one KRaft node on ``host`` (127.0.0.1), tuned for one machine's tests.
    ``extra_listeners``: name → (address, port) of more client listeners, each advertising its own address (a
    client in a network namespace reaches the broker there: kmq.testing.faults)."""
    extra = dict(extra_listeners or {})
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.bootstrap.servers": f"{host}:{controller_port}",
        "listeners": ",".join([f"PLAINTEXT://{host}:{port}", f"CONTROLLER://{host}:{controller_port}",
                               *(f"{name}://{a}:{p}" for name, (a, p) in extra.items())]),
        "advertised.listeners": ",".join([f"PLAINTEXT://{host}:{port}",
                                          *(f"{name}://{a}:{p}" for name, (a, p) in extra.items())]),
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": ",".join(["CONTROLLER:PLAINTEXT", "PLAINTEXT:PLAINTEXT",
                                                    *(f"{name}:PLAINTEXT" for name in extra)]),
        "log.dirs": str(data_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        # The internal topics default to RF 3 / min ISR 2 and 50 partitions, which a single node cannot host.
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "3",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "3",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "share.coordinator.state.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        "num.network.threads": "2",
        "num.io.threads": "4",
    }
    props.update(overrides or {})
    return props


def log4j2_properties(log_file: Path) -> str:
    return "\n".join([
        "status = warn",
        "appender.file.type = File",
        "appender.file.name = FILE",
        f"appender.file.fileName = {log_file}",
        "appender.file.layout.type = PatternLayout",
        "appender.file.layout.pattern = [%d] %p %m (%c)%n",
        "rootLogger.level = INFO",
        "rootLogger.appenderRef.file.ref = FILE",
        "logger.state.name = state.change.logger",
        "logger.state.level = WARN",
        "",
    ])


def render_properties(props: Mapping[str, str]) -> str:
    return "".join(f"{k}={v}\n" for k, v in props.items())


def new_cluster_id() -> str:
    # May start with "-": pass it as --cluster-id=ID, never as a separate argument.
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def jvm_command(java: str, heap: str, log4j: Path, libs: Path) -> list[str]:
    """The ``java ... -cp libs/*`` prefix shared by the storage tool and the broker."""
    return [java, f"-Xmx{heap}", "-Xms128m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={log4j}", "-cp", f"{libs}/*"]


def format_storage(jvm: list[str], props_file: Path, cluster_id: str, *, standalone: bool,
                   security: Security | None = None) -> None:
    """``StorageTool format``: ``standalone`` for a single node that bootstraps its own quorum, plain for a node
    of a static ``controller.quorum.voters`` quorum (every voter formatted with the same cluster id); with
    ``security``, the super user's SCRAM credentials are written into the metadata log too."""
    extra = security.format_arguments() if security is not None else []
    fmt = subprocess.run(
        [*jvm, "kafka.tools.StorageTool", "format", *(["--standalone"] if standalone else []),
         f"--cluster-id={cluster_id}", "-c", str(props_file), *extra], capture_output=True, text=True, check=False)
    if fmt.returncode != 0:
        said = f"{fmt.stdout}{fmt.stderr}"
        if security is not None:
            said = said.replace(security.admin_password, "***")
        raise BrokerError(f"formatting Kafka storage failed:\n{said}")


def die_with_parent(sig: int = signal.SIGTERM) -> None:
    """In a child (``preexec_fn``), Linux only: ``sig`` once the process that started it dies, even by SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, sig)


@dataclass
class LocalKafka:
    """One KRaft broker process; a context manager that starts it and stops it with no JVM left behind."""

    port: int | None = None
    version: str = KAFKA_VERSION
    heap: str = DEFAULT_HEAP
    start_timeout_s: float = 90.0
    detached: bool = False
    overrides: dict[str, str] = field(default_factory=dict)
    work_dir: Path | None = None
    #: More client listeners: name → (address, port), each advertising its own address (see server_properties).
    extra_listeners: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: SASL_SSL (SCRAM-SHA-512) for clients, TLS between the node's own listeners, and the StandardAuthorizer.
    secure: bool = False
    process: subprocess.Popen[bytes] | None = field(default=None, init=False)
    start_seconds: float = field(default=0.0, init=False)
    #: With ``secure``: the CA, the node's certificate and the super user (made at start).
    security: Security | None = field(default=None, init=False)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.port}"

    def admin_settings(self) -> dict[str, str]:
        """librdkafka settings of a client with every right: the super user's on a secured broker."""
        return self.security.admin_settings() if self.security is not None else {}

    @property
    def log_file(self) -> Path:
        assert self.work_dir is not None
        return self.work_dir / "broker.log"

    def start(self) -> LocalKafka:
        java = shutil.which("java")
        if java is None:
            raise BrokerError("Java is not on PATH: the local Kafka broker needs Java 17 or newer")
        if self.port is not None and port_in_use(self.port):
            raise BrokerError(f"port {self.port} on 127.0.0.1 is already in use: cannot start Kafka there")
        libs = fetch_jars(self.version)
        started = time.monotonic()
        self.port = self.port or free_port()
        controller_port = free_port()
        self.work_dir = self.work_dir or Path(tempfile.mkdtemp(prefix="kmq-kafka-"))
        self.work_dir.mkdir(parents=True, exist_ok=True)
        props_file = self.work_dir / "server.properties"
        secured: dict[str, str] = {}
        if self.secure:
            self.security = Security.create(self.work_dir / "security")
            secured = self.security.server_properties(self.port, free_port(), controller_port)
        props = server_properties(self.port, controller_port, self.work_dir / "data", {**secured, **self.overrides},
                                  extra_listeners=self.extra_listeners)
        props_file.write_text(render_properties(props))
        log4j = self.work_dir / "log4j2.properties"
        log4j.write_text(log4j2_properties(self.log_file))
        jvm = jvm_command(java, self.heap, log4j, libs)
        format_storage(jvm, props_file, new_cluster_id(), standalone=True, security=self.security)
        out = open(self.work_dir / "stdout.log", "wb")  # noqa: SIM115 - handed to the child
        self.process = subprocess.Popen(
            [*jvm, "kafka.Kafka", str(props_file)], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=self.detached,
            preexec_fn=None if self.detached else die_with_parent)
        out.close()
        try:
            self._wait_ready(started)
        except BaseException:
            self.stop()
            raise
        self.start_seconds = time.monotonic() - started
        return self

    def _wait_ready(self, started: float) -> None:
        from confluent_kafka.admin import AdminClient

        deadline = started + self.start_timeout_s
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0, **self.admin_settings()})
        while time.monotonic() < deadline:
            assert self.process is not None
            if self.process.poll() is not None:
                raise BrokerError(f"Kafka exited with code {self.process.returncode} during start-up:\n"
                                  f"{self.log_tail()}")
            try:
                admin.list_topics(timeout=2)
                return
            except Exception:  # noqa: BLE001 - any failure here means "not ready yet"
                time.sleep(0.2)
        raise BrokerError(f"Kafka did not answer within {self.start_timeout_s:.0f}s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 25) -> str:
        texts = []
        for name in ("stdout.log", "broker.log"):
            path = (self.work_dir or Path("/nonexistent")) / name
            if path.exists():
                texts.extend(path.read_text(errors="replace").splitlines()[-lines:])
        return "\n".join(texts[-lines:]) or "(no broker log)"

    def stop(self, timeout_s: float = 20.0) -> None:
        proc, self.process = self.process, None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self.work_dir is not None and not self.detached:
            shutil.rmtree(self.work_dir, ignore_errors=True)

    def __enter__(self) -> LocalKafka:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


# --- `make kafka-up` / `make kafka-down`: a broker that outlives the command that started it -----------

def run_dir(checkout: Path | None = None) -> Path:
    """Where `make kafka-up` and `make cluster-up` keep their state and data: a directory per checkout (this one's,
    by default), so a second checkout's `make kafka-down` stops its own broker, not the first one's."""
    if checkout is None:
        root = Path(__file__).resolve().parents[2]
        checkout = root if (root / "pyproject.toml").exists() else Path.cwd()
    checkout = checkout.resolve()
    return cache_root() / "run" / f"{checkout.name}-{hashlib.sha256(str(checkout).encode()).hexdigest()[:10]}"


def _state_file() -> Path:
    return run_dir() / "broker.json"


def up(port: int | None) -> str:
    state = _state_file()
    if state.exists():
        info = json.loads(state.read_text())
        if alive(int(info["pid"])):
            return str(info["bootstrap"])
        state.unlink()
    work = run_dir() / "broker"
    shutil.rmtree(work, ignore_errors=True)
    work.parent.mkdir(parents=True, exist_ok=True)
    broker = LocalKafka(port=port, detached=True, work_dir=work).start()
    assert broker.process is not None
    state.write_text(json.dumps({"pid": broker.process.pid, "bootstrap": broker.bootstrap_servers,
                                 "dir": str(work)}))
    print(f"kmq: Kafka {broker.version} up in {broker.start_seconds:.1f}s, log {broker.log_file}",
          file=sys.stderr)
    return broker.bootstrap_servers


def down() -> bool:
    state = _state_file()
    if not state.exists():
        return False
    info = json.loads(state.read_text())
    pid = int(info["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 20
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if alive(pid):
        os.kill(pid, signal.SIGKILL)
    state.unlink()
    shutil.rmtree(info["dir"], ignore_errors=True)
    return True


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (our own exited child) still answers kill 0.
    with contextlib.suppress(OSError):
        return "State:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    return True


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m kmq.testing.broker",
                                     description="Run a local single-node Kafka broker from Maven jars.")
    parser.add_argument("command", choices=["up", "down", "status", "fetch"])
    parser.add_argument("--port", type=int, default=None, help="PLAINTEXT port (default: a free one)")
    args = parser.parse_args(argv)
    try:
        if args.command == "fetch":
            print(fetch_jars())
        elif args.command == "up":
            print(up(args.port))
        elif args.command == "down":
            print("kmq: Kafka stopped" if down() else "kmq: no local Kafka was running", file=sys.stderr)
        else:
            state = _state_file()
            if not state.exists():
                print("down")
                return 1
            print(json.loads(state.read_text())["bootstrap"])
    except BrokerError as err:
        print(f"kmq: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
