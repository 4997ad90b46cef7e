"""A redelivery tracker run in the bench process, with the two figures the tracker must keep: CPU seconds of its
loop thread, and its marker lag (how long after a marker reaches the log the tracker has read it)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from types import TracebackType

from confluent_kafka import Consumer, TopicPartition

from kmq import Config, tune_gc
from kmq.redelivery.tracker import RedeliveryTracker
from tests.bench.results import percentiles
from tests.markers_io import wait_for

SAMPLE_S = 0.02


class TrackerProbe:
    """``with TrackerProbe(config) as probe:`` runs a tracker; ``cpu_s()`` and ``lag_ms()`` measure it."""

    def __init__(self, config: Config) -> None:
        self.config = config
        self.tracker = RedeliveryTracker(config)
        self._thread = threading.Thread(target=self.tracker.run, name="bench-tracker", daemon=True)
        self._watermarks = Consumer({"bootstrap.servers": config.bootstrap_servers, "group.id": "bench-probe"})
        self._samples: list[tuple[float, dict[int, int], dict[int, int]]] = []
        self._sampling = threading.Event()
        self._sampler = threading.Thread(target=self._sample, name="bench-tracker-probe", daemon=True)

    def __enter__(self) -> TrackerProbe:
        # As a deployed tracker's process does once set up (this one holds pytest's heap besides, which full
        # collections would scan while the consumers measured beside it run).
        tune_gc()
        self._thread.start()
        def caught_up() -> bool:  # ``partitions`` is a fresh dict on each call (it was the live one): ask each time
            parts = self.tracker.partitions
            return bool(parts) and all(p.caught_up for p in parts.values())

        assert wait_for(caught_up, timeout_s=60)
        self._sampler.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self._sampling.set()
        self._sampler.join(10)
        self.tracker.stop()
        self._thread.join(60)
        self._watermarks.close()

    def cpu_s(self) -> float:
        """CPU seconds the tracker's loop thread has used (user + system)."""
        stat = Path(f"/proc/self/task/{self._thread.native_id}/stat").read_text()
        fields = stat.rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def _sample(self) -> None:
        while not self._sampling.wait(SAMPLE_S):
            parts = dict(self.tracker.partitions)
            highs = {p: self._watermarks.get_watermark_offsets(TopicPartition(self.config.marker_topic, p),
                                                              timeout=2, cached=False)[1] for p in parts}
            reads = {p: part.state.next_offset for p, part in parts.items()}
            self._samples.append((time.monotonic(), highs, reads))

    def lag_ms(self, since: float) -> dict[str, float]:
        """Percentiles of the marker lag over samples taken after ``since`` (time.monotonic())."""
        samples = [s for s in self._samples if s[0] >= since]
        lags = []
        for i, (t, highs, _) in enumerate(samples):
            for t_read, _, reads in samples[i:]:
                if all(reads.get(p, 0) >= high for p, high in highs.items()):
                    lags.append((t_read - t) * 1000)
                    break
        return percentiles(lags)
