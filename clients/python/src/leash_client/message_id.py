# UUIDv7 message ids (RFC 9562) for envelopes: the standard library has uuid7 only from Python 3.14.
# It makes and recognizes ids; remembering them (replay) is replay.py's.
from __future__ import annotations

import os
import re
import time

_UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def new_message_id(now_ms: int | None = None) -> str:
    """A lowercase UUIDv7: 48-bit Unix milliseconds, version 7, 74 random bits, variant 10."""
    ms = time.time_ns() // 1_000_000 if now_ms is None else now_ms
    rand = int.from_bytes(os.urandom(10), "big")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= 0x7 << 76
    value |= ((rand >> 62) & 0xFFF) << 64
    value |= 0b10 << 62
    value |= rand & ((1 << 62) - 1)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def is_message_id(text: object) -> bool:
    """Whether `text` is a UUIDv7 in lowercase canonical form."""
    return isinstance(text, str) and _UUID7.match(text) is not None
