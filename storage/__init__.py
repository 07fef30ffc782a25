"""Where and how events are written: SQLite (embedded default) and PostgreSQL.

`open_store(url)` is the one entry point: it parses the URL (see `url`), builds the
backend's recorder, the msgspec mapper and the repository, and hands the repository to
the domain's `ConversationService`.

May import: `convstore.domain`.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from types import TracebackType

from convstore.domain.errors import ConfigurationError
from convstore.domain.service import ConversationService
from convstore.storage import forgetting
from convstore.storage.ciphers import StoreCiphers
from convstore.storage.groups import CommitGroup
from convstore.storage.holds import liveness_for
from convstore.storage.keys import (
    KeyStore,
    KeyWrapper,
    PostgresKeyStore,
    SQLiteKeyStore,
    keys_path,
)
from convstore.storage.mapper import DEFAULT_MAX_EVENT_BYTES, EventMapper
from convstore.storage.recorder import ConversationRecorder
from convstore.storage.repository import (
    DEFAULT_CACHE_SIZE,
    DEFAULT_SNAPSHOT_EVERY,
    EventRepository,
)
from convstore.storage.url import PostgresLocation, SQLiteLocation, StoreLocation, parse_location


@dataclass
class Store:
    """An open store: its location, recorder, repository and application service."""

    location: StoreLocation
    recorder: ConversationRecorder
    repository: EventRepository
    service: ConversationService
    ciphers: StoreCiphers | None = None
    """Each conversation's cipher and the key store, on an encrypted store."""
    purges: Sequence[forgetting.Purge] = ()
    """What deletes a forgotten conversation's rows from the views (`storage.forgetting`)."""

    @property
    def encrypted(self) -> bool:
        """Whether the store seals its conversations' content (`store_options`)."""
        return self.ciphers is not None

    def close(self) -> None:
        """Release the database connections."""
        self.recorder.close()
        if self.ciphers is not None:
            self.ciphers.close()

    def grouped(self) -> AbstractContextManager[CommitGroup]:
        """This thread's appends committed together until the block ends, where no person
        waits on each one (batch ingest): see `storage.groups`."""
        return self.recorder.grouped(lost=self.repository.forget)

    def __enter__(self) -> Store:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()


def open_recorder(location: StoreLocation, *, read_only: bool = False) -> ConversationRecorder:
    """The recorder for a location: a writer creates the store or applies the migrations it
    lacks; a read-only reader never writes (see `storage.migrations`)."""
    if isinstance(location, SQLiteLocation):
        from convstore.storage.sqlite import SQLiteRecorder

        return SQLiteRecorder(location.path, read_only=read_only, make_folder=location.default)
    from convstore.storage.postgres import PostgresRecorder

    return PostgresRecorder(location.dsn, schema=location.schema, read_only=read_only)


def open_store(
    url: str | None = None,
    *,
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    cache_size: int = DEFAULT_CACHE_SIZE,
    read_only: bool = False,
    encrypt: bool = False,
    key_wrapper: KeyWrapper | None = None,
    purges: Sequence[forgetting.Purge] = (),
) -> Store:
    """Open (creating if needed) the store at `url`; None means `CONVSTORE_URL` or the default.

    A writer applies the migrations the store lacks. `read_only=True` opens an existing
    store without writing anything: it raises `MigrationRequired` for a store it cannot
    read unmigrated (or that does not exist) and `NewerSchema` for one a newer convstore
    wrote; every write through it fails. `cache_size` conversations' states are kept
    between calls (see `storage.repository`).

    `encrypt=True` makes a new store (or one holding no events yet) an encrypted one,
    recorded in the store (`store_options`): from then on every open of it encrypts,
    whatever `encrypt` says, and a store holding plain events refuses it
    (ConfigurationError). Keys live apart (`storage.keys`), wrapped by `key_wrapper`.
    A writer of an encrypted store finishes any forget a crash interrupted, `purges`
    included (the views' deletes of a forgotten conversation, `forgetting.Purge`).
    """
    location = parse_location(url)
    recorder = open_recorder(location, read_only=read_only)
    try:
        ciphers = _ciphers(recorder, location, encrypt=encrypt, key_wrapper=key_wrapper)
    except BaseException:
        recorder.close()
        raise
    repository = EventRepository(
        recorder,
        EventMapper(max_event_bytes),
        snapshot_every=snapshot_every,
        cache_size=cache_size,
        unseal=None if ciphers is None else ciphers.unseal,
        ciphers=ciphers,
    )
    service = ConversationService(
        repository,
        liveness=liveness_for(location),
        max_event_bytes=max_event_bytes,
        ciphers=ciphers,
    )
    store = Store(location, recorder, repository, service, ciphers, tuple(purges))
    if ciphers is not None and not read_only:
        try:
            forgetting.finish_pending(store)
        except BaseException:
            store.close()
            raise
    return store


def _ciphers(
    recorder: ConversationRecorder,
    location: StoreLocation,
    *,
    encrypt: bool,
    key_wrapper: KeyWrapper | None,
) -> StoreCiphers | None:
    """The store's ciphers when it encrypts (making it encrypt with `encrypt`), else None."""
    option = forgetting.store_option(recorder, forgetting.ENCRYPT_OPTION)
    if option is None:
        if not encrypt:
            return None
        if recorder.read_only:
            raise ConfigurationError(
                f"the store at {location} does not encrypt; a reader cannot make it: "
                "open it as a writer with encryption when it is created"
            )
        forgetting.set_encrypted(recorder, str(location))
    elif option != forgetting.CIPHER_NAME:
        raise ConfigurationError(
            f"the store at {location} is encrypted with {option!r}, which this convstore "
            "does not know (a newer one wrote it)"
        )
    read_only = recorder.read_only
    keys: KeyStore
    if isinstance(location, SQLiteLocation):
        keys = SQLiteKeyStore(
            keys_path(str(location.path)), read_only=read_only, wrapper=key_wrapper
        )
    else:
        keys = PostgresKeyStore(
            location.dsn, schema=location.schema, read_only=read_only, wrapper=key_wrapper
        )
    ciphers = StoreCiphers(keys, read_only=read_only)
    recorder.unseal = ciphers.unseal
    recorder.secure()
    return ciphers


__all__ = ["PostgresLocation", "SQLiteLocation", "Store", "open_store", "parse_location"]
