"""A fresh bucket on the real S3 server (SeaweedFS) for one test, and what is in it."""

from __future__ import annotations

import uuid
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from tests.services import s3_environ

BUCKET = "offhook-tests"


def use_s3(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    """Point boto3 (as a gateway or the ops CLI would see it) at `endpoint`."""
    for name, value in s3_environ(endpoint).items():
        monkeypatch.setenv(name, value)


def s3_client(endpoint: str) -> Any:
    env = s3_environ(endpoint)
    return boto3.session.Session().client(
        "s3",
        endpoint_url=env["AWS_ENDPOINT_URL"],
        aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"],
        region_name=env["AWS_DEFAULT_REGION"],
        config=Config(s3={"addressing_style": "path"}),
    )


def new_records_url(endpoint: str) -> str:
    """s3://BUCKET/PREFIX that no other test uses.

    One bucket, a prefix per test: SeaweedFS gives every bucket a collection of its own
    volumes (7 at a time), and the test server allows 20 volumes in all.
    """
    try:
        s3_client(endpoint).create_bucket(Bucket=BUCKET)
    except ClientError as exc:
        if exc.response["Error"]["Code"] not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
            raise
    return f"s3://{BUCKET}/{uuid.uuid4().hex[:12]}"


def objects(endpoint: str, records_url: str) -> dict[str, bytes]:
    """Every object under `records_url`, by key relative to it, with its bytes."""
    bucket, _, prefix = records_url.removeprefix("s3://").partition("/")
    client = s3_client(endpoint)
    found = {}
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/")
    for page in pages:
        for item in page.get("Contents", ()):
            body = client.get_object(Bucket=bucket, Key=item["Key"])["Body"].read()
            found[item["Key"].removeprefix(f"{prefix}/")] = body
    return found
