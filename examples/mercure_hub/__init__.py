"""A Mercure hub on topicmatch's SelectorIndex (skipfilter), with a brute-force mode to compare.

    python -m examples.mercure_hub --port 3000 --jwt-key '!ChangeThisMercureHubJWTSecretKey!'

See README.md beside this file.
"""

from .app import HubApp
from .hub import Hub
from .server import HubServer

__all__ = ["Hub", "HubApp", "HubServer", "make_server"]


def make_server(
    jwt_key: str,
    host: str = "127.0.0.1",
    port: int = 3000,
    matcher: str = "skipfilter",
    heartbeat: float = 15.0,
    history_size: int = 1000,
    queue_size: int = 1000,
    max_subscribers: int = 10_000,
    cache_size: int = 100_000,
    threads: int = 64,
    write_timeout: float = 10.0,
    subscriber_jwt_key: str | None = None,
    publish_origins: tuple[str, ...] = (),
    stats: bool = False,
) -> HubServer:
    """A hub, its WSGI application and its server, not yet started."""
    hub = Hub(matcher, history_size, queue_size, max_subscribers, cache_size)
    app = HubApp(
        hub,
        jwt_key,
        subscriber_jwt_key,
        heartbeat=heartbeat,
        publish_origins=publish_origins,
        stats=stats,
    )
    return HubServer(app, host, port, threads, write_timeout)
