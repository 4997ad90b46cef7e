"""audit.png: per queue, processing-time percentiles on a log axis, and messages acked per minute.

Left: one row per queue, p50 / p95 / p99 as three marks joined by the p50-p99 range, on a log axis (a queue a
thousand times slower than the rest does not flatten them). Right: acked per minute, every minute from the first to
the last of the run drawn, a minute without acks at 0 (a stall is a gap, not a line rising across it), as steps on a
symmetric log axis (0, then 1 to millions). Each queue has its own colour and line style (as many as there are
queues), named once in a legend below both panels.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC
from pathlib import Path
from typing import Any

from kmq.wire import datetime_from_ms

#: The marks of p50, p95 and p99 (named in the left panel's title).
PERCENTILES = ("o", "^", "s")
LINE_STYLES = ("-", "--", "-.", ":")


def draw(path: Path, queues: dict[str, dict[str, Any]], minutes: list[dict[str, Any]]) -> bool:
    """Writes the chart; False when matplotlib is missing (the chart is optional)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.dates as mdates
        import matplotlib.pyplot as plt
        from matplotlib.lines import Line2D
        from matplotlib.ticker import FuncFormatter, NullFormatter
    except ImportError:
        return False
    names = sorted(set(queues) | {m["queue"] for m in minutes})
    colours = _colours(len(names))
    style = {name: (colours[i], LINE_STYLES[i // 10 % len(LINE_STYLES)]) for i, name in enumerate(names)}
    fig, (left, right) = plt.subplots(1, 2, figsize=(14, 3.5 + 0.3 * len(names)), layout="constrained",
                                      gridspec_kw={"width_ratios": (1, 1.6)})

    timed = [(n, queues[n]["processing_ms_p50_p95_p99"]) for n in names
             if queues.get(n, {}).get("processing_ms_p50_p95_p99")
             and None not in queues[n]["processing_ms_p50_p95_p99"]]
    for row, (name, values) in enumerate(timed):
        colour = style[name][0]
        low = [max(v, 0.1) for v in values]  # a log axis has no 0: sub-0.1 ms is drawn at 0.1
        left.plot([low[0], low[2]], [row, row], color=colour, linewidth=2, alpha=0.5)
        for marker, value in zip(PERCENTILES, low, strict=True):
            left.plot([value], [row], marker=marker, color=colour, linestyle="none")
    left.set_yticks(range(len(timed)), [n for n, _ in timed], fontsize=8)
    left.set_ylim(len(timed) - 0.5, -0.5)
    left.set_xscale("log")
    plain = FuncFormatter(lambda value, _pos: f"{value:,.0f}" if value >= 1 else f"{value:g}")
    left.xaxis.set_major_formatter(plain)
    low_ms = min((max(v[0], 0.1) for _, v in timed), default=1.0)
    high_ms = max((v[2] for _, v in timed), default=1.0)
    # Less than two decades: the 2, 3, 5 … between the powers of ten are named too, else nothing would be.
    left.xaxis.set_minor_formatter(plain if high_ms < 100 * low_ms else NullFormatter())
    left.tick_params(axis="x", which="minor", labelsize=7)
    left.set_title("processing time (ms, log scale): ● p50  ▲ p95  ■ p99")
    left.grid(axis="x", which="both", alpha=0.3)

    acked = {(m["queue"], int(m["minute"])): int(m["count"]) for m in minutes}
    if acked:
        first, last = min(m for _, m in acked), max(m for _, m in acked)
        span = range(first, last + 1)
        when = [datetime_from_ms(m * 60_000) for m in (*span, last + 1)]  # the last minute's step has a width
        for name in names:
            if any(q == name for q, _ in acked):
                colour, dashes = style[name]
                counts = [acked.get((name, m), 0) for m in span]
                right.step(when, [*counts, counts[-1]], where="post", color=colour, linestyle=dashes,
                           linewidth=1.2)
    right.set_yscale("symlog", linthresh=1)
    right.set_ylim(bottom=0)
    right.yaxis.set_major_formatter(plain)
    right.set_title("messages acked per minute (UTC, log scale; a minute without acks at 0)")
    right.grid(alpha=0.3)
    locator = mdates.AutoDateLocator()  # type: ignore[no-untyped-call]
    right.xaxis.set_major_locator(locator)
    right.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]

    if names:
        handles = [Line2D([], [], color=style[n][0], linestyle=style[n][1], label=n)  # type: ignore[arg-type]
                   for n in names]
        fig.legend(handles=handles, loc="outside lower center", ncols=min(len(names), 6), fontsize=8,
                   title="queues", title_fontsize=8)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _colours(count: int) -> Sequence[Any]:
    """``count`` colours a reader can tell apart: the 10 of tab10, then 20 of tab20, then a continuous map's."""
    import matplotlib

    if count <= 10:
        return list(matplotlib.colormaps["tab10"].colors)[:count]  # type: ignore[attr-defined]
    if count <= 20:  # its 10 dark shades first: two queues side by side are not one hue, dark and light
        pairs = list(matplotlib.colormaps["tab20"].colors)  # type: ignore[attr-defined]
        return (pairs[0::2] + pairs[1::2])[:count]
    cmap = matplotlib.colormaps["turbo"]
    return [cmap(i / (count - 1)) for i in range(count)]
