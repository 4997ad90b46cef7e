"""The console's browser tests (make test-console): a real broker (tests/kafka_plugin.py), the scenario of
scenario.py on two topic sets (the default one and ``ledger``, with a queue routed there and one moving there),
two console replicas as processes (``python -m kmq.console``, one session secret, serving every set), and Debian's
chromium driven by Playwright (never a downloaded browser)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient
from playwright.sync_api import Browser, Page, sync_playwright

from kmq._kafka.topics import create_topics
from kmq.config import Config
from kmq.console.auth import hash_password
from tests.console import scenario as sc
from tests.helpers import ROOT, config_file, free_port, unique

CHROMIUM = os.environ.get("KMQ_CHROMIUM", "/usr/bin/chromium")
#: What a browser needs as root on this machine, with no network beyond loopback (docs: polyglot machines).
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
PASSWORD = "operator password 1"
SCREENSHOTS = ROOT / "docs" / "images" / "console"


@dataclass
class Deployment:
    config: Config
    scenario: sc.Scenario
    #: The two replicas' base URLs.
    urls: list[str]


@pytest.fixture(scope="session")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    bootstrap = os.environ["KMQ_BOOTSTRAP_SERVERS"]
    base = unique("console")
    config = Config(bootstrap_servers=bootstrap, message_topic=f"{base}.messages", marker_topic=f"{base}.markers",
                    tracker_group=f"{base}.trackers", consumer_group_prefix=f"{base}.", redelivery_timeout_ms=20_000,
                    topic_sets={sc.LEDGER: {"prefix": f"{base}-{sc.LEDGER}"}}, routes=sc.ROUTES)
    for topics in config.all_topic_sets:
        create_topics(config, topics, partitions=3, marker_partitions=2)
    scenario = sc.build(config)
    directory = tmp_path_factory.mktemp("console")
    users = directory / "users.yaml"
    hashed = hash_password(PASSWORD)
    users.write_text(f'users:\n  alice: {{role: operator, password_hash: "{hashed}"}}\n'
                     f'  bob: {{role: viewer, password_hash: "{hashed}"}}\n')
    # The topic sets and routes are in the file (no variable holds them); no KMQ_* variable of this shell applies.
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("KMQ_")}, "PYTHONPATH": str(ROOT),
           "KMQ_CONSOLE_USERS_FILE": str(users), "KMQ_CONSOLE_SESSION_SECRET": "test-secret-" + base}
    command = [sys.executable, "-m", "kmq.console", "--config", str(config_file(config, directory)), "--refresh",
               "0.5"]
    ports = [free_port(), free_port()]
    logs = [directory / f"console-{i}.log" for i in range(2)]
    outputs = [log.open("w") for log in logs]
    replicas = [subprocess.Popen([*command, "--port", str(port)], cwd=ROOT, env=env, stdout=out,
                                 stderr=subprocess.STDOUT)
                for port, out in zip(ports, outputs, strict=True)]
    try:
        urls = [f"http://127.0.0.1:{port}" for port in ports]
        for url, replica, log in zip(urls, replicas, logs, strict=True):
            _wait_healthy(url, replica, log)
        yield Deployment(config, scenario, urls)
    finally:
        for replica in replicas:
            replica.terminate()
        for replica in replicas:
            try:
                replica.wait(20)
            except subprocess.TimeoutExpired:
                replica.kill()
                replica.wait(10)
        for out in outputs:
            out.close()
        scenario.close()
        topics = [topic for topic_set in config.all_topic_sets for topic in topic_set.topics]
        admin = AdminClient({"bootstrap.servers": bootstrap})  # held: its futures fail once it is collected
        for future in admin.delete_topics(topics, operation_timeout=30).values():
            future.result(30)


def _wait_healthy(url: str, replica: subprocess.Popen[bytes], log: Path, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if replica.poll() is not None:
            raise AssertionError(f"the console exited ({replica.returncode}):\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2) as answer:
                if answer.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise AssertionError(f"the console at {url} did not catch up within {timeout_s:.0f}s:\n{log.read_text()[-3000:]}")


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no browser at {CHROMIUM}: `make test-console` installs Debian's chromium")
    with sync_playwright() as playwright:
        found = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield found
        found.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh browser context (no cookies), failing the test on any script error or dialog (an alert() run)."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    found = context.new_page()
    errors: list[str] = []
    found.on("pageerror", lambda error: errors.append(str(error)))
    found.on("dialog", lambda dialog: (errors.append(f"a dialog was opened: {dialog.message}"), dialog.dismiss()))
    # Console errors but a response's status (403s are tested for): a CSP violation is one.
    found.on("console", lambda message: errors.append(message.text) if message.type == "error"
             and not message.text.startswith("Failed to load resource") else None)
    yield found
    context.close()
    assert not errors, errors


def log_in(page: Page, base: str, user: str = "alice", password: str = PASSWORD) -> None:
    page.goto(base + "/login")
    page.fill("input[name=user]", user)
    page.fill("input[name=password]", password)
    page.click("#login-form button[type=submit]")
    page.wait_for_selector("#flash")


def wait_for_text(page: Page, url: str, selector: str, text: str, timeout_s: float = 30) -> str:
    """Reloads ``url`` until ``selector`` holds ``text`` (the console shows what its follower read, within a round)."""
    deadline = time.monotonic() + timeout_s
    seen = ""
    while time.monotonic() < deadline:
        page.goto(url)
        seen = page.inner_text(selector) if page.query_selector(selector) else ""
        if text in seen:
            return seen
        time.sleep(0.5)
    raise AssertionError(f"{url}: {selector} never held {text!r}; last: {seen!r}")


def screenshot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)
