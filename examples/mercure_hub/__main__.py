"""Command line: run the hub, or make a token.

python -m examples.mercure_hub --port 3000 --jwt-key KEY [--matcher bruteforce]
python -m examples.mercure_hub token --jwt-key KEY --publish '*'
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import jwt

from . import make_server

DEFAULT_KEY_ENV = "MERCURE_JWT_KEY"


def _serve(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m examples.mercure_hub", description=__doc__)
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (127.0.0.1)")
    p.add_argument("--port", type=int, default=3000, help="port (3000; 0 for any free port)")
    p.add_argument(
        "--jwt-key",
        default=os.environ.get(DEFAULT_KEY_ENV),
        help=f"HMAC key of publishers' (and subscribers') JWTs (or ${DEFAULT_KEY_ENV})",
    )
    p.add_argument("--subscriber-jwt-key", help="HMAC key of subscribers' JWTs, if different")
    p.add_argument("--matcher", choices=("skipfilter", "bruteforce"), default="skipfilter")
    p.add_argument("--heartbeat", type=float, default=15.0, help="seconds; 0 turns them off")
    p.add_argument("--history", type=int, default=1000, help="updates kept for Last-Event-ID")
    p.add_argument("--queue-size", type=int, default=1000, help="updates a subscriber may lag")
    p.add_argument("--max-subscribers", type=int, default=10_000)
    p.add_argument(
        "--cache-size",
        type=int,
        default=100_000,
        help="skipfilter: topics cached; bruteforce: (selector, topic) answers cached",
    )
    p.add_argument("--threads", type=int, default=64, help="server threads at start (grows)")
    p.add_argument("--write-timeout", type=float, default=10.0, help="seconds per socket write")
    p.add_argument(
        "--publish-origin",
        action="append",
        default=[],
        help="origin allowed to publish with the cookie (repeat; '*' for any)",
    )
    p.add_argument("--stats", action="store_true", help="serve counters as JSON at /stats")
    args = p.parse_args(argv)
    if not args.jwt_key:
        p.error(f"--jwt-key (or ${DEFAULT_KEY_ENV}) is required")
    if len(args.jwt_key.encode()) < 32:
        print("warning: a JWT key under 32 bytes is weak for HS256", file=sys.stderr)
    server = make_server(
        args.jwt_key,
        host=args.host,
        port=args.port,
        matcher=args.matcher,
        heartbeat=args.heartbeat,
        history_size=args.history,
        queue_size=args.queue_size,
        max_subscribers=args.max_subscribers,
        cache_size=args.cache_size,
        threads=args.threads,
        write_timeout=args.write_timeout,
        subscriber_jwt_key=args.subscriber_jwt_key,
        publish_origins=tuple(args.publish_origin),
        stats=args.stats,
    )
    server.server.prepare()
    print(
        f"Mercure hub ({args.matcher}) on {server.url}/.well-known/mercure, "
        f"demo page {server.url}/",
        flush=True,
    )
    try:
        server.server.serve()
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
    return 0


def _token(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m examples.mercure_hub token", description="Print a JWT for the hub."
    )
    p.add_argument("--jwt-key", default=os.environ.get(DEFAULT_KEY_ENV))
    p.add_argument("--publish", action="append", default=[], help="selector (repeat)")
    p.add_argument("--subscribe", action="append", default=[], help="selector (repeat)")
    p.add_argument("--ttl", type=int, default=3600, help="seconds until it expires (0: never)")
    args = p.parse_args(argv)
    if not args.jwt_key:
        p.error(f"--jwt-key (or ${DEFAULT_KEY_ENV}) is required")
    mercure = {}
    if args.publish:
        mercure["publish"] = args.publish
    if args.subscribe:
        mercure["subscribe"] = args.subscribe
    claims: dict = {"mercure": mercure}
    if args.ttl:
        claims["exp"] = int(time.time()) + args.ttl
    print(jwt.encode(claims, args.jwt_key, algorithm="HS256"))
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "token":
        return _token(argv[1:])
    return _serve(argv)


if __name__ == "__main__":
    sys.exit(main())
