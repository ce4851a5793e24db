"""A reverse proxy that serves an upstream under a path prefix and strips it, as nginx does.

`location /statetrail/ { proxy_pass http://upstream/; proxy_set_header Host $host; }`
forwards `/statetrail/x` as `/x` with the browser's Host header, and hands the
answer back untouched (redirects and cookies included). Anything outside the
prefix is answered 404 by the proxy itself, so a link that escapes the prefix
fails the way it would behind a real proxy. With `forwarded`, it also does what
docs/security.md's example adds: `proxy_set_header X-Forwarded-For $remote_addr;`
and `X-Forwarded-Proto $scheme`, overwriting whatever the client sent.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

# Headers that describe one connection, not the message (RFC 9110 section 7.6.1).
HOP_BY_HOP = frozenset({
    "connection", "keep-alive", "proxy-connection", "te", "trailer",
    "transfer-encoding", "upgrade",
})


@contextmanager
def stripping_proxy(upstream: str, prefix: str, *, forwarded: bool = False) -> Iterator[str]:
    """Serve `upstream` (http://host:port) under `prefix`; yield the proxy's base URL."""
    target = urlsplit(upstream)
    if target.hostname is None:
        raise ValueError(f"upstream {upstream!r} names no host")
    host: str = target.hostname
    port = target.port

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            self._forward()

        def do_HEAD(self) -> None:
            self._forward()

        def do_POST(self) -> None:
            self._forward()

        def _forward(self) -> None:
            if not (self.path == prefix or self.path.startswith(prefix + "/")):
                self._answer(404, [("content-type", "text/plain")], b"outside the prefix\n")
                return
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in HOP_BY_HOP}
            if forwarded:
                headers = {k: v for k, v in headers.items()
                           if k.lower() not in ("x-forwarded-for", "x-forwarded-proto")}
                headers["X-Forwarded-For"] = self.client_address[0]
                headers["X-Forwarded-Proto"] = "http"
            connection = http.client.HTTPConnection(host, port, timeout=60)
            try:
                connection.request(
                    self.command, self.path[len(prefix):] or "/", body=body, headers=headers
                )
                reply = connection.getresponse()
                content = reply.read()
                kept = [(k, v) for k, v in reply.getheaders() if k.lower() not in HOP_BY_HOP]
                self._answer(reply.status, kept, content)
            finally:
                connection.close()

        def _answer(self, status: int, headers: list[tuple[str, str]], body: bytes) -> None:
            self.send_response(status)
            for key, value in headers:
                if key.lower() != "content-length":
                    self.send_header(key, value)
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    serving.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        serving.join(timeout=10)
