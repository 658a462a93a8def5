"""The hub's HTTP side, as a WSGI application: subscribe (`GET /.well-known/mercure`, answered
as Server-Sent Events), publish (`POST /.well-known/mercure`), the demo page (`GET /`) and,
when enabled, counters (`GET /stats`).

Protocol: the Mercure specification as of draft 7 (dunglas/mercure `spec/mercure.md`): topic
selectors in repeated `topic` query parameters; updates as `application/x-www-form-urlencoded`
`topic` (repeated: canonical then alternates), `data`, `id`, `type`, `retry` and `private`;
publishers authorised by a JWS whose `mercure.publish` claim lists the selectors they may
publish to, presented as `Authorization: Bearer`, an `authorization` query parameter or the
`mercureAuthorization` cookie (the cookie on a POST only with an allowed `Origin`, against
cross-site request forgery); `Last-Event-ID` (header, else the `lastEventID` query parameter)
replays the history and is answered with a `Last-Event-ID` response header.
"""

from __future__ import annotations

import itertools
import json
import select
import socket
import threading
import time
from http.cookies import CookieError, SimpleCookie
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import jwt

from .hub import HEARTBEAT, Hub, HubFull, as_chunk
from .selectors import InvalidSelector, admits, check_selector, has_control_characters

HUB_PATH = "/.well-known/mercure"
COOKIE_NAME = "mercureAuthorization"
#: Custom claim namespace that the Mercure hub accepts beside `mercure`.
NAMESPACED_CLAIM = "https://mercure.rocks/"
#: The environ keys under which the server (see server.py) passes the connection's socket and
#: its HTTP/1.1 response protocol ("HTTP/1.1" means chunked transfer coding for a stream).
SOCKET_KEY = "mercure_hub.socket"
PROTOCOL_KEY = "mercure_hub.response_protocol"
#: How often an idle stream checks that its client is still there when heartbeats are off.
IDLE_CHECK_SECONDS = 30.0

SSE_HEADERS = [
    ("Content-Type", "text/event-stream"),
    ("Cache-Control", "private, no-cache, no-store, must-revalidate, max-age=0"),
    ("Pragma", "no-cache"),
    ("Expires", "0"),
    ("X-Accel-Buffering", "no"),
]

_STATUS = {
    200: "200 OK",
    400: "400 Bad Request",
    401: "401 Unauthorized",
    403: "403 Forbidden",
    404: "404 Not Found",
    405: "405 Method Not Allowed",
    413: "413 Content Too Large",
    503: "503 Service Unavailable",
}


class HTTPError(Exception):
    def __init__(self, status: int, message: str | None = None):
        super().__init__(message or _STATUS[status][4:])
        self.status = status


class Auth:
    """Checks the JWS a client presents: HS256 (or HS384, HS512) with a shared key."""

    def __init__(self, key: str, algorithms=("HS256", "HS384", "HS512")):
        self.key = key
        self.algorithms = list(algorithms)

    def claims(self, token: str) -> dict:
        try:
            claims = jwt.decode(
                token, self.key, algorithms=self.algorithms, options={"verify_aud": False}
            )
        except jwt.PyJWTError as e:
            raise HTTPError(401, f"invalid JWT: {e}") from None
        mercure = claims.get("mercure", claims.get(NAMESPACED_CLAIM))
        if mercure is not None and not isinstance(mercure, dict):
            raise HTTPError(401, 'invalid JWT: the "mercure" claim is not an object')
        claims["mercure"] = mercure or {}
        return claims


def _selector_list(claims: dict, key: str) -> list[str] | None:
    value = claims["mercure"].get(key)
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
        raise HTTPError(401, f'invalid JWT: "mercure.{key}" is not a list of strings')
    return value


def _utf8(text: str) -> str:
    """A WSGI string (bytes as Latin-1) as the UTF-8 it carries."""
    try:
        return text.encode("latin-1").decode("utf-8")
    except UnicodeError:
        raise HTTPError(400, "not UTF-8") from None


def _parse_form(text: str) -> dict[str, list[str]]:
    try:
        return parse_qs(text, keep_blank_values=True, encoding="utf-8", errors="strict")
    except (UnicodeError, ValueError):
        raise HTTPError(400, "malformed form or query: not UTF-8") from None


def _peer_closed(sock) -> bool:
    """True once the client has closed its side: its socket polls readable and a peek reads
    end of file. Never blocks (the server's sockets have a timeout, under which a plain
    `recv` would first wait for data)."""
    if sock is None:
        return False
    try:
        fd = sock.fileno()
        if fd < 0:
            return True
        poller = select.poll()
        poller.register(fd, select.POLLIN)
        events = poller.poll(0)
        if not events:
            return False
        if events[0][1] & (select.POLLERR | select.POLLHUP | select.POLLNVAL):
            return True
        return sock.recv(1, socket.MSG_PEEK) == b""
    except (ValueError, NotImplementedError):  # a TLS socket takes no flags: can't tell
        return False
    except OSError:
        return True


class HubApp:
    """The WSGI application. `publisher_key` signs publishers' tokens, `subscriber_key`
    (default: the same) subscribers' tokens, which are optional: an anonymous subscriber gets
    every public update its selectors admit."""

    def __init__(
        self,
        hub: Hub,
        publisher_key: str,
        subscriber_key: str | None = None,
        heartbeat: float = 15.0,
        publish_origins: tuple[str, ...] = (),
        max_selectors: int = 100,
        max_body: int = 1 << 20,
        demo: bool = True,
        stats: bool = False,
    ):
        self.hub = hub
        self.publisher_auth = Auth(publisher_key)
        self.subscriber_auth = Auth(subscriber_key or publisher_key)
        self.heartbeat = heartbeat
        self.publish_origins = frozenset(publish_origins)
        self.max_selectors = max_selectors
        self.max_body = max_body
        self.demo = demo
        self.stats = stats
        self._streams = 0
        self._streams_lock = threading.Lock()
        #: Called with the number of open streams when one opens (the server grows its pool).
        self.on_stream_open = None

    # -- routing ------------------------------------------------------------------------------

    def __call__(self, environ, start_response):
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        try:
            if path == HUB_PATH:
                if method == "GET":
                    return self.subscribe(environ, start_response)
                if method == "POST":
                    return self.publish(environ, start_response)
                raise HTTPError(405)
            if path == "/" and self.demo:
                if method not in ("GET", "HEAD"):
                    raise HTTPError(405)
                return self._respond(start_response, 200, self.demo_page(), "text/html")
            if path == "/stats" and self.stats:
                body = json.dumps(self.stats_dict()).encode()
                return self._respond(start_response, 200, body, "application/json")
            raise HTTPError(404)
        except HTTPError as e:
            extra = [("Allow", "GET, POST")] if e.status == 405 else []
            body = (str(e) + "\n").encode()
            return self._respond(start_response, e.status, body, "text/plain", extra)

    @staticmethod
    def _respond(start_response, status, body: bytes, content_type, extra=()):
        headers = [
            ("Content-Type", f"{content_type}; charset=utf-8"),
            ("Content-Length", str(len(body))),
            ("X-Content-Type-Options", "nosniff"),
            *extra,
        ]
        start_response(_STATUS[status], headers)
        return [body]

    def demo_page(self) -> bytes:
        html = (Path(__file__).parent / "demo.html").read_text(encoding="utf-8")
        return html.replace("{{MATCHER}}", self.hub.matcher_name).encode("utf-8")

    def stats_dict(self) -> dict:
        d = self.hub.stats.as_dict()
        d.update(
            matcher=self.hub.matcher_name,
            subscribers=self.hub.subscriber_count,
            pairs=len(self.hub),
            streams=self._streams,
        )
        return d

    # -- tokens -------------------------------------------------------------------------------

    def _token(self, environ, query: dict[str, list[str]], publish: bool) -> str | None:
        """The JWS the client presents: header, then query parameter, then cookie."""
        header = environ.get("HTTP_AUTHORIZATION")
        if header is not None:
            if not header.startswith("Bearer ") or len(header) < 8:
                raise HTTPError(401, 'invalid "Authorization" header: expected "Bearer <JWS>"')
            return header[7:].strip()
        if "authorization" in query:
            if len(query["authorization"]) != 1:
                raise HTTPError(401, 'several "authorization" query parameters')
            return query["authorization"][0]
        raw = environ.get("HTTP_COOKIE")
        if not raw:
            return None
        try:
            cookie = SimpleCookie(raw).get(COOKIE_NAME)
        except CookieError:
            cookie = None
        if cookie is None:
            return None
        if publish:
            self._check_origin(environ)
        return cookie.value

    def _check_origin(self, environ) -> None:
        """A cookie rides along with any cross-site POST: only allowed origins may use it."""
        origin = environ.get("HTTP_ORIGIN")
        if not origin:
            referer = environ.get("HTTP_REFERER")
            if not referer:
                raise HTTPError(401, 'an "Origin" or "Referer" header must come with a cookie')
            parts = urlsplit(referer)
            origin = f"{parts.scheme}://{parts.netloc}"
        own = f"{environ.get('wsgi.url_scheme', 'http')}://{environ.get('HTTP_HOST', '')}"
        if origin != own and origin not in self.publish_origins and "*" not in self.publish_origins:
            raise HTTPError(401, f"origin {origin!r} may not publish with a cookie")

    # -- publish ------------------------------------------------------------------------------

    def publish(self, environ, start_response):
        started = time.thread_time()
        try:
            return self._publish(environ, start_response)
        finally:
            self.hub.stats.add("publish_cpu_seconds", time.thread_time() - started)

    def _publish(self, environ, start_response):
        query = _parse_form(_utf8(environ.get("QUERY_STRING", "")))
        token = self._token(environ, query, publish=True)
        if token is None:
            raise HTTPError(401, "a publisher JWT is required")
        allowed = _selector_list(self.publisher_auth.claims(token), "publish")
        if allowed is None:
            raise HTTPError(401, 'the JWT has no "mercure.publish" claim')
        content_type = environ.get("CONTENT_TYPE", "").split(";")[0].strip().lower()
        if content_type != "application/x-www-form-urlencoded":
            raise HTTPError(400, "the body must be application/x-www-form-urlencoded")
        form = _parse_form(self._read_body(environ))
        topics = form.get("topic", [])
        if not topics:
            raise HTTPError(400, 'Missing "topic" parameter')
        for topic in topics:
            if not topic or has_control_characters(topic):
                raise HTTPError(400, "a topic is empty or holds a control character")
        retry = None
        if form.get("retry", [""])[0]:
            text = form["retry"][0]
            if not text.isascii() or not text.isdigit():
                raise HTTPError(400, 'Invalid "retry" parameter')
            retry = int(text)
        update_id = form.get("id", [""])[0] or None
        if update_id is not None and (
            update_id.startswith("#") or has_control_characters(update_id)
        ):
            raise HTTPError(400, 'Invalid "id" parameter: starts with "#" or holds a control')
        event_type = form.get("type", [""])[0] or None
        if event_type is not None and has_control_characters(event_type):
            raise HTTPError(400, 'Invalid "type" parameter: holds a control character')
        # Every topic of the update must be admitted by a selector of the claim.
        if not all(any(admits(s, t) for s in allowed) for t in topics):
            raise HTTPError(403, 'a topic of the update is not allowed by "mercure.publish"')
        update_id = self.hub.publish(
            topics,
            data=form.get("data", [""])[0],
            id=update_id,
            type=event_type,
            retry=retry,
            private="private" in form,
        )
        return self._respond(start_response, 200, update_id.encode(), "text/plain")

    def _read_body(self, environ) -> str:
        stream = environ["wsgi.input"]
        length = environ.get("CONTENT_LENGTH")
        if length:
            try:
                n = int(length)
            except ValueError:
                raise HTTPError(400, "bad Content-Length") from None
            if n > self.max_body:
                raise HTTPError(413)
            body = stream.read(n)
        else:
            body = stream.read(self.max_body + 1)
            if len(body) > self.max_body:
                raise HTTPError(413)
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError:
            raise HTTPError(400, "the body is not UTF-8") from None

    # -- subscribe ----------------------------------------------------------------------------

    def subscribe(self, environ, start_response):
        query = _parse_form(_utf8(environ.get("QUERY_STRING", "")))
        private_selectors: list[str] = []
        expires = None
        token = self._token(environ, query, publish=False)
        if token is not None:
            claims = self.subscriber_auth.claims(token)
            for s in _selector_list(claims, "subscribe") or []:
                try:
                    check_selector(s)
                    private_selectors.append(s)
                except InvalidSelector:
                    pass  # a selector no one can match: it grants nothing
            if isinstance(claims.get("exp"), int | float):
                expires = float(claims["exp"])
        selectors = query.get("topic", [])
        if not selectors:
            raise HTTPError(400, 'Missing "topic" parameter.')
        if len(selectors) > self.max_selectors:
            raise HTTPError(400, f"more than {self.max_selectors} topic selectors")
        for s in selectors:
            try:
                check_selector(s)
            except InvalidSelector as e:
                raise HTTPError(400, f"invalid topic selector {s!r}: {e}") from None
        last_event_id = environ.get("HTTP_LAST_EVENT_ID") or query.get("lastEventID", [""])[0]
        # Direct writes into a plain TCP socket (framed as the server frames the response);
        # anything else (TLS, another server) gets its events through the server's writes.
        sock = environ.get(SOCKET_KEY)
        direct = type(sock) is socket.socket and PROTOCOL_KEY in environ
        chunked = direct and environ[PROTOCOL_KEY] == "HTTP/1.1"
        try:
            sub, response_id = self.hub.connect(
                selectors, private_selectors, last_event_id or None, chunked=chunked
            )
        except HubFull as e:
            raise HTTPError(503, f"the hub takes no more subscribers ({e})") from None
        headers = list(SSE_HEADERS)
        if response_id is not None:
            headers.append(("Last-Event-ID", response_id))
        start_response(_STATUS[200], headers)
        return self._stream(sub, sock, direct, expires)

    def _stream(self, sub, sock, direct, expires):
        """The SSE body, on the connection's server thread: after the head and a first
        comment, it writes out the subscriber's backlog when there is one (publishers write
        the rest straight into the socket), and a heartbeat comment after `heartbeat` seconds
        without anything to send, until the client leaves, the subscriber is dropped, the
        token expires or the hub closes."""
        hub, stats = self.hub, self.hub.stats
        cpu = time.thread_time
        heartbeat = self.heartbeat
        idle = heartbeat if heartbeat > 0 else IDLE_CHECK_SECONDS
        beat = as_chunk(HEARTBEAT) if sub.chunked else HEARTBEAT
        cond, pending = sub.cond, sub.pending
        with self._streams_lock:
            self._streams += 1
            streams = self._streams
        try:
            if self.on_stream_open is not None:
                self.on_stream_open(streams)
            # A comment first, as the Mercure hub writes: the head goes out at once, through
            # the server (which then has nothing buffered: the socket is ours to write).
            yield HEARTBEAT
            if direct:
                sub.attach(sock.fileno())
            while True:
                timeout = idle
                if expires is not None:
                    timeout = min(timeout, expires - time.time())
                    if timeout <= 0:
                        return
                with cond:
                    if not (pending or sub.dropped or sub.closed):
                        cond.wait(timeout)
                    if sub.dropped or sub.closed:
                        break
                    batch = list(itertools.islice(pending, 256))
                if not batch:  # idle
                    if _peer_closed(sock):
                        return
                    if heartbeat > 0 and (expires is None or time.time() < expires):
                        sub.offer(beat, None)
                    continue
                t = cpu()
                if direct:
                    sock.sendall(b"".join(batch))
                else:
                    yield b"".join(batch)
                stats.add("write_cpu_seconds", cpu() - t, "writes")
                with cond:
                    for _ in batch:
                        pending.popleft()
                    if direct and not pending and not (sub.dropped or sub.closed):
                        sub.direct = True
            if sub.dropped and sock is not None:
                # Too slow: close the connection (a direct write may have stopped mid-chunk).
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        except OSError:
            return  # the client is gone (a direct write failed)
        finally:
            sub.end()
            with self._streams_lock:
                self._streams -= 1
            hub.disconnect(sub)
