"""`offhook calls` with RECORDS_URL, run where no record was written: it sees every
gateway's calls in the S3 store (a real SeaweedFS) and works on them as on local ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.calls import main
from recordings.s3_records import S3Records
from recordings.uploader import RecordUploader
from tests.ops.records import THREE_TURNS, CallSpec, build_call
from tests.recordings.s3_bucket import new_records_url, objects, use_s3


@pytest.fixture
def records_url(s3_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Two gateways' records, each uploaded from its own DATA_DIR to one store."""
    use_s3(monkeypatch, s3_endpoint)
    url = new_records_url(s3_endpoint)
    for gateway, sids in (("gw1", ("CAfirst", "CAsecond")), ("gw2", ("CAthird",))):
        calls = tmp_path / gateway / "calls"
        uploader = RecordUploader(calls, S3Records.from_url(url))
        for sid in sids:
            build_call(calls, CallSpec(sid, THREE_TURNS, from_number="+15551230000"))
            assert uploader.upload_now(sid) > 0
    # The CLI runs elsewhere: its own DATA_DIR is empty.
    monkeypatch.setenv("DATA_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("RECORDS_URL", url)
    return url


def test_list_shows_every_gateways_calls(
    records_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    assert "3 of 3 calls" in out
    for sid in ("CAfirst", "CAsecond", "CAthird"):
        assert sid in out


def test_without_records_url_the_local_folder_is_read(
    records_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--records-url", "", "list"]) == 0
    assert "no calls under" in capsys.readouterr().out


def test_show_and_export_work_on_a_call_from_the_store(
    records_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "CAthird"]) == 0
    out = capsys.readouterr().out
    assert "call CAthird" in out
    assert f"{records_url}/CAthird" in out
    assert main(["export", "CAthird", "--out", str(tmp_path / "out")]) == 0
    exported = {p.name for p in (tmp_path / "out").rglob("*") if p.is_file()}
    assert "CAthird.wav" in exported


def test_an_unknown_call_is_one_line_and_exit_status_2(
    records_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["show", "CAnever"]) == 2
    err = capsys.readouterr().err.strip()
    assert "no record for call CAnever" in err and "\n" not in err


def test_a_store_that_cannot_be_reached_is_exit_status_2(
    records_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    assert main(["list"]) == 2
    assert "listing s3://" in capsys.readouterr().err


def test_cleanup_keeps_the_store_within_its_limits(
    records_url: str, s3_endpoint: str, capsys: pytest.CaptureFixture[str]
) -> None:
    before = objects(s3_endpoint, records_url)
    one_record = sum(len(body) for key, body in before.items() if key.startswith("CAthird/"))
    limit_gb = 1.5 * one_record / 1e9  # room for one of the three (they are alike)
    assert main(["cleanup", "--retention-days", "0", "--max-storage-gb", f"{limit_gb}"]) == 0
    assert "removed 2 records" in capsys.readouterr().out
    after = objects(s3_endpoint, records_url)
    assert len({key.split("/")[0] for key in after}) == 1
    assert sum(map(len, after.values())) <= limit_gb * 1e9
