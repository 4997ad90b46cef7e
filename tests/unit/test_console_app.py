"""The console's pages and actions without a broker: its Model fed by hand, its Kafka seam (kmq.console.topics)
replaced by a recorder. Escaping, roles, CSRF, secrets, confirmations with counts, and the log of who did what;
the browser tests (tests/console, make test-console) drive the same against a real broker."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from kmq.config import Config
from kmq.console import topics
from kmq.console.app import CSP, create_app
from kmq.console.auth import hash_password
from kmq.console.letters import Letter
from kmq.console.model import Model
from kmq.console.settings import Settings, User, token_sha256
from kmq.errors import ConfigError
from kmq.ops import lifecycle
from kmq.wire import MessageId
from kmq.wire.markers import EndReason, Marker, MarkerType, encode

NOW = 1_767_225_600_000
XSS = "<script>alert(1)</script>"
PASSWORD = "correct horse battery"
TOKEN = "deploy-token-0123456789"


def _model() -> Model:
    model = Model()
    for offset in range(4):
        model.add_record(lifecycle.to_record(MessageId(0, offset), b"emails", NOW - 60_000 + offset, {}, b"{}"))
    start = Marker(MarkerType.START, MessageId(0, 3), 30_000, b"emails", b"{}", delivery_count=1,
                   client_id="mailer", instance_id="web-1:4242")
    model.add_markers(0, 0, NOW - 30_000, encode(start))
    model.add_record(lifecycle.to_record(MessageId(1, 0), XSS.encode(), NOW - 50_000, {}, b"x"))
    letter = lifecycle.DeadLetter("reports", MessageId(1, 7), f"refused: {XSS}", NOW - 10_000)
    model.add_record(lifecycle.to_record(MessageId(1, 7), b"reports", NOW - 20_000, {}, b"x"))
    model.add_markers(1, 0, NOW - 15_000, encode(Marker(MarkerType.START, MessageId(1, 7), 30_000, b"reports", b"x",
                                                        delivery_count=1, instance_id="web-1:4242")))
    model.add_markers(1, 1, NOW - 10_000, encode(Marker(MarkerType.END, MessageId(1, 7), end_reason=EndReason.REJECTED,
                                                        reason=letter.reason, instance_id="web-1:4242")))
    model.add_dead_letter(Letter(MessageId(0, 5), "reports", MessageId(1, 7), letter.reason, letter.timestamp_ms),
                          letter)
    model.refresh(NOW)
    return model


class Recorder:
    """The Kafka seam's writes, recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        for name in ("pause", "resume", "purge", "commit_redriven"):
            monkeypatch.setattr(topics, name, self._record(name))
        monkeypatch.setattr(topics, "redrive", lambda config, queue, ids: self._note("redrive", queue, ids) or len(ids))

    def _note(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def _record(self, name: str) -> Any:
        return lambda config, *args: self._note(name, *args)


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return Recorder(monkeypatch)


USERS = {"alice": User("alice", "operator", hash_password(PASSWORD)),
         "bot": User("bot", "operator", token_sha256=token_sha256(TOKEN)),
         "bob": User("bob", "viewer", hash_password(PASSWORD))}
CONFIG = Config(bootstrap_servers="127.0.0.1:1", kafka={"sasl.password": "hunter2-secret",
                                                        "security.protocol": "SASL_PLAINTEXT"})


def _client(**settings: Any) -> TestClient:
    app = create_app(CONFIG, Settings(**{"users": USERS, **settings}), _model(), clock=lambda: NOW)
    return TestClient(app, follow_redirects=False)


@pytest.fixture
def client() -> Iterator[TestClient]:
    with _client() as c:
        yield c


def _csrf(client: TestClient, path: str = "/login") -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', client.get(path).text)
    assert found, "no CSRF field"
    return found.group(1)


def _log_in(client: TestClient, user: str, secret: str = PASSWORD) -> None:
    answer = client.post("/login", data={"user": user, "password": secret, "csrf": _csrf(client), "next": "/"})
    assert answer.status_code == 303, answer.text


def test_viewing_needs_a_login_once_users_are_configured(client: TestClient) -> None:
    answer = client.get("/")
    assert answer.status_code == 303 and answer.headers["location"].startswith("/login")
    _log_in(client, "bob")
    assert client.get("/").status_code == 200


def test_anonymous_viewing_on_loopback_without_users() -> None:
    with _client(users={}) as c:
        page = c.get("/")
        assert page.status_code == 200 and "emails" in page.text
        assert "nobody can act" in c.get("/settings").text


def test_listening_beyond_loopback_without_logins_is_refused() -> None:
    with pytest.raises(ConfigError, match="anyone who reaches it"):
        Settings(host="0.0.0.0")
    Settings(host="0.0.0.0", anonymous_viewers=True)
    Settings(host="0.0.0.0", users=USERS)


def test_a_script_in_a_queue_name_payload_or_reason_is_shown_as_text(client: TestClient) -> None:
    _log_in(client, "bob")
    for path in ("/", "/dead-letters?status=any", "/queue?q=" + XSS.replace("<", "%3C").replace(">", "%3E")):
        page = client.get(path)
        assert page.status_code == 200, path
        assert XSS not in page.text, path
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text, path


def test_every_page_carries_the_security_headers(client: TestClient) -> None:
    page = client.get("/login")
    assert page.headers["content-security-policy"] == CSP
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"
    assert "script-src 'self'" in CSP and "unsafe-inline" not in CSP


def test_no_secret_of_the_kafka_settings_is_shown(client: TestClient) -> None:
    _log_in(client, "alice")
    for path in ("/settings", "/", "/workers", "/dead-letters"):
        assert "hunter2" not in client.get(path).text
    page = client.get("/settings").text
    assert "SASL_PLAINTEXT" in page and "***" in page
    assert "$argon2" not in page and token_sha256(TOKEN) not in page


def test_an_action_is_refused_without_an_operator_login(client: TestClient, recorder: Recorder) -> None:
    with capture_logs() as logs:
        answer = client.post("/queue/pause", data={"q": "emails", "csrf": _csrf(client)})
        assert answer.status_code == 403 and "operator" in answer.text
        _log_in(client, "bob")  # a viewer
        answer = client.post("/queue/pause", data={"q": "emails", "csrf": _csrf(client, "/")})
        assert answer.status_code == 403
    assert recorder.calls == []
    refused = [e for e in logs if e["event"] == "console_action_refused"]
    assert [(e["user"], e["why"]) for e in refused] == [("anonymous", "not an operator"), ("bob", "not an operator")]


def test_an_action_with_a_bad_csrf_token_is_refused(client: TestClient, recorder: Recorder) -> None:
    _log_in(client, "alice")
    for token in ("", "forged"):
        answer = client.post("/queue/pause", data={"q": "emails", "csrf": token})
        assert answer.status_code == 403 and "CSRF" in answer.text
    assert recorder.calls == []
    # and a login form's token is checked too
    client.cookies.clear()
    assert client.post("/login", data={"user": "alice", "password": PASSWORD, "csrf": "x"}).status_code == 403


def test_pause_and_resume_are_written_and_logged_with_who(client: TestClient, recorder: Recorder) -> None:
    _log_in(client, "alice")
    csrf = _csrf(client, "/")
    with capture_logs() as logs:
        assert client.post("/queue/pause", data={"q": "emails", "csrf": csrf,
                                                 "until": "2026-01-01T06:00"}).status_code == 303
        assert client.post("/queue/resume", data={"q": "emails"}, headers={"X-CSRF-Token": csrf}).status_code == 303
    assert recorder.calls == [("pause", ("emails", NOW + 6 * 3_600_000)), ("resume", ("emails",))]
    actions = [(e["action"], e["user"]) for e in logs if e["event"] == "console_action"]
    assert actions == [("pause", "alice"), ("resume", "alice")]


def test_a_token_logs_its_operator_in(client: TestClient, recorder: Recorder) -> None:
    _log_in(client, "bot", TOKEN)
    assert client.post("/queue/resume", data={"q": "emails", "csrf": _csrf(client, "/")}).status_code == 303
    assert recorder.calls == [("resume", ("emails",))]


def test_a_wrong_password_is_refused(client: TestClient) -> None:
    answer = client.post("/login", data={"user": "alice", "password": "guess", "csrf": _csrf(client)})
    assert answer.status_code == 401 and "wrong password" in answer.text
    assert client.post("/login", data={"user": "bot", "password": PASSWORD, "csrf": _csrf(client)}).status_code == 401


def test_purge_shows_the_count_then_purges_what_it_showed(client: TestClient, recorder: Recorder) -> None:
    _log_in(client, "alice")
    page = client.get("/queue/purge?q=emails")
    assert page.status_code == 200
    assert re.search(r"the <strong>3</strong> waiting message", page.text)
    before = re.search(r'name="before_ms" value="(\d+)"', page.text)
    assert before is not None and int(before.group(1)) == NOW
    answer = client.post("/queue/purge", data={"q": "emails", "before_ms": before.group(1), "expect": "3",
                                               "csrf": _csrf(client, "/")})
    assert answer.status_code == 303
    assert recorder.calls == [("purge", ("emails", NOW))]


def test_a_bulk_redrive_shows_its_count_first(client: TestClient, recorder: Recorder) -> None:
    _log_in(client, "alice")
    csrf = _csrf(client, "/")
    confirm = client.post("/dead-letters/redrive", data={"mode": "filter", "q": "reports", "status": "waiting",
                                                         "csrf": csrf})
    assert confirm.status_code == 200 and "<strong>1</strong> dead letter" in confirm.text
    assert recorder.calls == []
    done = client.post("/dead-letters/redrive", data={"mode": "filter", "q": "reports", "status": "waiting",
                                                      "expect": "1", "csrf": csrf})
    assert done.status_code == 303
    assert recorder.calls[0] == ("redrive", ("reports", [MessageId(0, 5)]))
    assert recorder.calls[1] == ("commit_redriven", ("reports", {0: 6}))
    # a count that changed since the confirmation asks again
    again = client.post("/dead-letters/redrive", data={"mode": "filter", "q": "reports", "expect": "7",
                                                       "csrf": csrf})
    assert again.status_code == 200 and "<strong>1</strong>" in again.text


def test_the_workers_page_names_each_instance_and_what_it_holds(client: TestClient) -> None:
    _log_in(client, "bob")
    page = client.get("/workers").text
    assert "web-1" in page and "4242" in page and "mailer" in page and "0:3" in page


def test_users_file_errors_name_what_is_wrong(tmp_path: Any) -> None:
    from kmq.console.settings import from_env, load_users

    path = tmp_path / "users.yaml"
    path.write_text("users:\n  eve: {role: admin, password_hash: x}\n")
    with pytest.raises(ConfigError, match="needs a role"):
        load_users(path)
    path.write_text("users:\n  eve: {role: operator, password_hash: plain}\n")
    with pytest.raises(ConfigError, match="argon2"):
        load_users(path)
    with pytest.raises(ConfigError, match="unknown environment variable"):
        from_env({"KMQ_CONSOLE_PASWORD": "x"})
    assert from_env({"KMQ_CONSOLE_OPERATOR_TOKEN": "t"})["users"]["operator"].token_sha256 == token_sha256("t")
