"""``python -m sluice.embedded_mqtt --listen HOST:PORT``: the amqtt MQTT broker, for
``sluice local up`` when no ``--mqtt`` address is given.  Anonymous, in memory, until SIGTERM."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal

from amqtt.broker import Broker


async def serve(listen: str) -> None:
    broker = Broker(
        {
            "listeners": {"default": {"type": "tcp", "bind": listen}},
            "auth": {"allow-anonymous": True, "plugins": ["auth_anonymous"]},
            "topic-check": {"enabled": False},
        }
    )
    await broker.start()
    logging.getLogger("sluice.mqtt").info("embedded MQTT broker (amqtt) listening on %s", listen)
    stopped = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stopped.set)
    await stopped.wait()
    await broker.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sluice.embedded_mqtt")
    parser.add_argument("--listen", default="127.0.0.1:1883", help="host:port")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("sluice").setLevel(logging.INFO)
    asyncio.run(serve(args.listen))


if __name__ == "__main__":
    main()
