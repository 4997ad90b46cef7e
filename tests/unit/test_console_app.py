"""The console's pages and actions without a broker: its Models fed by hand, its Kafka seam (kmq.console.topics)
replaced by a recorder. Escaping, roles, CSRF, secrets, confirmations with counts, the log of who did what, and
topic sets (a moving queue in two sets, actions written to the sets served only); the browser tests (tests/console,
make test-console) drive the same against a real broker."""

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
from kmq.console.model import Model, Models
from kmq.console.settings import Settings, User, token_sha256
from kmq.errors import ConfigError
from kmq.ops import lifecycle
from kmq.wire import MessageId
from kmq.wire.markers import EndReason, Marker, MarkerType, encode

NOW = 1_767_225_600_000
XSS = "<script>alert(1)</script>"
PASSWORD = "correct horse battery"
TOKEN = "deploy-token-0123456789"


def _model(model: Model) -> None:
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


def _models(config: Config, served: tuple[str, ...] | None = None) -> Models:
    models = Models([config.topic_set(name) for name in served] if served else list(config.all_topic_sets))
    if "default" in models.sets:
        _model(models["default"])
    return models


class Recorder:
    """The Kafka seam's writes, recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        for name in ("pause", "resume", "purge", "commit_redriven"):
            monkeypatch.setattr(topics, name, self._record(name))
        monkeypatch.setattr(topics, "redrive", lambda config, where, queue, ids: self._note(
            "redrive", _names(where), queue, ids) or len(ids))

    def _note(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))

    def _record(self, name: str) -> Any:
        return lambda config, where, *args: self._note(name, _names(where), *args)


def _names(where: Any) -> Any:
    """The set names an action was written to (a TopicSet, or the list of them)."""
    return where.name if hasattr(where, "name") else [s.name for s in where]


@pytest.fixture
def recorder(monkeypatch: pytest.MonkeyPatch) -> Recorder:
    return Recorder(monkeypatch)


USERS = {"alice": User("alice", "operator", hash_password(PASSWORD)),
         "bot": User("bot", "operator", token_sha256=token_sha256(TOKEN)),
         "bob": User("bob", "viewer", hash_password(PASSWORD))}
CONFIG = Config(bootstrap_servers="127.0.0.1:1", kafka={"sasl.password": "hunter2-secret",
                                                        "security.protocol": "SASL_PLAINTEXT"})


def _client(config: Config = CONFIG, served: tuple[str, ...] | None = None, **settings: Any) -> TestClient:
    app = create_app(config, Settings(**{"users": USERS, **settings}), _models(config, served), clock=lambda: NOW)
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
    assert recorder.calls == [("pause", (["default"], "emails", NOW + 6 * 3_600_000)),
                              ("resume", (["default"], "emails"))]
    actions = [(e["action"], e["user"]) for e in logs if e["event"] == "console_action"]
    assert actions == [("pause", "alice"), ("resume", "alice")]


def test_a_token_logs_its_operator_in(client: TestClient, recorder: Recorder) -> None:
    _log_in(client, "bot", TOKEN)
    assert client.post("/queue/resume", data={"q": "emails", "csrf": _csrf(client, "/")}).status_code == 303
    assert recorder.calls == [("resume", (["default"], "emails"))]


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
    assert recorder.calls == [("purge", (["default"], "emails", NOW))]


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
    assert recorder.calls[0] == ("redrive", ("default", "reports", [MessageId(0, 5)]))
    assert recorder.calls[1] == ("commit_redriven", ("default", "reports", {0: 6}))
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


# --- topic sets ------------------------------------------------------------------------------------------------------

#: ``reports`` moves from the default set to a set of its own (docs/concepts/topic-sets.md): it is in both.
MOVING = Config(bootstrap_servers="127.0.0.1:1", topic_sets={"reports": None},
                routes=[{"queues": "reports", "set": "reports", "draining": "default"}])


def _moving(served: tuple[str, ...] | None = None) -> TestClient:
    """The default set as above, and set ``reports`` with a message at 0:3 (the id of an emails message in the
    default set) dead-lettered at 0:5 (the id of a reports letter in the default set)."""
    models = _models(MOVING, served)
    if "reports" in models.sets:
        model = models["reports"]
        model.add_record(lifecycle.to_record(MessageId(0, 3), b"reports", NOW - 20_000, {}, b"new"))
        dead = lifecycle.DeadLetter("reports", MessageId(0, 3), "late", NOW - 5_000)
        model.add_markers(0, 0, NOW - 15_000, encode(Marker(MarkerType.START, MessageId(0, 3), 30_000, b"reports",
                                                            b"new", delivery_count=1, instance_id="web-2:7")))
        model.add_markers(0, 1, NOW - 5_000, encode(Marker(MarkerType.END, MessageId(0, 3),
                                                           end_reason=EndReason.REJECTED, reason=dead.reason,
                                                           instance_id="web-2:7")))
        model.add_dead_letter(Letter(MessageId(0, 5), "reports", MessageId(0, 3), dead.reason, dead.timestamp_ms),
                              dead)
        model.refresh(NOW)
    app = create_app(MOVING, Settings(users=USERS), models, clock=lambda: NOW)
    return TestClient(app, follow_redirects=False)


def test_a_moving_queue_has_a_row_in_each_set_and_its_urls_name_the_set(monkeypatch: pytest.MonkeyPatch) -> None:
    from kmq.console import story

    told: list[tuple[str, Any]] = []
    monkeypatch.setattr(story, "read", lambda config, where, model, key: told.append((where.name, key)))
    with _moving() as client:
        _log_in(client, "bob")
        overview = client.get("/").text
        assert 'href="/queue?q=reports&amp;set=default"' in overview
        assert 'href="/queue?q=reports&amp;set=reports"' in overview
        # one id, two sets: the set names which message it is
        assert client.get("/message?q=reports&set=reports&id=0:3").status_code == 200
        assert told == [("reports", ("reports", MessageId(0, 3)))]
        assert client.get("/message?q=reports&set=default&id=0:3").status_code == 404  # emails' there
        assert client.get("/message?q=reports&id=0:3").status_code == 200  # without set: the queue's own set
        page = client.get("/queue?q=reports&set=default").text
        assert "in topic set default" in page and 'href="/queue?q=reports&amp;set=reports"' in page
        listed = client.get("/queue?q=reports&set=reports&state=dead_lettered").text
        assert 'href="/message?q=reports&amp;set=reports&amp;id=0%3A3"' in listed
        assert "not one this console serves" in client.get("/queue?q=reports&set=tenant-b").text
        letters = client.get("/dead-letters?q=reports").text
        assert "default/0:5" not in letters  # bob is a viewer: no redrive buttons, but both rows
        assert letters.count("<td>0:5</td>") == 2


def test_actions_write_to_every_served_set_a_queue_is_read_in(recorder: Recorder) -> None:
    with _moving() as client:
        _log_in(client, "alice")
        csrf = _csrf(client, "/")
        answer = client.post("/queue/pause", data={"q": "reports", "set": "reports", "csrf": csrf})
        assert answer.headers["location"] == "/queue?q=reports&set=reports"
        assert recorder.calls == [("pause", (["reports", "default"], "reports", None))]
        page = client.get("/dead-letters?q=reports").text
        assert 'value="default/0:5"' in page and 'value="reports/0:5"' in page
        recorder.calls.clear()
        assert client.post("/dead-letters/redrive", data={"one": "reports/0:5", "csrf": csrf}).status_code == 303
        assert recorder.calls == [("redrive", ("reports", "reports", [MessageId(0, 5)])),
                                  ("commit_redriven", ("reports", "reports", {0: 6}))]
        recorder.calls.clear()
        # letters of both sets at once, each named with its set (the recorder left the model as it was: both wait)
        confirm = client.post("/dead-letters/redrive", data={"mode": "selected", "ids": ["default/0:5", "reports/0:5"],
                                                             "csrf": csrf})
        assert "<strong>2</strong>" in confirm.text and recorder.calls == []
        client.post("/dead-letters/redrive", data={"mode": "selected", "ids": ["default/0:5", "reports/0:5"],
                                                   "expect": "2", "csrf": csrf})
        assert [call for call in recorder.calls if call[0] == "redrive"] == [
            ("redrive", ("default", "reports", [MessageId(0, 5)])),
            ("redrive", ("reports", "reports", [MessageId(0, 5)]))]


def test_a_console_of_one_set_writes_to_that_set_only_and_says_so(recorder: Recorder) -> None:
    with _moving(("reports",)) as client:
        _log_in(client, "alice")
        csrf = _csrf(client, "/")
        assert client.get("/queue?q=emails").status_code == 404  # the default set is not served
        page = client.get("/queue?q=reports").text
        assert "not to set(s) default" in page
        client.post("/queue/pause", data={"q": "reports", "csrf": csrf})
        assert recorder.calls == [("pause", (["reports"], "reports", None))]
        assert "Not in set(s) default" in client.get("/queue?q=reports").text
    with _moving(("default",)) as client:
        _log_in(client, "alice")
        csrf = _csrf(client, "/")
        recorder.calls.clear()
        refused = client.post("/dead-letters/redrive", data={"one": "default/0:5", "csrf": csrf})
        assert refused.status_code == 409 and "does not serve the set of &#39;reports&#39;" in refused.text
        client.post("/queue/resume", data={"q": "reports", "csrf": csrf})
        assert recorder.calls == [("resume", (["default"], "reports"))]  # the set it moves from: served
