"""`convstore serve`: the web viewer, read-only, in a browser."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from convstore.adapters.cli.registry import PROG, Session, command, listen_flag, read_file
from convstore.domain.errors import ConfigurationError

DEFAULT_LISTEN = "127.0.0.1:8787"  # as `web.server.DEFAULT_LISTEN` (loaded on use)
TOKEN_VARIABLE = "CONVSTORE_VIEWER_TOKEN"
MIN_TOKEN = 16


def _arguments(parser: argparse.ArgumentParser) -> None:
    listen_flag(parser, DEFAULT_LISTEN)
    parser.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --listen on an address other machines reach (needs an access token;"
        " put TLS in front of it)",
    )
    parser.add_argument(
        "--allowed-host",
        action="append",
        default=[],
        metavar="NAME",
        help="also answer requests for this host name (repeatable; e.g. the name a TLS"
        " proxy in front serves)",
    )
    parser.add_argument(
        "--token-file",
        type=Path,
        metavar="FILE",
        help=f"the access token, read from FILE (default: ${TOKEN_VARIABLE}); required"
        " with --allow-remote",
    )
    parser.add_argument(
        "--secure-cookie",
        action="store_true",
        help="send the sign-in cookie over HTTPS only (behind a TLS proxy)",
    )


def _token(args: argparse.Namespace) -> str | None:
    if args.token_file is not None:
        token = read_file(args.token_file, max_bytes=4096).decode("utf-8", "replace").strip()
        source = f"--token-file {args.token_file}"
    else:
        token = os.environ.get(TOKEN_VARIABLE, "").strip()
        source = f"${TOKEN_VARIABLE}"
    if args.token_file is None and not token:
        return None
    if len(token) < MIN_TOKEN or not token.isprintable() or " " in token:
        raise ConfigurationError(
            f"{source}: the access token must be at least {MIN_TOKEN} printable characters"
            " without spaces (e.g. `python3 -c 'import secrets; print(secrets.token_urlsafe())'`)"
        )
    return token


@command("serve", "browse, search and audit conversations in a browser (read-only)", _arguments)
def serve(args: argparse.Namespace, session: Session) -> int:
    """Serve the viewer until SIGINT or SIGTERM, then exit 0 (2: refused before listening,
    e.g. another address without --allow-remote and a token, an address in use, a store
    that does not exist). It opens the store read-only: nothing it does can write."""
    try:
        from convstore.adapters.web import server
    except ModuleNotFoundError as error:  # the base install has no ASGI server
        raise ConfigurationError(
            f"convstore serve needs the `web` extra ({error.name} is not installed): "
            "pip install 'convstore[web]'"
        ) from None
    from convstore.adapters.http import serving

    host, port = serving.listen_address(args.listen, example=DEFAULT_LISTEN)
    token = _token(args)
    remote = not serving.is_loopback(host)
    if remote and not args.allow_remote:
        raise ConfigurationError(
            f"--listen {args.listen}: {host} is not a loopback address; pass --allow-remote"
            f" (with an access token: --token-file or ${TOKEN_VARIABLE}) to serve other machines"
        )
    if remote and token is None:
        raise ConfigurationError(
            f"--allow-remote needs an access token: --token-file FILE or ${TOKEN_VARIABLE}"
        )
    store = session.reader
    if remote:
        session.err.line(
            f"{PROG}: warning: serving on {host}, which other machines may reach: every"
            " request needs the token; put TLS in front (see the README)"
        )

    def ready(address: str) -> None:
        session.out.line(f"{PROG} viewer on http://{address} (read-only)")
        session.out.flush()

    server.serve(
        store,
        host=host,
        port=port,
        allowed=args.allowed_host,
        token=token,
        secure_cookie=args.secure_cookie,
        ready=ready,
    )
    return 0
