"""Bench results: ratios from two same-run measurements, percentiles, and the JSON / markdown / PNG writer."""

from __future__ import annotations

import json
import os
import platform
import statistics
from dataclasses import asdict, dataclass, field
from pathlib import Path


def ratio(ours: float, baseline: float) -> float | None:
    """ours / baseline, or None when the baseline is missing or zero (never a made-up number)."""
    if not baseline or baseline <= 0 or ours is None:
        return None
    return round(ours / baseline, 3)


def percentiles(values: list[float], points: tuple[int, ...] = (50, 95, 99)) -> dict[str, float]:
    if not values:
        return {}
    if len(values) == 1:
        return {f"p{p}": values[0] for p in points}
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {f"p{p}": round(cuts[p - 1], 3) for p in points}


@dataclass
class Case:
    """One comparison: what was measured for kmq and for its baseline, in the same run, on the same broker."""

    name: str
    unit: str
    ours: float | None
    baseline: float | None
    baseline_name: str
    setup: dict[str, object]
    extra: dict[str, object] = field(default_factory=dict)
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return ratio(self.ours or 0.0, self.baseline or 0.0)


def machine() -> dict[str, object]:
    import confluent_kafka

    return {"python": platform.python_version(), "platform": platform.platform(), "cpus": os.cpu_count(),
            "confluent_kafka": confluent_kafka.version()[0], "librdkafka": confluent_kafka.libversion()[0]}


def markdown(cases: list[Case]) -> str:
    lines = ["| case | kmq | baseline | ratio | setup |", "|---|---|---|---|---|"]
    for c in cases:
        ours = "n/a" if c.ours is None else f"{c.ours:,.1f} {c.unit}"
        base = "n/a" if c.baseline is None else f"{c.baseline:,.1f} {c.unit} ({c.baseline_name})"
        r = "n/a" if c.ratio is None else f"{c.ratio:.2f}x"
        setup = ", ".join(f"{k}={v}" for k, v in c.setup.items())
        lines.append(f"| {c.name} | {ours} | {base} | {r} | {setup}{'; ' + c.note if c.note else ''} |")
    return "\n".join(lines)


def write(out_dir: Path, cases: list[Case], info: dict[str, object]) -> Path:
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = {"machine": machine(), **info, "cases": [{**asdict(c), "ratio": c.ratio} for c in cases]}
    (out_dir / "results.json").write_text(json.dumps(doc, indent=2, default=str))
    (out_dir / "results.md").write_text(markdown(cases) + "\n")
    _plot(out_dir, cases)
    return out_dir


def _plot(out_dir: Path, cases: list[Case]) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    rates = [c for c in cases if c.unit == "msgs/s" and c.ours is not None]
    if rates:
        fig, ax = plt.subplots(figsize=(10, 0.5 * len(rates) + 1.5))
        names = [c.name for c in rates]
        ax.barh([i + 0.2 for i in range(len(rates))], [c.ours or 0 for c in rates], 0.4, label="kmq")
        ax.barh([i - 0.2 for i in range(len(rates))], [c.baseline or 0 for c in rates], 0.4, label="baseline")
        ax.set_yticks(range(len(rates)), names)
        ax.set_xlabel("msgs/s")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out_dir / "throughput.png")
        plt.close(fig)
    lat = [c for c in cases if c.unit == "ms" and c.extra.get("ours_percentiles")]
    if lat:
        fig, ax = plt.subplots(figsize=(8, 4))
        for c in lat:
            for label, key in (("kmq", "ours_percentiles"), (c.baseline_name, "baseline_percentiles")):
                pcts = c.extra.get(key) or {}
                if isinstance(pcts, dict) and pcts:
                    ax.plot(list(pcts), list(pcts.values()), marker="o", label=f"{c.name}: {label}")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out_dir / "latency.png")
        plt.close(fig)
