"""One HTTP client for the tests' requests to the servers they start. httpx2's module functions
(``httpx2.get``, ``.post``) build a client per call, and its TLS context costs about 60 ms of
CPU (2 ms for the request itself): a test polling at 10 Hz spent more than half a core on it,
next to the server it waited for. Without keep-alive, as the module functions: each request
opens its own connection, so a server killed and restarted on its port leaves no stale one."""

from __future__ import annotations

import httpx2

http = httpx2.Client(limits=httpx2.Limits(max_keepalive_connections=0))
