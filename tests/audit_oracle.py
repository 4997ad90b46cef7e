"""The audit checked against what the handlers themselves noted: for fault tests (a worker killed mid-run, a broker
outage …) whose handlers append one JSON line per run (tests.handlers._note: ``first_message_id``, and ``queue``
when several queues share the log).

    result = run(config, AuditOptions(out_dir=out, now_ms=…), spark)
    check = compare_with_handler_log(out, runs_file, "jobs", sent=ids)
    assert check.agrees(), check.explain()

What must hold, message by message (the audit's per-message lifecycle.parquet against the log):
- a message no handler ran is ``lost`` in the audit exactly when it is nowhere a consumer would find it (not
  waiting, in flight, delayed, nor settled without a handler: expired, purged);
- the audit never counts fewer deliveries than the handler ran (``delivered`` >= runs), and more only by deliveries
  a tracker took back from a silent worker (``recovered``: that worker may have died before its handler started);
- so ``delivered_more_than_once`` equals the log's "ran more than once" whenever no worker died holding a message
  it had not started (a SIGTERM gives those back: ``returned``, not delivered) — the ``exact`` check.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import pyarrow.parquet as pq

from kmq.ops.audit.decoding import mid_of
from kmq.wire import MessageId
from kmq.wire import vocabulary as v

#: States in which a message no handler ran is where it should be.
NOT_RUN_YET = frozenset({v.WAITING, v.IN_FLIGHT, v.DELAYED, v.EXPIRED, v.PURGED})


@dataclass
class HandlerLogComparison:
    queue: str
    audit_lost: int = 0
    log_lost: int = 0
    audit_more_than_once: int = 0
    log_more_than_once: int = 0
    audit_acked_more_than_once: int = 0
    #: Deliveries the audit counts beyond the handler's runs, each explained by a tracker's recovery.
    unstarted_recovered: int = 0
    problems: list[str] = field(default_factory=list)

    def agrees(self, exact: bool = True) -> bool:
        """No message breaks the rules above; with ``exact``, the duplicate figures are equal too."""
        equal = self.audit_lost == self.log_lost and (
            not exact or self.audit_more_than_once == self.log_more_than_once)
        return equal and not self.problems

    def explain(self) -> str:
        return (f"queue {self.queue}: lost audit {self.audit_lost} / log {self.log_lost}; ran more than once audit "
                f"{self.audit_more_than_once} / log {self.log_more_than_once}; deliveries no handler ran, taken "
                f"back by a tracker: {self.unstarted_recovered}; problems: {self.problems[:10]}")


def handler_runs(log: Path, queue: str | None = None) -> Counter[MessageId]:
    """Runs per first message id noted in ``log`` (JSON lines), for ``queue`` if lines name theirs."""
    runs: Counter[MessageId] = Counter()
    if log.exists():
        for line in log.read_text().splitlines():
            run = json.loads(line)
            if queue is None or run.get("queue", queue) == queue:
                runs[MessageId.parse(str(run["first_message_id"]))] += 1
    return runs


def compare_with_handler_log(audit_out: Path, log: Path, queue: str,
                             sent: Iterable[MessageId] | None = None) -> HandlerLogComparison:
    """The audit written to ``audit_out`` against the handler log, for one queue (``sent``: the first ids the test
    sent; default: every message the audit saw produced)."""
    rows = [r for r in pq.read_table(audit_out / "lifecycle.parquet").to_pylist()
            if r["queue"] == queue and r["scope"] == "in"]
    by_id = {mid_of(r["first_id"]): r for r in rows}
    runs = handler_runs(log, queue)
    wanted = set(sent) if sent is not None else {m for m, r in by_id.items() if r[v.PRODUCED]}
    out = HandlerLogComparison(queue)
    for first_id in sorted(wanted | set(runs)):
        row = by_id.get(first_id)
        ran = runs[first_id]
        if row is None:
            out.problems.append(f"{first_id}: ran {ran} time(s), unknown to the audit")
            out.log_lost += ran == 0
            continue
        state, delivered, recovered = row["state"], row[v.DELIVERED], row[v.RECOVERED]
        out.audit_lost += state in v.LOST_STATES
        out.log_lost += ran == 0 and state not in NOT_RUN_YET
        out.audit_more_than_once += delivered > 1
        out.log_more_than_once += ran > 1
        out.audit_acked_more_than_once += row["acks"] > 1
        if delivered < ran:
            out.problems.append(f"{first_id}: ran {ran} time(s), the audit counts {delivered} deliveries")
        elif delivered > ran + recovered:
            out.problems.append(f"{first_id}: the audit counts {delivered} deliveries, the handler ran {ran}, "
                                f"and only {recovered} were taken back from a silent worker")
        else:
            out.unstarted_recovered += delivered - ran
    return out

