"""The call owners' contract, one suite for both implementations: this process's own
table (the embedded default) and a real redis-server shared by every gateway."""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator

import pytest

from app.call_owners import CallOwners, Holder, LocalCallOwners, RedisCallOwners
from app.metrics import Metrics
from app.redis_ledger import redis_client

# The fixture is async on the session loop: the tests run on it too.
pytestmark = [pytest.mark.timeout(30), pytest.mark.asyncio(loop_scope="session")]

HERE = "http://10.0.0.5:8080"


@pytest.fixture(params=["local", "redis"])
async def owners(request: pytest.FixtureRequest) -> AsyncIterator[CallOwners]:
    if request.param == "local":
        yield LocalCallOwners(HERE)
        return
    url = request.getfixturevalue("redis_url")
    shared = RedisCallOwners(
        redis_client(url), gateway=HERE, metrics=Metrics(), prefix=f"t{secrets.token_hex(4)}:"
    )
    yield shared
    await shared.aclose()


def new_call_sid() -> str:
    return "CA" + secrets.token_hex(16)


async def test_nobody_holds_a_call_never_streamed(owners: CallOwners) -> None:
    assert await owners.holder(new_call_sid()) is None


async def test_a_live_call_is_held_by_this_gateway(owners: CallOwners) -> None:
    sid = new_call_sid()
    await owners.hold(sid)
    assert await owners.holder(sid) == Holder(HERE, live=True)


@pytest.mark.parametrize("resumable", [True, False])
async def test_an_ended_call_says_whether_it_may_be_resumed(
    owners: CallOwners, resumable: bool
) -> None:
    sid = new_call_sid()
    await owners.hold(sid)
    await owners.release(sid, resumable=resumable)
    assert await owners.holder(sid) == Holder(HERE, live=False, resumable=resumable)


async def test_early_reports_are_taken_once_in_order(owners: CallOwners) -> None:
    sid = new_call_sid()
    assert await owners.keep_early(sid, {"kind": "status", "status": "ringing", "at": 1.0})
    assert await owners.keep_early(sid, {"kind": "amd", "answered_by": "human"})
    taken = await owners.take_early(sid)
    assert [r["kind"] for r in taken] == ["status", "amd"]
    assert await owners.take_early(sid) == []


async def test_a_redis_that_is_down_answers_unknown_and_is_counted() -> None:
    metrics = Metrics()
    owners = RedisCallOwners(
        redis_client("redis://127.0.0.1:1/0"), gateway=HERE, metrics=metrics, prefix="down:"
    )
    sid = new_call_sid()
    await owners.hold(sid)  # never raises
    assert await owners.holder(sid) == Holder(HERE, live=True)  # its own calls, known here
    assert await owners.holder(new_call_sid()) is None
    assert not await owners.keep_early(sid, {"kind": "amd"})
    assert await owners.take_early(sid) == []
    failures = metrics.redis_errors.labels(op="owner_lookup")._value.get()
    assert failures >= 1
    await owners.aclose()
