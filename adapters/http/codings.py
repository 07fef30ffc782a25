"""Content codings of an answer's body, inflated in bounded pieces.

gzip (multi-member too) and deflate (zlib-wrapped or raw) are inflated in pieces of at
most 64 KiB, so a compression bomb costs bounded memory; any other coding is refused
with a `DecodeError`.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final

from convstore.domain.errors import DecodeError

PIECE: Final = 64 * 1024
"""The most one inflate step produces: what bounds memory on a compressed body."""

GZIP_WBITS: Final = 16 + zlib.MAX_WBITS
ACCEPT_ENCODING: Final = "gzip, deflate"
IDENTITY: Final = frozenset({"", "identity"})


def content_codings(headers: Mapping[str, str]) -> list[str]:
    """The answer's content codings, in the order they must be undone."""
    codings = [c.strip().lower() for c in headers.get("content-encoding", "").split(",")]
    codings = [c for c in codings if c not in IDENTITY]
    unsupported = [c for c in codings if c not in ("gzip", "x-gzip", "deflate")]
    if unsupported:
        raise DecodeError(
            f"the answer uses content-encoding {', '.join(unsupported)!s}, which convstore "
            f"does not decode (it asks for {ACCEPT_ENCODING} only)"
        )
    return list(reversed(codings))


def decompressor(coding: str, first: bytes) -> zlib._Decompress:
    if coding != "deflate":
        return zlib.decompressobj(GZIP_WBITS)
    # "deflate" means zlib-wrapped (RFC 9110), but some servers send raw deflate.
    wrapped = len(first) < 2 or (first[0] & 0x0F == 8 and ((first[0] << 8) | first[1]) % 31 == 0)
    return zlib.decompressobj(zlib.MAX_WBITS if wrapped else -zlib.MAX_WBITS)


def inflate(chunks: Iterable[bytes], coding: str, ended: Callable[[], None]) -> Iterator[bytes]:
    """Undo one content coding, yielding pieces of at most 64 KiB (bounded memory).

    Calls `ended` when the input stops before the compressed stream's end marker.
    """
    inflater: zlib._Decompress | None = None
    for chunk in chunks:
        data = chunk
        while data:
            if inflater is None:
                inflater = decompressor(coding, data)
            elif inflater.eof:
                if coding == "deflate":
                    raise DecodeError("the deflate-encoded body has data after its end")
                inflater = zlib.decompressobj(GZIP_WBITS)  # gzip: the next member
            while True:
                try:
                    piece = inflater.decompress(data, PIECE)
                except zlib.error as error:
                    raise DecodeError(f"the {coding}-encoded body is corrupt: {error}") from None
                if piece:
                    yield piece
                if inflater.eof:
                    data = inflater.unused_data
                    break
                data = inflater.unconsumed_tail
                if not data and len(piece) < PIECE:
                    break
    if inflater is not None and not inflater.eof:
        ended()
