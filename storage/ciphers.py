"""The cipher port over the key store: AES-256-GCM per conversation (`cryptography`).

`StoreCiphers` gives the service each conversation's `Cipher` (`domain.sealing`), making
its data key on first use, and gives the store's readers `unseal`: stored bytes with
their content decrypted. Each ciphertext is a fresh 96-bit nonce then the GCM output;
the associated data is the event's identity, so a ciphertext moved to another event,
conversation or type does not decrypt.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import threading
from collections.abc import Callable
from typing import Any
from uuid import UUID

from convstore.domain.errors import ConfigurationError, ConversationForgotten, IntegrityError
from convstore.domain.events import EPOCH
from convstore.domain.sealing import Cipher, sealed_part, unseal_part
from convstore.domain.vocabulary import ConversationId
from convstore.storage.keys import KeyStore

NONCE_BYTES = 12
DIGEST_KEY_ID = UUID(int=0)
"""The key store's row of the store-wide digest key (no conversation has the nil id)."""


class KeyDestroyed(ConversationForgotten):
    """Sealed content whose conversation's key is gone: it was forgotten."""


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError:
        raise ConfigurationError(
            "this store is encrypted: install the `crypto` extra "
            "(pip install 'convstore[crypto]') to read or write it"
        ) from None
    return AESGCM


class AESGCMCipher:
    """AES-256-GCM under one data key."""

    __slots__ = ("_aead", "_decrypt", "_invalid", "keyed")

    def __init__(self, key: bytes, keyed: Callable[[str], str]) -> None:
        from cryptography.exceptions import InvalidTag

        self.keyed = keyed
        """The store's keyed digest (`StoreCiphers.keyed`)."""
        self._aead = _aesgcm()(key)
        self._decrypt = self._aead.decrypt
        self._invalid = (InvalidTag, ValueError)

    def encrypt(self, plaintext: bytes, associated: bytes) -> bytes:
        """A fresh nonce, then the ciphertext and its tag."""
        nonce = os.urandom(NONCE_BYTES)
        return nonce + bytes(self._aead.encrypt(nonce, plaintext, associated))

    def decrypt(self, ciphertext: bytes, associated: bytes) -> bytes:
        """The plaintext; raises IntegrityError for a changed or moved ciphertext."""
        try:
            plain: bytes = self._decrypt(
                ciphertext[:NONCE_BYTES], ciphertext[NONCE_BYTES:], associated
            )
        except self._invalid:
            raise IntegrityError(
                "sealed content does not decrypt: it was changed, or moved from another event"
            ) from None
        return plain


class StoreCiphers:
    """Each conversation's cipher over a key store (the domain's `Ciphers` port)."""

    def __init__(self, keys: KeyStore, *, read_only: bool = False) -> None:
        self.keys = keys
        self.read_only = read_only
        self._ciphers: dict[UUID, AESGCMCipher] = {}
        self._opened: dict[str, AESGCMCipher] = {}
        self._digest_key: bytes | None = None
        """The same ciphers by the id as events print it (`unseal`'s fast path)."""
        self._guard = threading.Lock()
        _aesgcm()  # a missing extra is said when the store opens

    def cipher(self, conversation_id: ConversationId) -> Cipher:
        """The conversation's cipher, its key made on first use (a writer's); raises
        KeyDestroyed when it has no key any more."""
        found = self._find(conversation_id, create=not self.read_only)
        if found is None:
            raise KeyDestroyed(
                f"conversation {conversation_id} has no data key: it was forgotten",
                conversation_id=conversation_id,
                on=EPOCH,
            )
        return found

    def _find(self, conversation_id: UUID, *, create: bool) -> AESGCMCipher | None:
        with self._guard:
            cached = self._ciphers.get(conversation_id)
        if cached is not None:
            return cached
        key = self.keys.key(conversation_id, create=create)
        if key is None:
            return None
        cipher = AESGCMCipher(key, self.keyed)
        with self._guard:
            self._ciphers[conversation_id] = cipher
        return cipher

    def keyed(self, digest: str) -> str:
        """HMAC-SHA256 of `digest` under the store's digest key (the key store's row for
        the nil id, made on first use and never destroyed), in hex."""
        key = self._digest_key
        if key is None:
            key = self.keys.key(DIGEST_KEY_ID, create=not self.read_only)
            if key is None:
                raise ConfigurationError(
                    "the key store holds no digest key: it was written by no writer yet"
                )
            self._digest_key = key
        return hmac.new(key, digest.encode(), hashlib.sha256).hexdigest()

    def unseal(self, state: bytes) -> bytes:
        """Stored bytes with their content decrypted (unchanged when nothing is sealed);
        raises KeyDestroyed when the conversation's key is gone, IntegrityError when the
        content does not decrypt."""
        part = sealed_part(state)
        if part is None:
            return state
        cipher = self._opened.get(part.originator_id)
        if cipher is None:
            originator = UUID(part.originator_id)
            cipher = self._find(originator, create=False)
            if cipher is None:
                raise KeyDestroyed(
                    f"conversation {originator} has no data key: it was forgotten",
                    conversation_id=originator,
                    on=EPOCH,
                )
            self._opened[part.originator_id] = cipher
        return unseal_part(state, part, cipher)

    def destroy(self, conversation_id: UUID) -> None:
        """Destroy the conversation's key (idempotent) and drop it from memory."""
        with self._guard:
            self._ciphers.pop(conversation_id, None)
            self._opened.pop(str(conversation_id), None)
        self.keys.destroy(conversation_id)

    def close(self) -> None:
        """Close the key store."""
        self.keys.close()
