"""librdkafka's lines through structlog: parsed, demoted to diagnostics, one per facility and client per 30 s."""

from __future__ import annotations

import logging

from structlog.testing import capture_logs

from kmq.logs import LIBRDKAFKA_REPEAT_S, LibrdkafkaLines


def _record(line: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord("kmq.librdkafka", level, __file__, 1, line, None, None)


REFUSED = ("FAIL [rdkafka#producer-1] [thrd:127.0.0.1:1/bootstrap]: 127.0.0.1:1/bootstrap: Connect to "
           "ipv4#127.0.0.1:1 failed: Connection refused")


def test_repeats_are_held_back_and_counted_then_reported_with_the_next_line() -> None:
    now = [0.0]
    handler = LibrdkafkaLines(lambda: now[0])
    with capture_logs() as logs:
        for _ in range(20):
            handler.emit(_record(REFUSED))
        now[0] = LIBRDKAFKA_REPEAT_S
        handler.emit(_record(REFUSED))
    assert len(logs) == 2
    first, second = logs
    assert (first["event"], first["facility"], first["client"], first["rdkafka_level"], first["log_level"]) == (
        "librdkafka", "FAIL", "rdkafka#producer-1", "error", "info")
    assert first["message"].endswith("Connection refused") and "repeated" not in first
    assert second["repeated"] == 19


def test_noise_facilities_are_debug_and_critical_lines_stay_errors() -> None:
    handler = LibrdkafkaLines(lambda: 0.0)
    with capture_logs() as logs:
        handler.emit(_record("BGQUEUE [rdkafka#producer-2] [thrd:app]: Purging 1 unserved events", logging.WARNING))
        handler.emit(_record("FATAL [rdkafka#consumer-3] [thrd:main]: fenced", logging.CRITICAL))
    assert [(e["facility"], e["log_level"]) for e in logs] == [("BGQUEUE", "debug"), ("FATAL", "error")]


def test_a_library_user_who_configures_nothing_gets_kmq_logs_on_stderr_never_stdout() -> None:
    import subprocess
    import sys

    code = "import kmq\nfrom kmq.client.producer import log\nlog.warning('kmq_says', where='stderr')\n"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stdout == ""
    assert "kmq_says" in result.stderr and "where=stderr" in result.stderr


def test_at_debug_level_every_librdkafka_line_comes_through_its_debug_lines_too() -> None:
    import subprocess
    import sys

    code = ("import logging\nfrom kmq import logs\nlogs.configure('debug')\nlogger = logs.librdkafka_logger()\n"
            "for _ in range(3):\n"
            "    logger.debug('CGRPSTATE [rdkafka#consumer-1] [thrd:main]: Group \"g\" changed join state')\n")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert result.stderr.count("changed join state") == 3, result.stderr
