"""The omni duplex worker pool: full-duplex speech models in worker processes.

A worker (`offhook worker --backend NAME`) owns one model instance and serves one call
at a time over a WebSocket, one *unit* of caller audio (default 1 s) in, one result
(listen, or speak with text and audio) out. The gateway side keeps a pool of workers
with a FIFO queue and falls back to the in-process cascade when none is free or one
dies mid-call. Design background: the MiniCPM-o gateway/worker seeds.
"""
