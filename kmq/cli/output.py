"""How commands print: tables, counts, table cells, progress of long replays."""

from __future__ import annotations

import sys
import time


def plural(count: int, noun: str) -> str:
    """``1 message``, ``2 messages``."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def format_table(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True)),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in rows]
    return "\n".join(line.rstrip() for line in lines)


def printable(text: str, width: int) -> str:
    """One table cell: control characters (newlines, tabs) escaped, cut to ``width``."""
    shown = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return shown if len(shown) <= width else shown[:width - 1] + "…"


_last_progress = [0.0]


def progress(topic: str, done: int, total: int) -> None:
    """Long replays say how far they are: on a terminal every second, in a log every 10 s."""
    if sys.stderr.isatty():
        print(f"\rreading {topic}: {done:,}/{total:,} ({done / max(total, 1):.0%})", end="", file=sys.stderr)
    elif time.monotonic() - _last_progress[0] >= 10:
        _last_progress[0] = time.monotonic()
        print(f"reading {topic}: {done:,}/{total:,} records ({done / max(total, 1):.0%})", file=sys.stderr)


def clear_progress() -> None:
    if sys.stderr.isatty():
        print("\r\033[K", end="", file=sys.stderr)
