"""The response recorder's commits: grouped while they fit its buffer, never a block late."""

from convstore.domain import Conversation
from convstore.domain.events import AssistantText, Event, ResponseEnded, ResponseStarted
from convstore.domain.responses import ResponseRecorder
from convstore.domain.vocabulary import ResponseId

RID = ResponseId("r1")


def drafts(*sizes: int) -> list[Event]:
    texts: list[Event] = [AssistantText(response_id=RID, text="x" * size) for size in sizes]
    return [
        ResponseStarted(response_id=RID, provider="anthropic"),
        *texts,
        ResponseEnded(response_id=RID, state="completed", finish_reason="stop"),
    ]


def commits(*sizes: int, flush_bytes: int) -> list[list[str]]:
    """The kinds of event each save committed."""
    conversation = Conversation.start("t")
    conversation.collect_events()
    saved: list[list[str]] = []

    def save(c: Conversation) -> None:
        saved.append([type(e).__name__ for e in c.collect_events()])

    outcome = ResponseRecorder(conversation, save, flush_bytes=flush_bytes).record(drafts(*sizes))
    assert outcome.ended == "completed"
    return saved


def test_a_response_that_fits_the_buffer_is_one_commit() -> None:
    assert commits(100, 100, flush_bytes=1000) == [
        ["TurnStarted", "ResponseStarted", "AssistantText", "AssistantText", "ResponseEnded",
         "TurnEnded"]
    ]  # fmt: skip


def test_a_block_that_does_not_fit_beside_the_pending_ones_commits_them_first() -> None:
    # The buffer counts stored bytes (a block's text and its envelope, some 250 bytes):
    # 600 then 600 would overflow 1500 together, so the first goes alone; then 600 + 100
    # fit until the end.
    assert commits(600, 600, 100, flush_bytes=1500) == [
        ["TurnStarted", "ResponseStarted", "AssistantText"],
        ["AssistantText", "AssistantText", "ResponseEnded", "TurnEnded"],
    ]


def test_a_block_over_the_buffer_is_committed_alone() -> None:
    assert commits(100, 2000, 100, flush_bytes=1000) == [
        ["TurnStarted", "ResponseStarted", "AssistantText"],
        ["AssistantText"],
        ["AssistantText", "ResponseEnded", "TurnEnded"],
    ]
