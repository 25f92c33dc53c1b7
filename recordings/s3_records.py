"""Record files in an S3-compatible bucket: `s3://BUCKET/PREFIX/<call id>/<file>`.

The endpoint and credentials are boto3's own: AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_DEFAULT_REGION (and anything else boto3 reads). Every method
blocks on the network: from an event loop, call it through asyncio.to_thread. A failed
request raises StoreUnavailable; botocore's own exceptions never leave this module.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import boto3
from boto3.exceptions import Boto3Error
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from recordings.errors import RecordError, StoreUnavailable
from recordings.layout import check_call_id
from recordings.s3_location import S3Location

__all__ = ["S3Location", "S3Object", "S3Records"]

# Short timeouts: an uploader thread stuck on a dead store only delays its next retry.
_CLIENT_CONFIG = Config(
    connect_timeout=5, read_timeout=30, retries={"max_attempts": 3, "mode": "standard"}
)


@dataclass(frozen=True)
class S3Object:
    """One stored file of a record."""

    call_sid: str
    name: str
    key: str
    size: int
    modified: datetime


class S3Records:
    """The record files under one s3:// location."""

    def __init__(self, location: S3Location, client: Any | None = None) -> None:
        self.location = location
        self._client = client if client is not None else _new_client()

    @classmethod
    def from_url(cls, url: str) -> S3Records:
        return cls(S3Location.parse(url))

    def upload(self, call_sid: str, path: Path) -> None:
        """Put one local file as `<call id>/<its name>`, replacing what was there."""
        key = self.location.key(call_sid, path.name)
        with _s3_errors(f"uploading {key}"):
            self._client.upload_file(str(path), self.location.bucket, key)

    def objects(self, call_sid: str | None = None) -> Iterator[S3Object]:
        """Every record file in the store (or of one call); foreign keys are skipped."""
        start = self.location.key(call_sid) if call_sid else self.location.root_key
        paginator = self._client.get_paginator("list_objects_v2")
        with _s3_errors(f"listing {self.location.url}"):
            for page in paginator.paginate(Bucket=self.location.bucket, Prefix=start):
                for item in page.get("Contents", ()):
                    found = self._parse(item)
                    if found is not None:
                        yield found

    def download(self, obj: S3Object, path: Path) -> None:
        with _s3_errors(f"downloading {obj.key}"):
            self._client.download_file(self.location.bucket, obj.key, str(path))

    def delete(self, call_sid: str) -> None:
        """Remove every file of one call's record."""
        keys = [obj.key for obj in self.objects(call_sid)]
        for first in range(0, len(keys), 1000):  # DeleteObjects takes 1000 keys at most
            batch = [{"Key": key} for key in keys[first : first + 1000]]
            with _s3_errors(f"deleting the record of call {call_sid}"):
                answer = self._client.delete_objects(
                    Bucket=self.location.bucket, Delete={"Objects": batch, "Quiet": True}
                )
            if answer.get("Errors"):
                error = answer["Errors"][0]
                raise StoreUnavailable(
                    f"deleting {error.get('Key')}: {error.get('Code')} {error.get('Message')}"
                )

    def _parse(self, item: dict[str, Any]) -> S3Object | None:
        key = str(item["Key"])
        rest = key.removeprefix(self.location.root_key)
        call_sid, _, name = rest.partition("/")
        if not name or "/" in name:
            return None
        try:
            check_call_id(call_sid)
        except RecordError:
            return None
        return S3Object(call_sid, name, key, int(item["Size"]), item["LastModified"])


def _new_client() -> Any:
    # Self-hosted stores (SeaweedFS, MinIO, Ceph) are reached by IP or a host name
    # without wildcard DNS: name the bucket in the path there, not in the host.
    custom = bool(os.environ.get("AWS_ENDPOINT_URL"))
    config = _CLIENT_CONFIG.merge(Config(s3={"addressing_style": "path"})) if custom else None
    return boto3.session.Session().client("s3", config=config or _CLIENT_CONFIG)


@contextmanager
def _s3_errors(doing: str) -> Iterator[None]:
    """Turn botocore's failures into StoreUnavailable, saying what was being done."""
    try:
        yield
    except ClientError as exc:
        error = exc.response.get("Error", {})
        reason = f"{error.get('Code', '?')}: {error.get('Message', exc)}"
        raise StoreUnavailable(f"{doing}: {reason}") from exc
    except (BotoCoreError, Boto3Error) as exc:  # Boto3Error: S3UploadFailedError
        raise StoreUnavailable(f"{doing}: {exc}") from exc
