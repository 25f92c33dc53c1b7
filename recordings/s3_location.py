"""Where records go in an S3-compatible store: RECORDS_URL=s3://BUCKET/PREFIX.

Kept apart from the client (recordings.s3_records) so that checking the setting does
not import boto3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from recordings.layout import check_call_id

__all__ = ["S3Location"]

# S3's own bucket naming rules (lower case, digits, dots, hyphens; 3-63 characters).
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


@dataclass(frozen=True)
class S3Location:
    """A bucket and a key prefix ("" or "calls/2024"), parsed from s3://BUCKET/PREFIX."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> S3Location:
        """ValueError, saying what is wrong, for anything but s3://BUCKET[/PREFIX]."""
        if not url.startswith("s3://"):
            raise ValueError(f"RECORDS_URL must look like s3://BUCKET/PREFIX, got {url!r}")
        bucket, _, prefix = url.removeprefix("s3://").partition("/")
        if not _BUCKET.fullmatch(bucket):
            raise ValueError(f"RECORDS_URL names an invalid S3 bucket {bucket!r}")
        prefix = prefix.strip("/")
        if prefix and any(part in ("", ".", "..") for part in prefix.split("/")):
            raise ValueError(f"RECORDS_URL has an invalid prefix {prefix!r}")
        return cls(bucket, prefix)

    @property
    def url(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}" if self.prefix else f"s3://{self.bucket}"

    @property
    def root_key(self) -> str:
        """What every record's key starts with: "" or "PREFIX/"."""
        return f"{self.prefix}/" if self.prefix else ""

    def key(self, call_sid: str, name: str = "") -> str:
        """The key of one file of a record (or, with no name, the record's folder/)."""
        return f"{self.root_key}{check_call_id(call_sid)}/{name}"
