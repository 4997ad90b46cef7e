"""``kmq-console``'s command line: the password hash it prints, and one-line errors for settings that are wrong."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from argon2 import PasswordHasher

from kmq.console import command
from kmq.console.settings import Settings, token_sha256


@pytest.fixture(autouse=True)
def _logs_untouched(monkeypatch: pytest.MonkeyPatch) -> None:
    """main() sets structlog up on the stderr of the moment (pytest's capture, closed after the test): later tests
    of the same process would log to a closed file."""
    monkeypatch.setattr("kmq.logs.configure", lambda *args, **kwargs: None)


def test_hash_password_prints_an_argon2_hash_of_what_it_reads(monkeypatch: pytest.MonkeyPatch,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("a long enough password\n"))
    assert command.main(["--hash-password"]) == 0
    printed = capsys.readouterr().out.strip()
    assert printed.startswith("$argon2") and PasswordHasher().verify(printed, "a long enough password")


def test_a_short_password_is_refused(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO("short\n"))
    assert command.main(["--hash-password"]) == command.EXIT_ERROR
    assert "too easy to guess" in capsys.readouterr().err


def test_listening_everywhere_without_logins_is_one_line_and_exit_1(monkeypatch: pytest.MonkeyPatch,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    assert command.main(["--host", "0.0.0.0"]) == command.EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--anonymous-viewers" in err


def test_the_console_s_variables_are_not_taken_for_kmq_settings(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("KMQ_CONSOLE_HOST", "0.0.0.0")  # read as the console's (and refused as above), not kmq's
    assert command.main([]) == command.EXIT_ERROR
    assert "--anonymous-viewers" in capsys.readouterr().err


def test_kmq_console_serves_with_the_console_s_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from kmq.cli import main

    served: list[Settings] = []
    monkeypatch.setattr(command, "serve", lambda config, settings, sets: served.append(settings))
    monkeypatch.setenv("KMQ_BOOTSTRAP_SERVERS", "127.0.0.1:1")
    monkeypatch.setenv("KMQ_CONSOLE_OPERATOR_TOKEN", "a-token")  # the console's: no unknown-variable error
    assert main(["console", "--port", "18099", "--refresh", "2"]) == 0
    (settings,) = served
    assert (settings.host, settings.port, settings.refresh_s) == ("127.0.0.1", 18099, 2.0)
    assert settings.users["operator"].token_sha256 == token_sha256("a-token")


def test_the_console_serves_the_sets_it_is_told_else_every_set(monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    from kmq.cli import main

    config = tmp_path / "kmq.yaml"
    config.write_text("bootstrap_servers: 127.0.0.1:1\ntopic_sets: {tenant-a: {}, tenant-b: {}}\n"
                      "routes: [{queues: 'a.*', set: tenant-a}, {queues: 'b.*', set: tenant-b}]\n")
    served: list[list[str]] = []
    monkeypatch.setattr(command, "serve", lambda config, settings, sets: served.append([s.name for s in sets]))
    assert main(["console", "--config", str(config)]) == 0
    assert main(["console", "--config", str(config), "--set", "tenant-b", "--set", "tenant-a", "--set",
                 "tenant-b"]) == 0
    assert served == [["default", "tenant-a", "tenant-b"], ["tenant-b", "tenant-a"]]
    assert command.main(["--config", str(config), "--set", "tenant-c"]) == command.EXIT_ERROR
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'tenant-c' is not configured" in err and "tenant-a" in err
