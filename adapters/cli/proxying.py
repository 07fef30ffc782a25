"""`convstore proxy`: record an application's provider traffic, unchanged, as it flows."""

from __future__ import annotations

import argparse

from convstore.adapters.cli.registry import (
    PROG,
    Session,
    command,
    listen_flag,
    positive_number,
    whole_number,
)
from convstore.domain.errors import ConfigurationError

DEFAULT_LISTEN = "127.0.0.1:8788"  # as `proxy.server.DEFAULT_LISTEN` (loaded on use)


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < 1e6:
        raise argparse.ArgumentTypeError(f"{text} is out of range (0 to 1000000 seconds)")
    return value


def _arguments(parser: argparse.ArgumentParser) -> None:
    listen_flag(parser, DEFAULT_LISTEN)
    parser.add_argument(
        "--upstream",
        action="append",
        default=[],
        metavar="PROVIDER=URL",
        help="where a provider's requests go (repeatable; default its public endpoint;"
        " Gemini on Vertex: google=https://REGION-aiplatform.googleapis.com)",
    )
    parser.add_argument(
        "--grace",
        type=whole_number,
        default=10,
        metavar="SECONDS",
        help="on SIGINT/SIGTERM, how long answers in flight may finish (default 10);"
        " those still open are recorded abandoned",
    )
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --listen on an address other machines reach (anyone reaching it can"
        " use it with their own key, and their conversations are recorded here)",
    )
    parser.add_argument(
        "--max-connections",
        type=positive_number,
        default=200,
        metavar="N",
        help="the most connections to the upstreams at once (default 200)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=_seconds,
        default=10.0,
        metavar="SECONDS",
        help="to connect to an upstream (default 10)",
    )
    parser.add_argument(
        "--read-timeout",
        type=_seconds,
        default=600.0,
        metavar="SECONDS",
        help="between two pieces of an upstream's answer (default 600)",
    )


@command(
    "proxy",
    "record an application's traffic: a reverse proxy for the providers' model endpoints",
    _arguments,
)
def proxy(args: argparse.Namespace, session: Session) -> int:
    """Serve until SIGINT or SIGTERM, then exit 0 (2: refused before listening, e.g. a
    non-loopback address without --allow-remote, an address in use, a bad --upstream;
    3: recordings still not committed after the wait)."""
    try:
        from convstore.adapters.proxy import routes, server
    except ModuleNotFoundError as error:  # the base install has no ASGI server
        raise ConfigurationError(
            f"convstore proxy needs the `proxy` extra ({error.name} is not installed): "
            "pip install 'convstore[proxy]'"
        ) from None

    host, port = server.listen_address(args.listen)
    if not server.is_loopback(host) and not args.allow_remote:
        raise ConfigurationError(
            f"--listen {args.listen}: {host} is not a loopback address; pass --allow-remote"
            " to let other machines use the proxy"
        )
    upstreams = routes.upstreams(args.upstream)
    limits = server.Limits(
        max_connections=args.max_connections,
        connect_timeout=args.connect_timeout,
        read_timeout=args.read_timeout,
    )
    store = session.store
    if not server.is_loopback(host):
        session.err.line(
            f"{PROG}: warning: listening on {host}, which other machines may reach: anyone"
            " who can connect uses the providers through it, and is recorded here"
        )

    def ready(address: str) -> None:
        session.out.line(f"{PROG} proxy listening on http://{address}")
        session.out.flush()

    lost = server.serve(
        store,
        host=host,
        port=port,
        upstreams=upstreams,
        grace=args.grace,
        limits=limits,
        ready=ready,
    )
    if lost:
        noun = "recording was" if lost == 1 else "recordings were"
        session.err.line(
            f"{PROG}: {lost} {noun} not committed in time (`convstore repair ID` closes a"
            " response left open)"
        )
        return 3
    return 0
