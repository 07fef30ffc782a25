"""Batch ingest: capture folders, folders of them and loose response files, each its own
conversation (`convstore ingest`).

`planned` reads what a batch needs before its first write: every path is listed and
checked, every request read and checked against the provider's shape, the `--request`
count matched, standard input read once; a problem is a ConvstoreError (exit 2) and
nothing is written. `run` then ingests capture by capture through `jobs.ingest` under one
`live.Interrupts`: a capture that fails is reported in its item and the others go on; a
signal stops the batch once the capture being read is recorded as far as it was read.

A capture folder holds, for each exchange N in order, `N.request.json` (optional),
`N.response.*` and `N.meta.json` (optional: `status`, the HTTP status; `path`, the
endpoint: a call that is not a model call, such as a file upload, is skipped).
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import BinaryIO, Final, Protocol

from convstore.adapters.recording import jobs
from convstore.adapters.recording.jobs import Exchange, IngestReport
from convstore.adapters.recording.live import Interrupts
from convstore.domain.errors import ConfigurationError, ConvstoreError, DecodeError
from convstore.domain.service import ConversationService
from convstore.domain.vocabulary import ConversationId

STDIN: Final = "-"
"""A FILE or a `--request` that reads standard input."""
MODEL_CALLS: Final = (
    "/v1/messages",
    "/v1/responses",
    "/chat/completions",
    ":generateContent",
    ":streamGenerateContent",
)
"""How the endpoint of a model call ends (`N.meta.json`'s `path`)."""
_RESPONSE: Final = re.compile(r"(\d+)\.response\.")
_SEVERITY: Final = {0: 0, 3: 1, 2: 2, 4: 3}
"""Exit codes from the mildest: a batch exits with its worst capture's."""


@dataclass(frozen=True)
class Capture:
    """What becomes one conversation: a capture folder's exchanges, or loose files."""

    name: str
    """The folder or the file, as messages name it."""
    exchanges: tuple[Exchange, ...]
    title: str | None = None


@dataclass(frozen=True)
class Done:
    """One capture and what its ingest did."""

    capture: Capture
    report: IngestReport


@dataclass
class BatchReport:
    """What a batch did: each capture's report, and the signal that stopped it."""

    done: list[Done] = field(default_factory=list)
    interrupted: int | None = None

    @property
    def exit_code(self) -> int:
        """The worst capture's exit code (4, then 2, then 3), 0 when all completed."""
        codes = [item.report.exit_code for item in self.done]
        return max(codes, key=lambda code: _SEVERITY.get(code, 0), default=0)

    def summary(self, total: int) -> dict[str, int]:
        """The counts of the one-line summary, over `total` captures planned."""
        outcomes = [outcome for item in self.done for outcome in item.report.responses]
        ids = {item.report.conversation_id for item in self.done}
        return {
            "captures": total,
            "conversations": len(ids - {None}),
            "recorded": sum(not outcome.already_stored for outcome in outcomes),
            "already_stored": sum(outcome.already_stored for outcome in outcomes),
            "failed": sum(item.report.error is not None for item in self.done),
        }


def summary_line(counts: dict[str, int]) -> str:
    """`12 captures: 11 conversations, 40 responses recorded, 3 already stored, 1 failed`."""

    def n(count: int, word: str) -> str:
        return f"{count:,} {word}{'' if count == 1 else 's'}"

    return (
        f"{n(counts['captures'], 'capture')}: {n(counts['conversations'], 'conversation')}, "
        f"{n(counts['recorded'], 'response')} recorded, {counts['already_stored']:,} already "
        f"stored, {counts['failed']:,} failed"
    )


@contextmanager
def planned(
    provider: str,
    files: Sequence[Path],
    requests: Sequence[Path] = (),
    *,
    into_one: bool = False,
    stdin: BinaryIO | None = None,
) -> Iterator[list[Capture]]:
    """The captures `files` make, checked whole before anything is written.

    A folder holding `N.response.*` files is one capture; a folder of such folders (at any
    depth, symbolic links not followed) gives one per folder. Each loose file is a capture
    of its own, or, `into_one` (`--conversation`), all of them one. `requests` go with the
    loose files by position (as many, or none). `-` reads `stdin` (once in all), copied to
    a temporary file that lives as long as the plan.
    """
    if [*map(str, files), *map(str, requests)].count(STDIN) > 1:
        raise ConfigurationError("standard input (-) can be read only once")
    with tempfile.TemporaryDirectory(prefix="convstore-ingest-") as spool:
        read = _Stdin(stdin, Path(spool) / "stdin")
        loose = [path for path in files if str(path) == STDIN or not path.is_dir()]
        if requests and len(requests) != len(loose):
            raise ConfigurationError(
                f"{len(requests)} --request for {len(loose)} response file"
                f"{'' if len(loose) == 1 else 's'}: give one per FILE, in the same order"
                " (a capture folder holds its own)"
            )
        bodies = [_loose_request(provider, path, read) for path in requests]
        captures: list[Capture] = []
        singles: list[Capture] = []
        for path in files:
            if str(path) != STDIN and path.is_dir():
                captures += _folder_captures(provider, path, top=True)
                continue
            request = bodies[len(singles)] if bodies else None
            singles.append(_loose(path, request, read))
            captures.append(singles[-1])
        if into_one and singles:
            if len(singles) != len(captures):
                raise ConfigurationError(
                    "--conversation takes response files or one capture folder, not both"
                )
            exchanges = tuple(e for capture in singles for e in capture.exchanges)
            captures = [Capture(singles[0].name, exchanges, singles[0].title)]
        elif into_one and len(captures) > 1:
            raise ConfigurationError(
                f"--conversation takes one capture; {len(captures)} were given"
            )
        yield captures


class CommitGroup(Protocol):
    """What a batch needs of a store's commit group (`storage.groups`): to learn when
    what it recorded so far is committed, or lost."""

    def after_commit(
        self, callback: Callable[[], None], lost: Callable[[BaseException], None] | None = None
    ) -> None: ...


def run(
    service: ConversationService,
    provider: str,
    captures: Sequence[Capture],
    *,
    conversation_id: ConversationId | None = None,
    title: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    grouped: AbstractContextManager[CommitGroup] | None = None,
) -> BatchReport:
    """Ingest each capture into a conversation of its own (`conversation_id`: into that one,
    for a plan of one capture); a capture that fails is reported and the next goes on.

    `grouped`: the store's commit group, whose transaction commits several captures'
    appends together; a capture is counted done (in the report, and by `progress`) only
    once the commit holding it returned, and one whose commit failed is reported failed
    ("ingest it again": nothing of it was kept)."""
    batch = BatchReport()

    def done(item: Done) -> None:
        batch.done.append(item)
        if progress is not None:
            progress(len(batch.done), len(captures))

    def lost(item: Done, error: BaseException) -> None:
        message = f"not kept, its commit failed: {error} (ingest it again)"
        failed = IngestReport(conversation_id=conversation_id).fail(
            item.capture.name, _Lost(message), 2
        )
        done(Done(item.capture, failed))

    with Interrupts() as interrupts:
        try:
            with grouped if grouped is not None else nullcontext() as group:
                for capture in captures:
                    try:
                        report = jobs.ingest(
                            service,
                            provider,
                            capture.exchanges,
                            conversation_id=conversation_id,
                            title=title or capture.title,
                            interrupts=interrupts,
                        )
                    except ConvstoreError as error:  # e.g. a race lost again and again
                        report = IngestReport(conversation_id=conversation_id).fail(
                            capture.name, error, 2
                        )
                    item = Done(capture, report)
                    if group is None:
                        done(item)
                    else:
                        group.after_commit(partial(done, item), partial(lost, item))
                    if interrupts.signum is not None:
                        break
        except ConvstoreError:  # the last commit failed: each capture it held was reported
            pass
        batch.interrupted = interrupts.signum
    return batch


class _Lost(ConvstoreError):
    """A capture recorded in a commit group whose commit failed."""


class _Stdin:
    """Standard input, copied once to a file on first use."""

    def __init__(self, stream: BinaryIO | None, target: Path) -> None:
        self.stream, self.target = stream, target

    def __call__(self) -> Path:
        if self.stream is None:
            raise ConfigurationError("standard input (-) cannot be read here")
        try:
            jobs.spool(self.stream, self.target)
        except DecodeError as error:
            raise DecodeError(f"standard input (-): {error}") from None
        return self.target


def _loose(path: Path, request: tuple[bytes, str] | None, stdin: Callable[[], Path]) -> Capture:
    """A response file given by itself (`-`: standard input), with its request."""
    body, request_name = request if request is not None else (None, "--request")
    if str(path) == STDIN:
        exchange = Exchange(stdin(), body, request_name=request_name, shown=STDIN)
        return Capture(STDIN, (exchange,), "stdin")
    try:
        jobs.check_readable(path)
    except DecodeError as error:
        raise DecodeError(f"{path}: {error}") from None
    return Capture(str(path), (Exchange(path, body, request_name=request_name),))


def _loose_request(provider: str, path: Path, stdin: Callable[[], Path]) -> tuple[bytes, str]:
    """A `--request` body read whole (few are given), checked against `provider`'s shape."""
    name = STDIN if str(path) == STDIN else str(path)
    source = stdin() if name == STDIN else path
    try:
        body = b"".join(jobs.read_capture(source))
    except DecodeError as error:
        raise DecodeError(f"--request {name}: {error}") from None
    jobs.check_request(provider, body, f"--request {name}")
    return body, name


def _folder_captures(provider: str, folder: Path, *, top: bool) -> list[Capture]:
    """The capture `folder` is, or those of the folders it holds; refused when it holds
    none (given on the command line) or cannot be listed."""
    try:
        entries = sorted(folder.iterdir())
    except OSError as error:
        raise DecodeError(f"{folder}: cannot be read: {error.strerror}") from None
    responses = [e for e in entries if _RESPONSE.match(e.name) and not e.is_dir()]
    if responses:
        capture = _capture(provider, folder, responses)
        return [capture] if capture.exchanges else []
    found = [
        capture
        for entry in entries
        if entry.is_dir() and not entry.is_symlink()
        for capture in _folder_captures(provider, entry, top=False)
    ]
    if top and not found:
        raise DecodeError(f"{folder}: holds no capture (no N.response.* file, in it or below)")
    return found


def _capture(provider: str, folder: Path, responses: list[Path]) -> Capture:
    """A capture folder's model calls in numeric order, each request checked."""
    exchanges: list[Exchange] = []
    for response in sorted(responses, key=lambda p: (_number(p), p.name)):
        number = _number(response)
        meta = _meta(folder / f"{number}.meta.json")
        endpoint = meta.get("path")
        if isinstance(endpoint, str) and endpoint and not endpoint.endswith(MODEL_CALLS):
            continue  # a file upload, a vector store: context, not a model response
        status = meta.get("status")
        request = folder / f"{number}.request.json"
        if request.exists():  # read now to be checked, and again as it is ingested
            jobs.check_request(provider, jobs.read_body(request), str(request))
        exchanges.append(
            Exchange(
                response,
                request_path=request if request.exists() else None,
                request_name=str(request),
                status=status if type(status) is int else None,
                separate=bool(exchanges),
            )
        )
    return Capture(str(folder), tuple(exchanges))


def _number(response: Path) -> int:
    matched = _RESPONSE.match(response.name)
    return int(matched.group(1)) if matched else 0


def _meta(path: Path) -> dict[str, object]:
    """`N.meta.json` as an object ({} when there is none); DecodeError naming it when it
    cannot be read or is not a JSON object."""
    if not path.exists():
        return {}
    try:
        meta = json.loads(b"".join(jobs.read_capture(path, max_bytes=1 << 20)))
    except (DecodeError, ValueError) as error:
        raise DecodeError(f"{path}: {error}") from None
    if not isinstance(meta, dict):
        raise DecodeError(f"{path}: is not a JSON object")
    return meta
