"""Figure 3: the mapper's encode + decode round trip against msgspec's own typed round trip.

Ours: `EventMapper.to_stored_event` then `to_domain_event` (a `StoredEvent` in between, the
size check, the topic, and a decoder over the tagged union of every event type). The
baseline: `msgspec.json.encode` then a `msgspec.json.Decoder` of the event's own class,
built beforehand: the least work a typed JSON round trip of the same event can do.
"""

from __future__ import annotations

import msgspec

from benchmarks import workload
from benchmarks.common import Figure, Sizes, interleave
from convstore.domain import Event
from convstore.storage.mapper import EventMapper


def events(responses: int) -> list[Event]:
    """Recorded events of `responses` responses (ten each, after a Started event)."""
    conversation = workload.conversation(workload.conversation_id(6))
    source = workload.responses(seed=6)
    for _ in range(responses):
        conversation.record_all(next(source))
    return conversation.collect_events()


def mapper_figures(sizes: Sizes) -> list[Figure]:
    """Figure 3."""
    sample = events(sizes.mapper_responses)
    mapper = EventMapper()
    decoders = {cls: msgspec.json.Decoder(cls) for cls in {type(e) for e in sample}}
    encode = msgspec.json.encode

    def ours() -> None:
        to_stored, to_domain = mapper.to_stored_event, mapper.to_domain_event
        for event in sample:
            to_domain(to_stored(event))

    def baseline() -> None:
        for event in sample:
            decoders[type(event)].decode(encode(event))

    for event in sample:  # the same event comes back, both ways
        assert mapper.to_domain_event(mapper.to_stored_event(event)) == event
        assert decoders[type(event)].decode(encode(event)) == event
    timings = interleave(
        {"ours": ours, "msgspec": baseline},
        rounds=sizes.mapper_rounds,
        warmup=sizes.warmup,
        number=5,
    )
    n = len(sample)
    mean = sum(len(encode(e)) for e in sample) / n
    return [
        Figure(
            "3",
            "mapper encode + decode round trip",
            "EventMapper.to_stored_event + to_domain_event",
            "msgspec.json.encode + msgspec.json.Decoder(type(event)).decode",
            "throughput",
            timings.median("ours") / n,
            timings.median("msgspec") / n,
            ratio=timings.throughput_ratio("ours", "msgspec"),
            target=(">=", 0.8),
            note=f"per event; {n} events of {len(decoders)} types, {mean:.0f} B each on average; "
            f"median of {sizes.mapper_rounds} interleaved rounds",
            extra={"timings": timings.summary(), "events": n},
        ).judge()
    ]
