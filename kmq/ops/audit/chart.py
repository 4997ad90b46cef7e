"""audit.png: processing-time percentiles per queue, and messages acked per minute on a readable time axis."""

from __future__ import annotations

from datetime import UTC
from pathlib import Path
from typing import Any

from kmq.wire import datetime_from_ms


def draw(path: Path, queues: dict[str, dict[str, Any]], minutes: list[dict[str, Any]]) -> bool:
    """Writes the chart; False when matplotlib is missing (the chart is optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for name, data in sorted(queues.items()):
        values = data.get("processing_ms_p50_p95_p99") or []
        if values and None not in values:
            left.plot(["p50", "p95", "p99"], values, marker="o", label=name)
        points = [m for m in minutes if m["queue"] == name]
        if points:
            when = [datetime_from_ms(m["minute"] * 60_000) for m in points]
            right.plot(when, [m["count"] for m in points], marker=".", linewidth=1, label=name)
    left.set_title("processing time (ms)")
    right.set_title("messages acked per minute (UTC)")
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    right.xaxis.set_major_locator(locator)
    right.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    for axes in (left, right):
        if axes.get_legend_handles_labels()[0]:  # nothing measured: no line to name
            axes.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return True
