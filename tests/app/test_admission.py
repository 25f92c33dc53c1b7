"""Call admission: slots reserved at the webhook, one stream per CallSid, pending sockets,
and what a replayed webhook can (not) do. The CallSid ledger's own contract, in process
and on Redis: test_admission_ledger.py."""

from app.admission import Admission, Reservation
from app.call_ledger import LocalCallLedger

GRANTED, BUSY, REPEATED = Reservation.GRANTED, Reservation.BUSY, Reservation.REPEATED


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def admission(clock: Clock, max_calls: int = 2) -> Admission:
    return Admission(max_calls, reserve_s=15.0, max_pending=3, clock=clock, hold_s=5.0)


async def test_a_webhook_reserves_a_slot_its_stream_then_takes() -> None:
    clock = Clock()
    slots = admission(clock, max_calls=1)

    assert await slots.reserve("CA1") is GRANTED
    assert await slots.reserve("CA2") is BUSY, "the one slot is held for CA1's stream"
    assert not slots.admit("CA3"), "a stream without a reservation finds no free slot"
    assert slots.admit("CA1")
    assert slots.active == 1 and slots.reserved == 0


async def test_a_repeated_webhook_keeps_its_one_reservation_and_never_renews_it() -> None:
    clock = Clock()
    slots = admission(clock, max_calls=1)

    assert await slots.reserve("CA1") is GRANTED
    for _ in range(10):
        clock.now += 1
        assert await slots.reserve("CA1") is GRANTED  # Twilio's duplicate: the same one
    clock.now += 5.1  # 15.1 s after the first: lapsed, whatever came since
    assert slots.reserved == 0
    assert await slots.reserve("CA1") is REPEATED, "a lapsed reservation is not made again"
    assert await slots.reserve("CA2") is GRANTED


async def test_a_call_sid_that_streamed_is_never_reserved_again() -> None:
    clock = Clock()
    slots = admission(clock)
    await slots.reserve("CA1")
    assert await slots.claim_stream("CA1") and slots.admit("CA1")

    assert await slots.reserve("CA1") is REPEATED  # while it lives
    clock.now += 3600
    assert await slots.reserve("CA1") is REPEATED  # an hour into the call
    slots.release("CA1")
    clock.now += 3600
    assert await slots.reserve("CA1") is REPEATED  # an hour after it ended
    assert slots.active == 0


async def test_each_call_sid_starts_one_stream_for_as_long_as_its_call_lives() -> None:
    clock = Clock()
    slots = admission(clock)

    assert await slots.claim_stream("CA1") and slots.admit("CA1")
    clock.now += 8 * 3600  # longer than the memory of ended calls: live calls stay
    assert not await slots.claim_stream("CA1")
    slots.release("CA1")
    clock.now += 5 * 3600
    assert not await slots.claim_stream("CA1")
    clock.now += 3600 + 1  # REMEMBER_S after its end: forgotten at last
    assert await slots.claim_stream("CA1")


async def test_replayed_reservations_stop_holding_slots_after_a_few_seconds() -> None:
    # After a restart the server has forgotten every CallSid: four captured webhooks
    # replayed at once take the four reservations, but hold slots only hold_s.
    clock = Clock()
    slots = admission(clock, max_calls=4)
    assert [await slots.reserve(f"CAold{i}") for i in range(4)] == [GRANTED] * 4
    assert await slots.reserve("CAreal") is BUSY, "capped: reservations never exceed max_calls"
    clock.now += 5.1
    assert slots.reserved == 4  # still valid for a slow stream...
    assert slots.admit("CAreal"), "...but they keep no genuine caller's stream out"
    assert slots.active == 1


async def test_a_stale_reservation_whose_stream_comes_late_needs_a_free_slot() -> None:
    clock = Clock()
    slots = admission(clock, max_calls=1)
    await slots.reserve("CA1")
    clock.now += 6
    assert slots.admit("CA2")
    assert not slots.admit("CA1"), "its hold is over and the slot is taken"


async def test_remembered_call_sids_are_bounded() -> None:
    clock = Clock()
    slots = Admission(1, reserve_s=15, max_pending=1, clock=clock, max_remembered=3)
    for i in range(5):
        assert await slots.claim_stream(f"CA{i}")
    assert await slots.reserve("CA4") is REPEATED
    assert await slots.reserve("CA0") is GRANTED, "the oldest were forgotten"


def test_released_slots_are_free_again_and_reported() -> None:
    seen: list[int] = []
    slots = Admission(1, reserve_s=15, max_pending=3, on_change=seen.append)

    assert slots.admit("CA1")
    assert not slots.admit("CA2")
    slots.release("CA1")
    assert slots.admit("CA2")
    assert seen == [1, 0, 1]


def test_pending_sockets_are_limited() -> None:
    slots = admission(Clock())

    assert [slots.open_pending() for _ in range(4)] == [True, True, True, False]
    slots.close_pending()
    assert slots.open_pending()


async def test_a_full_line_still_tells_a_replay_from_a_new_caller() -> None:
    clock = Clock()
    slots = admission(clock, max_calls=1)
    assert await slots.claim_stream("CA1") and slots.admit("CA1")

    assert await slots.reserve("CA1") is REPEATED, "counted as a replay, not as busy"
    assert await slots.reserve("CA2") is BUSY
    slots.release("CA1")
    assert await slots.reserve("CA2") is GRANTED, "a busy line remembered nothing of it"


def gateway(clock: Clock, ledger: LocalCallLedger, max_calls: int = 1) -> Admission:
    return Admission(
        max_calls, reserve_s=15.0, max_pending=3, clock=clock, hold_s=5.0, ledger=ledger
    )


async def test_gateways_sharing_a_ledger_count_their_own_slots() -> None:
    clock = Clock()
    shared = LocalCallLedger(15.0, clock=clock)
    a, b = gateway(clock, shared), gateway(clock, shared)

    assert await a.reserve("CA1") is GRANTED
    assert await b.reserve("CA2") is GRANTED, "A's reservation holds no slot on B"
    assert a.admit("CA1") and b.admit("CA2")
    assert (a.active, b.active) == (1, 1)


async def test_a_duplicate_webhook_on_another_gateway_shares_the_first_reservation() -> None:
    clock = Clock()
    shared = LocalCallLedger(15.0, clock=clock)
    a, b = gateway(clock, shared), gateway(clock, shared)

    assert await a.reserve("CA1") is GRANTED
    assert await b.reserve("CA1") is GRANTED, "Twilio's duplicate, delivered to B"
    assert b.reserved == 0, "it holds no second slot"
    assert await b.claim_stream("CA1")
    assert not await a.claim_stream("CA1"), "its token starts one stream, on either"
    b.admit("CA1")
    assert await a.reserve("CA1") is REPEATED, "a webhook for a call live on B"
    clock.now += 15.1
    assert await b.reserve("CA1") is REPEATED
