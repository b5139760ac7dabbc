# Unix-socket framing of SP/1.0 (spec §6.1): 4-byte big-endian length + one binary Envelope.
# It neither authenticates nor interprets envelopes (envelope.py does); it only cuts frames.
from __future__ import annotations

import struct

from .errors import WireError

#: The largest frame body accepted or sent: 1 MiB (spec §7.5).
MAX_FRAME_BYTES = 1024 * 1024
_PREFIX = struct.Struct(">I")


def encode_frame(body: bytes, max_bytes: int = MAX_FRAME_BYTES) -> bytes:
    """The 4-byte big-endian length of `body`, then `body`."""
    if len(body) == 0:
        raise WireError("malformed_frame", "a frame must not be empty")
    if len(body) > max_bytes:
        raise WireError("message_too_large", f"frame of {len(body)} bytes exceeds {max_bytes}")
    return _PREFIX.pack(len(body)) + body


class FrameDecoder:
    """Feed it the socket's chunks, get whole frame bodies back. A length of 0 or over max_bytes is
    refused as soon as its prefix arrives (the body is never buffered) and fails the decoder for good:
    the stream cannot be resynchronised."""

    def __init__(self, max_bytes: int = MAX_FRAME_BYTES) -> None:
        self.max_bytes = max_bytes
        self._buffer = bytearray()
        self._need = -1
        self.failure: WireError | None = None

    def push(self, chunk: bytes) -> list[bytes]:
        if self.failure is not None:
            raise self.failure
        self._buffer += chunk
        frames: list[bytes] = []
        while True:
            if self._need < 0:
                if len(self._buffer) < _PREFIX.size:
                    break
                (length,) = _PREFIX.unpack_from(self._buffer)
                del self._buffer[: _PREFIX.size]
                if length == 0:
                    self._fail(WireError("malformed_frame", "zero-length frame"))
                if length > self.max_bytes:
                    self._fail(
                        WireError("message_too_large", f"frame length {length} exceeds the limit of {self.max_bytes}")
                    )
                self._need = length
            if len(self._buffer) < self._need:
                break
            frames.append(bytes(self._buffer[: self._need]))
            del self._buffer[: self._need]
            self._need = -1
        return frames

    def _fail(self, error: WireError) -> None:
        self.failure = error
        self._buffer.clear()
        self._need = -1
        raise error
