"""Talking in a provider's wire format: `ingest`, `replay`, `ask`, `repair`, `answer`."""

from __future__ import annotations

import argparse
import signal
import sys
from typing import TYPE_CHECKING, Any

from convstore.adapters.cli.integrity import EXIT_BROKEN, chain_warning
from convstore.adapters.cli.registry import (
    PROG,
    PROVIDER_METAVAR,
    Progress,
    Session,
    cfg_flag,
    command,
    error_detail,
    json_flag,
    path,
    positive_number,
    provider_name,
    read_file,
    resolve_id,
)
from convstore.adapters.terminal import render
from convstore.domain.errors import ConfigurationError, ConvstoreError, DecodeError

if TYPE_CHECKING:
    from pathlib import Path

    from convstore.adapters.recording import batch, jobs
    from convstore.domain import ConversationId
    from convstore.domain.calls import UnansweredCall


def _ingest_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--provider",
        type=provider_name,
        required=True,
        metavar=PROVIDER_METAVAR,
        help="the wire format (gemini: google)",
    )
    parser.add_argument(
        "--request",
        type=path,
        action="append",
        default=[],
        metavar="REQ",
        help="the captured request body that produced a response FILE: repeat it, one per"
        " FILE in the same order (- reads standard input); its messages are recorded first",
    )
    parser.add_argument(
        "--conversation", metavar="ID", help="ingest every response FILE into this conversation"
    )
    parser.add_argument("--title", help="the title of a new conversation")
    parser.add_argument(
        "--server",
        metavar="HOST",
        help="openai-chat: the server the responses came from (its base_url host, e.g."
        " localhost:11434, or the base_url itself); their payloads are bound to it",
    )
    parser.add_argument(
        "files",
        nargs="+",
        type=path,
        metavar="FILE",
        help="a response body (SSE or JSON; - reads standard input), each its own"
        " conversation; or a capture folder (N.request.json, N.response.*, N.meta.json), or"
        " a folder of them, each folder one conversation",
    )
    cfg_flag(parser)
    json_flag(parser)


@command("ingest", "record captured responses, each capture a conversation", _ingest_arguments)
def ingest(args: argparse.Namespace, session: Session) -> int:
    """Exit 0; 3 when a response ended failed or abandoned; 2 for a file holding no
    response or a capture that failed (the others go on); 4 for a stored response id with
    different content: the worst capture's. Refused (exit 2, nothing written) before the
    first write: a missing file, an unreadable folder, a request of the wrong shape, a
    `--request` count that does not match the files. 130 or 143 when a signal stopped it
    (the capture being read is recorded as far as it was read)."""
    from convstore.adapters.recording import batch
    from convstore.adapters.wire.providers import serving

    server = _server(args.provider, args.server)
    conversation = resolve_id(session.store, args.conversation) if args.conversation else None
    with (
        serving(server),
        batch.planned(
            args.provider,
            args.files,
            args.request,
            into_one=conversation is not None,
            stdin=sys.stdin.buffer,
        ) as captures,
    ):  # a refusal: the program prints it (`--json`: error, error_detail)
        progress = Progress(session.err, "ingest")
        try:
            report = batch.run(
                session.service,
                args.provider,
                captures,
                conversation_id=conversation,
                title=args.title,
                progress=lambda done, total: progress("captures", done, total),
                grouped=session.store.grouped(),  # no one waits on each capture's commit
            )
        finally:
            progress.clear()
    if args.json:
        session.out.json(_ingest_data(report, len(captures)))
    else:
        for item in report.done:
            session.out.lines(_ingest_lines(item.report))
    for item in report.done:
        if item.report.error is not None:
            session.err.line(f"{PROG}: error: {render.one_line(item.report.error)}")
    if not args.json:
        session.out.line(batch.summary_line(report.summary(len(captures))))
    if report.interrupted is not None:
        stopped = "interrupted" if report.interrupted == signal.SIGINT else "terminated"
        kept = any(item.report.responses for item in report.done)
        session.err.line(f"{PROG}: {stopped}{'; what arrived is recorded' if kept else ''}")
        return 128 + report.interrupted
    return report.exit_code


def _server(provider: str, given: str | None) -> str:
    """The `--server` host, read (exit 2 for a provider whose payloads name no server)."""
    if given is None:
        return ""
    if provider != "openai-chat":
        raise ConfigurationError(f"--server applies to provider openai-chat, not {provider!r}")
    from convstore.adapters.openai_chat.context import server_host

    return server_host(given)


def _ingest_data(report: batch.BatchReport, total: int) -> dict[str, object]:
    """`ingest --json`: one item per capture and the summary; for one capture, its
    `conversation_id` and `responses` (and `error`) at the top level too, as before."""

    items = [_capture_data(item) for item in report.done]
    data: dict[str, object] = {"captures": items, "summary": report.summary(total)}
    if total == 1 and items:
        data |= {key: value for key, value in items[0].items() if key != "path"}
    if report.interrupted is not None:
        data["interrupted"] = signal.Signals(report.interrupted).name
    return data


def _capture_data(item: batch.Done) -> dict[str, object]:
    """One capture's item: its path, conversation and responses, and its error if any."""
    import msgspec

    done = item.report
    data: dict[str, object] = {
        "path": item.capture.name,
        "conversation_id": None if done.conversation_id is None else str(done.conversation_id),
        "responses": [msgspec.to_builtins(outcome) for outcome in done.responses],
    }
    if done.error is not None:
        data["error"] = done.error
        data["error_detail"] = {"type": done.error_type, "message": done.error}
    return data


def _ingest_lines(report: jobs.IngestReport) -> list[str]:
    """A capture's lines: its conversation, the request messages recorded first, and
    what became of each response."""
    from convstore.adapters.terminal import values

    lines = [] if report.conversation_id is None else [f"conversation {report.conversation_id}"]
    if report.history_messages:
        count = report.history_messages
        lines.append(f"  {count} request message{'s' if count != 1 else ''} recorded first")
    lines += [values.outcome_line(o, report.conversation_id) for o in report.responses]
    return lines


def _replay_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id")
    parser.add_argument(
        "--to",
        type=provider_name,
        required=True,
        metavar=PROVIDER_METAVAR,
        dest="provider",
        help="the provider to continue on",
    )
    parser.add_argument("--user", metavar="TEXT", help="append the next user message")
    parser.add_argument("--model", help="the target model (default: configured or recorded)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print what the request would leave out, not the request",
    )
    cfg_flag(parser)
    json_flag(parser)


@command("replay", "print the native request that continues a conversation", _replay_arguments)
def replay(args: argparse.Namespace, session: Session) -> int:
    """The request body as JSON on stdout (never writes to the store); `--dry-run` prints
    the loss report instead: what the request leaves out, the hosted tools kept declared
    for pending work, and the client tool calls without a result (the provider refuses
    the request until each has one). A conversation whose stored chain does not hold is
    built all the same, with a warning on stderr, and the exit is 5."""
    import msgspec

    from convstore.adapters.recording import jobs
    from convstore.adapters.terminal import values
    from convstore.adapters.wire.consent import KEPT_DECLARED
    from convstore.domain.calls import unanswered_calls
    from convstore.projections import chain

    conversation = resolve_id(session.reader, args.id)
    events = session.reader.service.history(conversation)
    status = chain.chain_status(session.reader, conversation)
    if not status.intact:  # what is built is what is stored: said, and exit 5 at the end
        session.err.line(chain_warning(status, conversation))
    code = 0 if status.intact else EXIT_BROKEN
    request = jobs.replay(
        session.reader.service,
        conversation,
        args.provider,
        cfg=args.cfg,
        model=args.model,
        user=args.user,
        events=events,
    )
    if not args.dry_run:
        session.out.json_text(request.to_json().decode())
        return code
    calls = unanswered_calls(events)
    if args.json:
        losses: list[Any] = [msgspec.to_builtins(loss) for loss in request.losses]
        session.out.json(losses + [_unanswered_data(call) for call in calls])
        return code
    left_out = [loss for loss in request.losses if loss.kind != KEPT_DECLARED]
    if not left_out:
        refused = " (but see below: the provider refuses it as it stands)" if calls else ""
        session.out.line(f"nothing is left out replaying to {args.provider}{refused}")
    session.out.lines(values.loss_line(loss) for loss in left_out)
    session.out.lines(
        values.kept_line(loss) for loss in request.losses if loss.kind == KEPT_DECLARED
    )
    session.out.lines(_unanswered_line(call, conversation) for call in calls)
    return code


UNANSWERED = "unanswered_call"
"""The `kind` of a client tool call without a result in `replay --dry-run --json`."""


def _unanswered_data(call: UnansweredCall) -> dict[str, Any]:
    """A call without a result, as a `replay --dry-run --json` item (a loss's keys, and
    the call's)."""
    return {
        "version": call.version,
        "event": "ToolCallRequested",
        "kind": UNANSWERED,
        "reason": f"client tool call {call.call_id} ({call.name}) has no result: the "
        "provider refuses the request until it has one",
        "call_id": call.call_id,
        "name": call.name,
        "response_id": call.response_id,
    }


def _unanswered_line(call: UnansweredCall, conversation: ConversationId) -> str:
    from convstore.adapters.terminal import values

    return (
        f"{values.unanswered_line(call)}: `{PROG} answer {conversation} {call.call_id} --text"
        " …` records it"
    )


def _ask_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("text", help="the question")
    parser.add_argument(
        "--provider",
        type=provider_name,
        default=None,
        metavar=PROVIDER_METAVAR,
        help="default: the conversation's provider, else anthropic",
    )
    parser.add_argument("--conversation", metavar="ID", help="continue this conversation")
    parser.add_argument("--model", help="the model (default: configured or recorded)")
    parser.add_argument("--title", help="the title of a new conversation")
    shown = parser.add_mutually_exclusive_group()
    shown.add_argument("--quiet", action="store_true", help="print only the answer")
    shown.add_argument(
        "--show-reasoning", action="store_true", help="show all reasoning (default: its first line)"
    )
    parser.add_argument(
        "--continue-on-length",
        action="store_true",
        help="continue an answer cut at its token limit, where the provider can (anthropic)",
    )
    cfg_flag(parser)
    json_flag(parser)


@command("ask", "ask a provider and record its response as it streams", _ask_arguments)
def ask(args: argparse.Namespace, session: Session) -> int:
    """The answer as it streams; exit 0, 3 when the last response ended failed or
    abandoned (what arrived is kept), 130 or 143 when a signal stopped it (what arrived is
    recorded first). Refused (exit 2) before anything is sent or written."""
    import msgspec

    from convstore.adapters.recording import asking  # here: other commands send nothing
    from convstore.adapters.terminal.live import LiveView

    conversation = resolve_id(session.reader, args.conversation) if args.conversation else None
    view = (
        None
        if args.json
        else LiveView(
            session.out, err=session.err, show_reasoning=args.show_reasoning, quiet=args.quiet
        )
    )
    try:
        provider = args.provider or _recorded_provider(session, conversation) or "anthropic"
        report = asking.ask(
            session.reader.service if conversation is not None else None,
            provider,
            args.text,
            writer=lambda: session.service,  # opened once the provider answers
            conversation_id=conversation,
            cfg=args.cfg,
            model=args.model,
            title=args.title,
            watcher=view,
            continue_on_length=args.continue_on_length,
        )
    except ConvstoreError as error:
        if args.json:
            session.out.json(
                {
                    "conversation_id": None,
                    "responses": [],
                    "error": str(error),
                    "error_detail": error_detail(error),
                }
            )
        raise
    if view is None:  # the view printed them as they came
        for note in report.notes:
            session.err.line(f"{PROG}: note: {render.one_line(note)}")
    failure = report.error
    if failure is not None:
        status = f"HTTP {failure.status} " if failure.status is not None else ""
        session.err.line(
            f"{PROG}: {provider} answered {status}{render.one_line(failure.type)}: "
            f"{render.shorten(failure.message, 500)}"
        )
    if args.json:
        data: dict[str, object] = {
            "conversation_id": str(report.conversation_id),
            "response": msgspec.to_builtins(report.response),
            "responses": [msgspec.to_builtins(outcome) for outcome in report.responses],
            "abandoned_activities": report.abandoned,
        }
        if report.interrupted is not None:
            data["interrupted"] = signal.Signals(report.interrupted).name
        if failure is not None:
            status = f"HTTP {failure.status} " if failure.status is not None else ""
            data["error"] = f"{status}{failure.type}: {failure.message}"
            data["error_detail"] = {
                "type": failure.type,
                "message": failure.message,
                "status": failure.status,
            }
        session.out.json(data)
    if report.interrupted is not None:
        stopped = "interrupted" if report.interrupted == signal.SIGINT else "terminated"
        session.err.line(f"{PROG}: {stopped}; what arrived is recorded")
        return 128 + report.interrupted
    return 0 if report.response.ended == "completed" else 3


def _recorded_provider(session: Session, conversation: ConversationId | None) -> str | None:
    from convstore.domain import ResponseStarted

    if conversation is None:
        return None
    providers = [
        e.provider
        for e in session.reader.service.history(conversation)
        if isinstance(e, ResponseStarted) and e.origin == "provider"
    ]
    return providers[-1] if providers else None


def _fork_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation to fork")
    parser.add_argument(
        "--at",
        type=positive_number,
        required=True,
        metavar="VERSION",
        help="the version to go on from (an originator_version of `show ID --json`, outside a"
        " response)",
    )
    parser.add_argument("--title", help="the new conversation's title (default: the parent's)")
    json_flag(parser)


@command("fork", "start a conversation that goes on from another's version", _fork_arguments)
def fork(args: argparse.Namespace, session: Session) -> int:
    """A new conversation recorded as forked from (ID, VERSION): it stores that reference,
    never a copy; its readings fold ID up to VERSION, then its own events. Exit 2 (nothing
    written) for a version ID does not have, or one inside a response."""
    parent = resolve_id(session.store, args.id)
    forked = session.service.fork(parent, at=args.at, title=args.title or "")
    if args.json:
        session.out.json(
            {"conversation_id": str(forked), "forked_from": str(parent), "forked_at": args.at}
        )
    else:
        session.out.line(f"conversation {forked}")
        session.out.line(f"  forked from {parent} at version {args.at}")
    return 0


def _repair_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id")
    parser.add_argument(
        "--force",
        action="store_true",
        help="close the open response even though its writer is alive (holds its lock)",
    )
    json_flag(parser)


@command(
    "repair", "close an interrupted response and answer orphaned tool calls", _repair_arguments
)
def repair(args: argparse.Namespace, session: Session) -> int:
    """Append the repairs (never rewrites): the open response ends abandoned, every
    unanswered client tool call gets a synthetic error result. A response whose writer is
    alive is refused (exit 2, nothing written) unless `--force`."""
    from convstore.adapters.terminal import transcript, values

    recorded = session.service.repair(resolve_id(session.store, args.id), force=args.force)
    if args.json:
        session.out.json_array(values.to_data(event) for event in recorded)
    elif not recorded:
        session.out.line("nothing to repair")
    else:
        session.out.lines(transcript.transcript(recorded))
    return 0


def _answer_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("id", help="the conversation's id")
    parser.add_argument(
        "call_id",
        metavar="CALL_ID",
        help="the client tool call to answer (`replay ID --to PROVIDER --dry-run` lists the"
        " calls without a result)",
    )
    result = parser.add_mutually_exclusive_group(required=True)
    result.add_argument("--text", metavar="T", help="the result")
    result.add_argument(
        "--result-file", type=path, metavar="FILE", help="the result: the file's text (UTF-8)"
    )
    result.add_argument("--error", metavar="T", help="an error result: the tool failed")
    json_flag(parser)


@command("answer", "record the result of a client tool call", _answer_arguments)
def answer(args: argparse.Namespace, session: Session) -> int:
    """Append the call's ToolCallResponded (an error result with `--error`), so the next
    request is valid. Exit 2, nothing written: a call id the conversation has no client
    tool call for (a hosted activity's included), a call already answered, a file that
    cannot be read or is not UTF-8 text, or a live writer holding a response open in the
    conversation (a response whose writer is gone is closed first)."""
    import msgspec

    from convstore.adapters.terminal import transcript, values
    from convstore.domain import CallId
    from convstore.domain.calls import unanswered_calls

    conversation = resolve_id(session.store, args.id)
    service = session.service
    if args.result_file is not None:
        content = _result_text(args.result_file, service.max_event_bytes)
    else:
        content = args.error if args.error is not None else args.text
    is_error = args.error is not None
    recorded = service.answer(conversation, CallId(args.call_id), content, is_error=is_error)
    left = unanswered_calls(service.history(conversation))
    if args.json:
        session.out.json(
            {
                "conversation_id": str(conversation),
                "call_id": args.call_id,
                "is_error": is_error,
                "events": [values.to_data(event) for event in recorded],
                "unanswered": [msgspec.to_builtins(call) for call in left],
            }
        )
    else:
        session.out.lines(transcript.transcript(recorded))
        session.out.lines(f"still without a result: {call.call_id} ({call.name})" for call in left)
    return 0


def _result_text(path: Path, max_bytes: int | None) -> str:
    """The text of a result file, bounded like every input (`max_bytes`: the largest
    event the store takes); DecodeError naming it when it cannot be read or is not
    UTF-8."""
    data = read_file(path, max_bytes=max_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DecodeError(
            f"{path}: is not UTF-8 text ({error.reason} at byte {error.start})"
        ) from None
