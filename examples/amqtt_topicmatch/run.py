"""Runs amqtt 0.12.1 routed by topicmatch (or, with --stock, amqtt as it ships) until Ctrl-C.

    .venv/bin/python examples/amqtt_topicmatch/run.py --port 1883

The configuration is amqtt's: its default (a TCP listener, anonymous clients allowed, the $SYS
plugin) or the YAML file given with -c, in the format of amqtt's own `amqtt -c`. --host and
--port set the default listener's address (127.0.0.1:1883, or the -c file's; port 0
takes a free port). Once listening, one line goes to stdout: `listening on HOST:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys
import warnings
from pathlib import Path

import amqtt
from amqtt.broker import Broker
from amqtt.utils import read_yaml_config

sys.path.insert(0, str(Path(__file__).resolve().parent))
from topicmatch_broker import TopicmatchBroker  # noqa: E402


def config_from(args: argparse.Namespace) -> dict:
    if args.config:
        config = read_yaml_config(args.config)
        if config is None:
            sys.exit(f"{args.config}: not a valid YAML configuration")
        default = config.setdefault("listeners", {}).setdefault("default", {"type": "tcp"})
        host, _, port = default.get("bind", "0.0.0.0:1883").rpartition(":")
    else:
        config = read_yaml_config(Path(amqtt.__file__).parent / "scripts" / "default_broker.yaml")
        default = config["listeners"]["default"]
        host, port = "127.0.0.1", "1883"
    host = args.host if args.host is not None else host
    port = args.port if args.port is not None else port
    default["bind"] = f"{host}:{port}"
    return config


async def serve(args: argparse.Namespace) -> None:
    cls = Broker if args.stock else TopicmatchBroker
    with warnings.catch_warnings():  # amqtt 0.12.1's notice that psutil becomes an extra
        warnings.filterwarnings("ignore", message=".*psutil", category=DeprecationWarning)
        broker = cls(config_from(args))
    await broker.start()
    for server in broker._servers.values():
        for sock in getattr(server.instance, "sockets", None) or ():
            host, port = sock.getsockname()[:2]
            print(f"listening on {host}:{port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await broker.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", help="address of the default listener (127.0.0.1)")
    parser.add_argument("--port", type=int, help="port of the default listener (1883)")
    parser.add_argument("-c", "--config", help="amqtt YAML configuration file")
    parser.add_argument("--stock", action="store_true", help="run amqtt unchanged, to compare")
    parser.add_argument("-d", "--debug", action="store_true", help="debug logging")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.DEBUG if args.debug else logging.WARNING,
        format="[%(asctime)s] %(name)s :: %(levelname)s - %(message)s",
    )
    logging.getLogger("transitions").setLevel(logging.WARNING)
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
