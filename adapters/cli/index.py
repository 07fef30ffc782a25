"""The search index: `search`, `reindex`, `project`."""

from __future__ import annotations

import argparse

from convstore.adapters.cli.registry import (
    Progress,
    Session,
    command,
    json_flag,
    positive_number,
)
from convstore.adapters.terminal import render


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0.01 <= value <= 3600:  # NaN fails too
        raise argparse.ArgumentTypeError("must be between 0.01 and 3600 seconds")
    return value


def _projection_report(session: Session, report: object, as_json: bool) -> None:
    import msgspec

    from convstore.projections.follower import Report

    assert isinstance(report, Report)
    if as_json:
        session.out.json(msgspec.to_builtins(report))
    else:
        extra = "".join(
            f", {count} {what}"
            for count, what in (
                (report.gaps, "missing ids passed over"),
                (report.conflicts, "batches done by another worker"),
                (report.undecodable, "undecodable events passed over"),
            )
            if count
        )
        session.out.line(
            f"{report.name}: {report.events} events, {report.rows} rows, "
            f"position {report.position if report.position is not None else '-'}{extra}"
        )
    session.out.flush()


def _search_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "query", help='words (all of them), "a phrase", -word, a OR b, prefix*, NEAR(a b, N)'
    )
    parser.add_argument(
        "--limit", type=positive_number, default=20, help="show at most N hits (20)"
    )
    parser.add_argument(
        "--no-catch-up",
        dest="catch_up",
        action="store_false",
        help="search the index as it stands, without indexing newer events first",
    )
    json_flag(parser)


@command("search", "full-text search over every conversation", _search_arguments)
def search_command(args: argparse.Namespace, session: Session) -> int:
    """Brings the index up to the log's head (unless `--no-catch-up`: then says how far
    behind it is), then prints the best hits: conversation, turn, version, kind, and a
    snippet with the matches in [ ]."""
    import msgspec

    from convstore.projections import query, search

    query.parse_query(args.query)  # a query with nothing to search for fails before indexing
    store = session.store if args.catch_up else session.reader  # only indexing writes
    keeper = search.follower(store)
    if args.catch_up:
        progress = Progress(session.err, "indexing")
        try:
            keeper.catch_up(progress=lambda done, left: progress("events", done, done + left))
        finally:
            progress.clear()
    elif lag := keeper.lag():
        session.err.line(f"the index is {lag} events behind the log (`convstore project`)")
    hits = search.search(store, args.query, args.limit, catch_up=False)
    if args.json:
        session.out.json_array(msgspec.to_builtins(hit) for hit in hits)
        return 0
    for hit in hits:
        session.out.line(f"{hit.conversation_id}  {hit.turn_id or '-'}  v{hit.version}  {hit.kind}")
        session.out.line(f"    {render.one_line(hit.snippet)}")
    if not hits:
        session.err.line("no matches")
    return 0


@command("reindex", "rebuild the search index from the event log", json_flag)
def reindex_command(args: argparse.Namespace, session: Session) -> int:
    """Drops the index (rows and position, in one transaction) and rebuilds it, with
    progress on stderr when it is a terminal."""
    from convstore.projections import search

    progress = Progress(session.err, "reindex")
    try:
        report = search.follower(session.store).rebuild(
            progress=lambda done, left: progress("events", done, done + left)
        )
    finally:
        progress.clear()
    _projection_report(session, report, args.json)
    return 0


def _project_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep following the log until interrupted (a long-lived worker)",
    )
    parser.add_argument(
        "--interval",
        type=_seconds,
        default=1.0,
        metavar="S",
        help="seconds between polls of the log (SQLite) or retries (1)",
    )
    json_flag(parser)


@command("project", "bring the search index up to the log's head, or follow it", _project_arguments)
def project_command(args: argparse.Namespace, session: Session) -> int:
    """Once: catch up and report. `--follow`: keep the index current (PostgreSQL: woken by
    LISTEN/NOTIFY; SQLite: polling), one report line per batch, until SIGINT or SIGTERM
    (then exit 0 after the batch in hand)."""
    import signal
    import threading

    from convstore.projections import search

    follower = search.follower(session.store)
    if not args.follow:
        progress = Progress(session.err, "project")
        try:
            report = follower.catch_up(
                progress=lambda done, left: progress("events", done, done + left)
            )
        finally:
            progress.clear()
        _projection_report(session, report, args.json)
        return 0
    stop = threading.Event()
    handlers = {}
    for number in (signal.SIGINT, signal.SIGTERM):
        try:
            handlers[number] = signal.signal(number, lambda *_: stop.set())
        except ValueError:  # not the main thread: interrupt it some other way
            break
    try:
        follower.follow(
            stop,
            interval=args.interval,
            on_batch=lambda report: _projection_report(session, report, args.json),
        )
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
    return 0
