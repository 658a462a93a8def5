"""The hub on cheroot, the thread-pooled WSGI server of CherryPy.

Each connection is served by one pool thread with blocking socket I/O; an SSE stream keeps its
thread for as long as it is open. Publishers write events into the stream's socket without
blocking; the thread writes out what the kernel did not take at once (hub.py), so a slow client
holds up nobody but itself (its writes time out after `write_timeout` seconds, and its backlog,
if it fills first, gets it dropped). The pool starts with `threads` threads and grows in
the background, in steps of `GROW_STEP`, whenever fewer than `RESERVE` would be left free for
publishers and page loads; `max_subscribers` bounds the streams, and so the threads.
"""

from __future__ import annotations

import threading

import cheroot.wsgi

from .app import PROTOCOL_KEY, SOCKET_KEY, HubApp

#: Pool threads kept free for requests other than streams.
RESERVE = 16
GROW_STEP = 64


class _Gateway(cheroot.wsgi.Gateway_10):
    """cheroot's WSGI 1.0 gateway, plus the connection's socket and response protocol in the
    environ: publishers write events straight into a stream's socket (framed as cheroot frames
    the response: chunked for HTTP/1.1), and an idle stream can tell whether its client left."""

    def get_environ(self):
        env = super().get_environ()
        env[SOCKET_KEY] = self.req.conn.socket
        env[PROTOCOL_KEY] = self.req.response_protocol
        return env


class HubServer:
    """Serves `app` on `host:port` (port 0: any free port). `start()` runs it in a thread,
    `serve_forever()` in this one."""

    def __init__(
        self,
        app: HubApp,
        host: str = "127.0.0.1",
        port: int = 3000,
        threads: int = 64,
        write_timeout: float = 10.0,
    ):
        self.app = app
        max_threads = app.hub.max_subscribers + RESERVE
        threads = max(min(threads, max_threads), RESERVE + 1)
        self.server = cheroot.wsgi.Server(
            (host, port),
            app,
            numthreads=threads,
            max=max_threads,
            timeout=write_timeout,
            request_queue_size=4096,
            shutdown_timeout=2,
        )
        self.server.gateway = _Gateway
        self.server.keep_alive_conn_limit = 1024
        self._pool_size = threads
        self._grower: threading.Thread | None = None
        self._stopping = False
        self._grow_lock = threading.Lock()
        app.on_stream_open = self._stream_opened
        self._thread: threading.Thread | None = None

    def _stream_opened(self, streams: int) -> None:
        with self._grow_lock:
            if self._stopping or streams + RESERVE <= self._pool_size:
                return
            if self._grower is not None and self._grower.is_alive():
                return
            self._grower = threading.Thread(target=self._grow, name="mercure-hub-grow")
            self._grower.start()

    def _grow(self) -> None:
        pool = self.server.requests
        # cheroot's grow() waits for the new threads to be ready, then adds them to the pool;
        # stop() waits for this thread first, so that it stops every thread of the pool.
        pool.grow(GROW_STEP)
        with self._grow_lock:
            self._pool_size = len(pool._threads)

    @property
    def port(self) -> int:
        return self.server.bind_addr[1]

    @property
    def url(self) -> str:
        host = self.server.bind_addr[0]
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"

    def start(self) -> HubServer:
        self.server.prepare()  # binds: the port is known from here on
        self._thread = threading.Thread(target=self.server.serve, name="mercure-hub", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.server.prepare()
        try:
            self.server.serve()
        finally:
            self.stop()

    def stop(self) -> None:
        """Ends every stream, then the server."""
        with self._grow_lock:
            self._stopping = True
            grower = self._grower
        if grower is not None:
            grower.join()
        self.app.hub.close()
        self.server.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
