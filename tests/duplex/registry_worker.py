"""A real worker process that registers itself in the Redis worker registry:
`python -m tests.duplex.registry_worker PORT REDIS_URL PREFIX`.

Its backend only listens (tests.duplex.idle_worker); the registration is the one
`offhook worker` builds from REDIS_URL and WORKER_URL (agents.duplex.worker_cli).
"""

from __future__ import annotations

import sys

import uvicorn

from agents.duplex.worker import create_worker_app
from agents.duplex.worker_cli import registration
from tests.duplex.idle_worker import ListeningBackend

if __name__ == "__main__":
    port, redis_url, prefix = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    url = f"ws://127.0.0.1:{port}"
    app = create_worker_app(
        ListeningBackend(),
        worker_id=f"registered-{port}",
        announcer=registration(redis_url, url, f"registered-{port}", prefix=prefix),
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", ws="websockets-sansio")
