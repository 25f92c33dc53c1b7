"""Call records: every call leaves a complete, crash-safe record on disk.

Writing never blocks the call (CallRecorder: a bounded queue and one writer thread);
a process that dies mid-call leaves files that are readable as they are and are closed
properly by RecordStore.repair on the next start; retention removes records by age
and by total size (RecordStore.cleanup, retention_loop). With RECORDS_URL, finished
records are also uploaded to an S3-compatible store (RecordUploader) and read back from
it by `offhook calls` (S3RecordStore).

    recorder.py   CallRecorder: the non-blocking API a call writes through
    writer.py     RecordWriter: the files of one record, owned by the writer thread
    wavfile.py    StreamingWav, repair_wav, read_pcm16: WAV files that survive a crash
    store.py      RecordStore, Removal: list, open, repair and clean up records
    catalog.py    RecordCatalog: what `offhook calls` needs of a store, local or S3
    cleanup_plan.py  plan_removals: the retention rule both stores apply
    s3_location.py   S3Location: RECORDS_URL=s3://BUCKET/PREFIX
    s3_records.py    S3Records: record files in the bucket (boto3; blocking)
    s3_store.py   S3RecordStore: every gateway's records, read back from the store
    uploader.py   RecordUploader: finished records to the store, retried, never lost
    record.py     CallRecord, CallSummary: one record read back
    timeline.py   transcript and numbers derived from a timeline (for crashed calls)
    retention.py  retention_loop: cleanup at start and daily
    privacy.py    mask_number: phone numbers for logs and listings
    layout.py     file names, call id check, timestamps, EndedWith
    jsonio.py     JSON coercion and atomic JSON files
    errors.py     RecordError and its subclasses

The record format (version 1)
=============================

One folder per call, `{root}/{call_sid}/` (root is e.g. `./data/calls`). A call id
must match `^[A-Za-z0-9_-]{1,64}$`; anything else is refused with InvalidCallId, so an
id can never name a path outside the root. An existing folder is never reused
(RecordExists).

meta.json
    Written atomically (temporary file + os.replace) at the start and again at close;
    a null `ended_at` means the call is in progress or its process died:

        {"format": 1, "call_sid", "stream_sid", "account_sid", "from", "to",
         "started_at": "2024-05-01T12:00:00.123Z",   # ISO-8601 UTC, ms, "Z"
         "ended_at": str | null, "duration_s": float | null,
         "ended_with": null | "completed" | "hangup" | "disconnected" | "error" |
                       "timeout" | "max_length" | "flood" | "crashed",
         "agent": "cascade", "fallbacks": [], "error": str | null,
         "versions": {...free-form...}, "sample_rate": 8000,
         "summary": {"turns": int, "barge_ins": int, "errors": int,
                     "mouth_to_mouth_ms": {"p50": float | null, "max": float | null}, ...},
         "recorder": {"dropped": int, "errors": int}}   # added at close

    The recorder takes the initial dict from its caller (missing documented keys are
    filled with null / [] / {}) and itself sets only format, call_sid, started_at,
    ended_at, duration_s, ended_with, sample_rate and, at close, `recorder` and the
    caller's `meta_updates`. `summary.turns` counts transcript turns (caller and bot
    together). "crashed" is set only by RecordStore.repair.

timeline.jsonl
    Append-only, one JSON object per line, each line flushed to the OS when written:
    `{"t_ms": float (call clock), "event": str, ...data}`. Values are coerced to JSON
    (numpy scalars to numbers, NaN to null, anything unknown to str()). A crash may
    leave a last line without its newline; readers skip it. Each kind of event is one
    class in callevents/__init__.py (its name and fields); readers turn lines back into those
    with `callevents.parse_event`. The store reads these back for a crashed call:

        caller_turn  {"text", "start_ms", "end_ms"}
        bot_turn     {"turn_id", "text", "intended", "truncated", "start_ms", "end_ms"}
        turn_timing  {"mouth_to_mouth_ms", ...}
        barge_in     {"turn_id", "heard", "truncated"}
        error        {"stage", "error"}   (written as "backend_error" before 2026-11-23)

caller.wav
    PCM16 mono 8 kHz; sample i is call-clock sample i (caller audio as received, gaps
    already filled by whoever calls CallRecorder.caller_audio).

bot.wav
    PCM16 mono 8 kHz on the same clock: what the caller actually heard. Written from
    (start_sample, pcm) pieces in non-decreasing start order: silence pads from the
    current end to the start, then the piece is written; a piece that starts before the
    current end loses its overlapping head. At close bot.wav is padded to caller.wav's
    length (a crashed call's may be shorter; CallRecord.bot_audio pads it).

transcript.json
    Written at close, whatever dict the call gives; by convention:
    `{"turns": [{"speaker": "caller" | "bot", "text", "start_ms", "end_ms",
    "truncated": bool, "intended": str, "latency": {"end_of_turn_ms", "stt_ms",
    "llm_first_token_ms", "tts_first_audio_ms", "mouth_to_mouth_ms"} | null}]}`.
    RecordStore.repair rebuilds it from the timeline for a crashed call.

Both WAV files are written as they come: a standard 44-byte RIFF header whose sizes
hold the placeholder 0xFFFFFFFF, data flushed to the OS at least every second of audio
(and every second of wall time), sizes patched at close. A file left by a crash is
repaired by recomputing the sizes from its length (a trailing odd byte is dropped);
read_pcm16 reads one as it is.
"""

from recordings.errors import (
    CorruptRecord,
    InvalidCallId,
    RecordError,
    RecordExists,
    RecordNotFound,
)
from recordings.layout import EndedWith, check_call_id
from recordings.privacy import mask_number
from recordings.record import CallRecord, CallSummary
from recordings.recorder import CallRecorder
from recordings.retention import RetentionPolicy, retention_loop
from recordings.store import RecordStore, Removal
from recordings.wavfile import StreamingWav, read_pcm16, repair_wav

__all__ = [
    "CallRecord",
    "CallRecorder",
    "CallSummary",
    "CorruptRecord",
    "EndedWith",
    "InvalidCallId",
    "RecordError",
    "RecordExists",
    "RecordNotFound",
    "RecordStore",
    "Removal",
    "RetentionPolicy",
    "StreamingWav",
    "check_call_id",
    "mask_number",
    "read_pcm16",
    "repair_wav",
    "retention_loop",
]
