"""A stable client_id is held by one live process: a claim on the control topic, answered by a live holder."""

from __future__ import annotations

import json
import threading
import time

import pytest

from kmq.client.consumer.identity import ClientIdentity
from kmq.config import Config
from kmq.errors import ClientIdInUseError
from kmq.wire.control import ALIVE, CLAIM, ControlState, IdentityRecord
from tests.unit.fake_clients import FakeControl, FakeProducerClient


def _identity(instance: str, control: FakeControl, producer: FakeProducerClient) -> ClientIdentity:
    return ClientIdentity("dup-1", instance, producer, control, write_timeout_s=1.0, answer_wait_s=0.3)


def test_control_records_of_claims_and_answers_are_folded_with_their_offsets() -> None:
    state = ControlState()
    state.apply(b"claim/dup-1", json.dumps({"instance": "a:1"}).encode(), offset=4)
    state.apply(b"alive/dup-1", json.dumps({"instance": "a:1", "claim": 9}).encode(), offset=10)
    state.apply(b"claim/dup-2", b"not json", offset=11)
    assert state.claims == {"dup-1": IdentityRecord("a:1", 4)}
    assert state.alive == {"dup-1": IdentityRecord("a:1", 10, 9)}


def test_with_no_live_holder_the_claim_is_written_and_the_consumer_starts_after_the_wait() -> None:
    control, producer = FakeControl(available=True), FakeProducerClient()
    started = time.monotonic()
    _identity("b:2", control, producer).claim()
    assert 0.3 <= time.monotonic() - started < 2
    [claim] = producer.to("m.control")
    assert claim.key == (CLAIM + "dup-1").encode() and json.loads(claim.value) == {"instance": "b:2"}


def test_a_live_holders_answer_to_our_claim_refuses_the_consumer_naming_the_id_and_the_holder() -> None:
    control, producer = FakeControl(available=True), FakeProducerClient()

    def holder_answers() -> None:
        while not producer.records:
            time.sleep(0.01)
        control.state.apply(b"alive/dup-1", json.dumps({"instance": "a:1", "claim": 0}).encode(), offset=1)

    threading.Thread(target=holder_answers, daemon=True).start()
    with pytest.raises(ClientIdInUseError, match=r"client_id 'dup-1' is in use by a live consumer \(a:1\)"):
        _identity("b:2", control, producer).claim()


def test_the_holder_answers_a_later_claim_by_another_instance_once_and_never_its_own_or_an_earlier_one() -> None:
    control, producer = FakeControl(available=True), FakeProducerClient()
    holder = _identity("a:1", control, producer)
    holder.claim()  # its claim takes offset 0 of the (fake) control topic
    state = ControlState()
    for claim in (IdentityRecord("a:1", 0), IdentityRecord("z:9", -5)):
        state.claims["dup-1"] = claim
        holder.on_control(state)
    assert len(producer.to("m.control")) == 1, "no answer to its own claim, nor to one before it"
    state.claims["dup-1"] = IdentityRecord("b:2", 7)
    holder.on_control(state)
    holder.on_control(state)
    [answer] = producer.to("m.control")[1:]
    assert answer.key == (ALIVE + "dup-1").encode() and json.loads(answer.value) == {"instance": "a:1", "claim": 7}


def test_without_a_control_topic_the_id_is_not_guarded_and_nothing_is_written() -> None:
    control, producer = FakeControl(available=False), FakeProducerClient()
    _identity("b:2", control, producer).claim()
    assert producer.records == []


def test_a_client_id_template_takes_the_lowest_index_no_live_process_holds_and_keeps_it_for_other_queues() -> None:
    from kmq.client import process_id

    process_id._resolved.clear()
    held = {"w-0", "w-1"}
    tried: list[str] = []

    def open_consumer(config: Config) -> str:
        tried.append(config.client_id)
        if config.client_id in held:
            raise ClientIdInUseError(f"{config.client_id} is held")
        return config.client_id

    config = Config(bootstrap_servers="x:1", client_id="w-{process}")
    assert process_id.with_process_id(config, open_consumer) == "w-2"
    assert process_id.with_process_id(config, open_consumer) == "w-2"  # another queue: the same id, one try
    assert tried == ["w-0", "w-1", "w-2", "w-2"]
    assert process_id.with_process_id(config.replace(client_id="plain"), open_consumer) == "plain"
    process_id._resolved.clear()
