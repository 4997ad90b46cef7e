"""The bench's ratio arithmetic and results writer (no broker)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.bench.results import Case, markdown, percentiles, ratio, write


def test_ratio_is_ours_over_the_baseline_and_none_without_one() -> None:
    assert ratio(50.0, 100.0) == 0.5
    assert ratio(123.0, 0.0) is None
    assert ratio(1.0, -1.0) is None


def test_percentiles_of_a_known_list() -> None:
    assert percentiles(list(map(float, range(1, 101)))) == {"p50": 50.5, "p95": 95.05, "p99": 99.01}
    assert percentiles([]) == {}
    assert percentiles([7.0]) == {"p50": 7.0, "p95": 7.0, "p99": 7.0}


def test_writer_emits_json_markdown_and_keeps_missing_numbers_missing(tmp_path: Path) -> None:
    cases = [
        Case("produce 256B", "msgs/s", 900.0, 1000.0, "raw produce", {"messages": 10}),
        Case("share groups", "msgs/s", 500.0, None, "ShareConsumer", {"messages": 10}, note="broker refused"),
    ]
    write(tmp_path, cases, {"quick": True})
    doc = json.loads((tmp_path / "results.json").read_text())
    assert [c["ratio"] for c in doc["cases"]] == [0.9, None]
    assert doc["quick"] is True and "python" in doc["machine"]
    table = (tmp_path / "results.md").read_text()
    assert "0.90x" in table and "broker refused" in table and "n/a" in table
    assert markdown(cases).count("\n") == 3
