"""Call admission: slots reserved at the webhook, one stream per CallSid, pending sockets."""

from app.admission import Admission


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admission(clock: Clock, max_calls: int = 2) -> Admission:
    return Admission(max_calls, window_s=60.0, reserve_s=15.0, max_pending=3, clock=clock)


def test_a_webhook_reserves_a_slot_its_stream_then_takes() -> None:
    clock = Clock()
    slots = admission(clock, max_calls=1)

    assert slots.reserve("CA1")
    assert not slots.reserve("CA2"), "the one slot is held for CA1's stream"
    assert not slots.admit("CA3"), "a stream without a reservation finds no free slot"
    assert slots.admit("CA1")
    assert slots.active == 1 and slots.reserved == 0


def test_a_replayed_webhook_keeps_its_one_reservation() -> None:
    slots = admission(Clock(), max_calls=2)

    assert all(slots.reserve("CA1") for _ in range(10))
    assert slots.reserved == 1
    assert slots.reserve("CA2")


def test_a_reservation_whose_stream_never_came_expires() -> None:
    clock = Clock()
    slots = admission(clock, max_calls=1)
    slots.reserve("CA1")

    clock.now += 15.1
    assert slots.reserve("CA2")


def test_each_call_sid_starts_one_stream_within_the_token_window() -> None:
    clock = Clock()
    slots = admission(clock)

    assert slots.claim_stream("CA1")
    assert not slots.claim_stream("CA1")
    clock.now += 61  # its token has expired by now: the CallSid is forgotten
    assert slots.claim_stream("CA1")


def test_released_slots_are_free_again_and_reported() -> None:
    seen: list[int] = []
    slots = Admission(1, window_s=60, reserve_s=15, max_pending=3, on_change=seen.append)

    assert slots.admit("CA1")
    assert not slots.admit("CA2")
    slots.release()
    assert slots.admit("CA2")
    assert seen == [1, 0, 1]


def test_pending_sockets_are_limited() -> None:
    slots = admission(Clock())

    assert [slots.open_pending() for _ in range(4)] == [True, True, True, False]
    slots.close_pending()
    assert slots.open_pending()
