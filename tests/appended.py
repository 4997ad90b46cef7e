"""Reading the logs that handler and producer processes append to while a test polls them."""

from __future__ import annotations

from pathlib import Path


def complete_lines(path: Path) -> list[str]:
    """The file's non-blank lines, without a last one still being written (empty if there is no file yet).

    One ``write`` per line keeps writers from interleaving, but a reader can still see the first part of a line:
    the kernel copies a write into the page cache a page at a time and lengthens the file after each page.
    """
    if not path.exists():
        return []
    data = path.read_bytes()  # bytes first: the cut can fall inside a character
    return [line for line in data[:data.rfind(b"\n") + 1].decode().splitlines() if line.strip()]
