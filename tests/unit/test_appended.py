"""A reader of an appended log sees only whole lines, wherever a writer's write was cut."""

from __future__ import annotations

import tempfile
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.appended import complete_lines

_LINES = st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs", "Zl", "Zp", "Cc")), min_size=1)
                  .filter(str.strip), max_size=8)


@given(_LINES, st.integers(min_value=0))
def test_a_file_read_mid_write_gives_the_lines_written_whole(lines: list[str], cut: int) -> None:
    data = "".join(line + "\n" for line in lines).encode()
    cut %= len(data) + 1
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "log"
        path.write_bytes(data[:cut])
        assert complete_lines(path) == lines[:data[:cut].count(b"\n")]


def test_a_missing_file_has_no_lines(tmp_path: Path) -> None:
    assert complete_lines(tmp_path / "absent") == []


def test_a_cut_json_line_is_left_for_the_next_read(tmp_path: Path) -> None:
    path = tmp_path / "runs"
    path.write_text('{"payload": "m-1"}\n{"payload": "m-967", "id": "5:156", "first": "5:156",')
    assert complete_lines(path) == ['{"payload": "m-1"}']
