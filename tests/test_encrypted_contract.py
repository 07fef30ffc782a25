"""The storage contract suite again, on encrypted stores of both backends (issue 19).

Each test of `tests.test_storage_contract.TestStoreContract` runs on a store created
encrypted: every later `open_store` of it encrypts (the store records it), so the suite's
own calls exercise sealing, unsealing and the key store unchanged.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any
from uuid import uuid4

import pytest
from hypothesis import HealthCheck, given, settings

from convstore.domain import Conversation, ConversationId
from convstore.storage import Store, open_store
from tests import test_storage_contract as contract
from tests.test_forget import drop_key_schema


class TestEncryptedStoreContract(contract.TestStoreContract):
    """What every backend promises the service, with encryption on."""

    @pytest.fixture
    def store_url(self, store_url: str) -> Iterator[str]:
        open_store(store_url, encrypt=True).close()
        try:
            yield store_url
        finally:
            drop_key_schema(store_url)

    @pytest.fixture
    def store(self, store_url: str) -> Iterator[Store]:
        with open_store(store_url) as opened:
            assert opened.encrypted
            yield opened

    @given(drafts=contract.conversation_drafts())
    @settings(
        max_examples=10,
        deadline=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    def test_any_valid_conversation_reloads_equal(self, store: Store, drafts: list[Any]) -> None:
        """As the plain suite's, with the cipher the store's service would hand in (an
        aggregate without it is refused: `test_forget`)."""
        assert store.ciphers is not None
        conversation = Conversation(ConversationId(uuid4()))
        conversation.cipher = store.ciphers.cipher(conversation.id)
        conversation.record_all(contract._own_response_ids(drafts))
        events = list(conversation.pending)

        store.repository.save(conversation)

        assert store.repository.load(conversation.id) == conversation
        assert list(store.repository.events(conversation.id)) == events
