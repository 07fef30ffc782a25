"""The `stream` flag set on a request body without touching any other value's bytes."""

import pytest

from convstore.adapters.wire.bodies import with_stream
from convstore.domain.errors import DecodeError


def test_with_stream_changes_only_the_flag() -> None:
    assert with_stream(b" {}", stream=True) == b' {"stream":true}'
    assert with_stream(b'{"a": 1.50}', stream=True) == b'{"stream":true,"a": 1.50}'
    assert with_stream(b'{"stream": true}', stream=True) == b'{"stream": true}'
    assert with_stream(b'{"stream":false,"x":"\\u00e9"}', stream=True) == (
        b'{"stream":true,"x":"\\u00e9"}'
    )
    assert with_stream(b'{"x":1e2, "stream":true}', stream=False) == b'{"x":1e2}'
    assert with_stream(b'{"x":1}', stream=False) == b'{"x":1}'


@pytest.mark.parametrize("broken", [b"[]", b"", b'{"a":1} 2', b"\xff"])
def test_a_body_that_is_not_an_object_is_refused(broken: bytes) -> None:
    with pytest.raises(DecodeError, match="OpenAI request body is not a JSON object"):
        with_stream(broken, stream=True, provider="OpenAI")
