"""The handler tenant A's worker runs in tests/secure: "retry-*" fails its first run (A's tracker brings it back),
"reject-*" is rejected on its first run (a dead letter, redriven by the test); every success is a line in
``$SECURE_TEST_DIR/done``."""

from __future__ import annotations

import os
from pathlib import Path

from kmq import Message, Reject
from tests.helpers import first_time


def handle(msg: Message) -> None:
    folder = Path(os.environ["SECURE_TEST_DIR"])
    text = msg.payload.decode()
    if text.startswith(("retry-", "reject-")) and first_time(folder / text):
        if text.startswith("retry-"):
            raise RuntimeError(f"{text} fails its first run")
        raise Reject(f"{text} is rejected once")
    with open(folder / "done", "a") as done:
        done.write(f"{text}\n")

