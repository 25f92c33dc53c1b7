"""One contract for every place that holds records: the local folder (RecordStore) and
the S3-compatible store (S3RecordStore, on a real SeaweedFS). `offhook calls` reads
either, so both must answer alike."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from recordings.catalog import RecordCatalog
from recordings.errors import InvalidCallId, RecordNotFound, StoreUnavailable
from recordings.layout import META
from recordings.s3_location import S3Location
from recordings.s3_records import S3Records
from recordings.s3_store import S3RecordStore
from recordings.store import RecordStore
from recordings.uploader import RecordUploader
from tests.ops.records import THREE_TURNS, CallSpec, Exchange, build_call
from tests.recordings.s3_bucket import new_records_url, use_s3

ONE_TURN = (Exchange("What time do you open?", 1500.0, latency_ms=400.0),)


@dataclass
class Catalog:
    """A catalog under test and how to put a record in it (written as a gateway would)."""

    catalog: RecordCatalog
    # Writes a record as a gateway would (then `edit`s it, as a crash would have left
    # it); returns its local folder.
    add: Callable[..., Path]


@pytest.fixture(params=["local", "s3"])
def records(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[Catalog]:
    written = tmp_path / "calls"
    if request.param == "local":

        def add_local(spec: CallSpec, edit: Callable[[Path], None] | None = None) -> Path:
            folder = build_call(written, spec).path
            if edit is not None:
                edit(folder)
            return folder

        yield Catalog(RecordStore(written), add_local)
        return
    endpoint: str = request.getfixturevalue("s3_endpoint")
    use_s3(monkeypatch, endpoint)
    remote = S3Records.from_url(new_records_url(endpoint))
    uploader = RecordUploader(written, remote)

    def add_s3(spec: CallSpec, edit: Callable[[Path], None] | None = None) -> Path:
        folder = build_call(written, spec).path
        if edit is not None:
            edit(folder)
        assert uploader.upload_now(spec.call_sid) > 0
        return folder

    store = S3RecordStore(remote)
    yield Catalog(store, add_s3)
    store.close()


def test_lists_the_ids_of_records_sorted(records: Catalog) -> None:
    for sid in ("CAb", "CAa", "CAc"):
        records.add(CallSpec(sid, ONE_TURN))
    assert records.catalog.ids() == ["CAa", "CAb", "CAc"]


def test_a_summary_carries_the_calls_headline_numbers(records: Catalog) -> None:
    folder = records.add(CallSpec("CAsum", THREE_TURNS, from_number="+15557654321"))
    expected = RecordStore(folder.parent).open("CAsum").summary()
    summary = records.catalog.summary("CAsum")
    assert (summary.call_sid, summary.from_, summary.ended_with) == (
        "CAsum",
        expected.from_,
        "hangup",
    )
    assert summary.turns == expected.turns > 0
    assert summary.mouth_to_mouth_p50_ms == expected.mouth_to_mouth_p50_ms is not None
    files = sum(p.stat().st_size for p in folder.iterdir() if not p.name.startswith("."))
    assert summary.size_bytes == files
    assert [s.call_sid for s in records.catalog.summaries()] == ["CAsum"]


def test_a_record_without_its_summary_is_summed_up_from_its_timeline(
    records: Catalog, tmp_path: Path
) -> None:
    # What a crashed call leaves: meta.json without `summary`.
    reference = build_call(tmp_path / "reference", CallSpec("CAref", THREE_TURNS)).path
    _drop_summary(reference)
    expected = RecordStore(reference.parent).summary("CAref")
    records.add(CallSpec("CAcrash", THREE_TURNS), edit=_drop_summary)
    summary = records.catalog.summary("CAcrash")
    assert (summary.turns, summary.barge_ins, summary.errors) == (
        expected.turns,
        expected.barge_ins,
        expected.errors,
    )
    assert summary.turns > 0
    assert summary.mouth_to_mouth_p50_ms == expected.mouth_to_mouth_p50_ms


def test_open_gives_every_file_of_the_record(records: Catalog) -> None:
    folder = records.add(CallSpec("CAopen", THREE_TURNS))
    original = RecordStore(folder.parent).open("CAopen")
    record = records.catalog.open("CAopen")
    assert record.call_sid == "CAopen"
    assert record.meta == original.meta
    assert record.transcript() == original.transcript()
    assert list(record.timeline()) == list(original.timeline())
    assert np.array_equal(record.caller_audio(), original.caller_audio())
    assert np.array_equal(record.bot_audio(), original.bot_audio())


def test_an_unknown_or_invalid_id_is_refused(records: Catalog) -> None:
    records.add(CallSpec("CAknown", ONE_TURN))
    with pytest.raises(RecordNotFound):
        records.catalog.open("CAunknown")
    with pytest.raises(RecordNotFound):
        records.catalog.summary("CAunknown")
    with pytest.raises(InvalidCallId):
        records.catalog.open("../CAknown")


def test_cleanup_removes_records_past_retention_and_a_dry_run_nothing(records: Catalog) -> None:
    for sid in ("CAone", "CAtwo"):
        records.add(CallSpec(sid, ONE_TURN))
    later = datetime.now(UTC) + timedelta(days=31)
    planned = records.catalog.cleanup(
        retention_days=30, max_storage_gb=None, now=later, dry_run=True
    )
    assert sorted(r.call_sid for r in planned) == ["CAone", "CAtwo"]
    assert records.catalog.ids() == ["CAone", "CAtwo"]
    assert records.catalog.cleanup(retention_days=30, max_storage_gb=None) == []
    removed = records.catalog.cleanup(retention_days=30, max_storage_gb=None, now=later)
    assert {r.reason for r in removed} == {"age"}
    assert records.catalog.ids() == []
    assert records.catalog.size_bytes() == 0


def test_cleanup_keeps_the_store_under_its_size_limit(records: Catalog) -> None:
    for sid in ("CAa", "CAb", "CAc"):
        records.add(CallSpec(sid, ONE_TURN))
    total = records.catalog.size_bytes()
    limit_gb = (total * 0.5) / 1e9
    removed = records.catalog.cleanup(retention_days=None, max_storage_gb=limit_gb)
    assert removed and {r.reason for r in removed} == {"size"}
    assert records.catalog.size_bytes() <= total * 0.5
    assert len(records.catalog.ids()) == 3 - len(removed)


def _drop_summary(folder: Path) -> None:
    meta = json.loads((folder / META).read_text())
    del meta["summary"]
    (folder / META).write_text(json.dumps(meta))


# --- the S3 side only ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "bucket", "prefix"),
    [
        ("s3://calls", "calls", ""),
        ("s3://calls/", "calls", ""),
        ("s3://my-calls/prod/eu", "my-calls", "prod/eu"),
        ("s3://my.calls/prod/", "my.calls", "prod"),
    ],
)
def test_records_url_names_a_bucket_and_a_prefix(url: str, bucket: str, prefix: str) -> None:
    location = S3Location.parse(url)
    assert (location.bucket, location.prefix) == (bucket, prefix)
    assert location.key("CA1", "meta.json") == (f"{prefix}/" if prefix else "") + "CA1/meta.json"


@pytest.mark.parametrize(
    "url", ["", "calls", "https://s3.example.com/calls", "s3://", "s3://UPPER", "s3://b/../x"]
)
def test_a_malformed_records_url_is_refused(url: str) -> None:
    with pytest.raises(ValueError, match="RECORDS_URL"):
        S3Location.parse(url)


def test_a_store_that_cannot_be_reached_says_so_in_one_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, "http://127.0.0.1:9")  # discard port: nothing listens
    store = S3RecordStore(S3Records.from_url("s3://nowhere"))
    try:
        with pytest.raises(StoreUnavailable, match="listing s3://nowhere"):
            store.ids()
    finally:
        store.close()


def test_a_missing_bucket_is_a_store_error_not_an_empty_list(
    s3_endpoint: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, s3_endpoint)
    store = S3RecordStore(S3Records.from_url("s3://offhook-no-such-bucket"))
    try:
        with pytest.raises(StoreUnavailable, match="NoSuchBucket"):
            store.ids()
    finally:
        store.close()


def test_downloaded_copies_are_private_and_gone_after_close(
    s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    use_s3(monkeypatch, s3_endpoint)
    remote = S3Records.from_url(new_records_url(s3_endpoint))
    build_call(tmp_path, CallSpec("CAprivate", ONE_TURN))
    RecordUploader(tmp_path, remote).upload_now("CAprivate")
    store = S3RecordStore(remote)
    record = store.open("CAprivate")
    assert record.path.parent.stat().st_mode & 0o077 == 0
    store.close()
    assert not record.path.exists()
