"""`make kafka-up` / `make cluster-up` keep their state per checkout: a second checkout's `make kafka-down` stopped
the first one's broker when both used ~/.cache/kmq/run/broker.json."""

from __future__ import annotations

from pathlib import Path

from kmq.testing.broker import run_dir

ROOT = Path(__file__).resolve().parents[2]


def test_two_checkouts_keep_their_local_brokers_apart(tmp_path: Path) -> None:
    one, two = run_dir(tmp_path / "one" / "kmq"), run_dir(tmp_path / "two" / "kmq")
    assert one != two and one.name.startswith("kmq-") and two.name.startswith("kmq-")
    assert run_dir(tmp_path / "one" / "kmq") == one


def test_by_default_it_is_this_checkouts(tmp_path: Path) -> None:
    assert run_dir() == run_dir(ROOT)
