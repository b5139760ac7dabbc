# Sealing and opening SP/1.0 envelopes as @leash/wire does: ids, timestamps, version, HMAC, replay.
# The HMAC covers the envelope's bytes as sent with field 6 cut out; it never re-serializes to check.
from __future__ import annotations

import hashlib
import hmac
import time
from typing import Any

from ._proto import shackle_pb2 as pb
from .errors import WireError
from .message_id import is_message_id, new_message_id
from .replay import ReplayWindow

#: The version Leash speaks (SP/1.0, spec §9.2), and every version this client speaks, highest first.
PROTOCOL_VERSION = "1.0.0"
SUPPORTED_PROTOCOL_VERSIONS = (PROTOCOL_VERSION,)

HMAC_FIELD = 6
HMAC_BYTES = 32
MIN_KEY_BYTES = 32
_HMAC_TAG = bytes([(HMAC_FIELD << 3) | 2, HMAC_BYTES])  # field 6, length-delimited, 32 bytes


def seal_envelope(
    payload: str,
    message: Any,
    *,
    key: bytes,
    key_id: str = "",
    protocol_version: str = PROTOCOL_VERSION,
    message_id: str | None = None,
    now_ns: int | None = None,
) -> tuple[str, bytes]:
    """(message_id, frame body): an agent's envelope carrying `message` in oneof field `payload`,
    serialized with hmac empty, then HMAC-SHA256 over those bytes appended as field 6."""
    ts = time.time_ns() if now_ns is None else now_ns
    mid = message_id if message_id is not None else new_message_id(ts // 1_000_000)
    envelope = pb.Envelope(
        protocol_version=protocol_version,
        message_id=mid,
        correlation_id=mid,
        client_timestamp_ns=ts,
        key_id=key_id,
    )
    getattr(envelope, payload).CopyFrom(message)
    unsigned = envelope.SerializeToString()
    return mid, unsigned + _HMAC_TAG + hmac.new(key, unsigned, hashlib.sha256).digest()


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise WireError("invalid_envelope", "envelope bytes are not protobuf")
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7


def split_hmac(data: bytes) -> tuple[bytes, bytes | None]:
    """(MAC input, MAC): the bytes with the one top-level field 6 cut out, and that field's value."""
    pos = 0
    mac: bytes | None = None
    cut = (0, 0)
    while pos < len(data):
        start = pos
        tag, pos = _varint(data, pos)
        field, wire_type = tag >> 3, tag & 7
        if field == 0:
            raise WireError("invalid_envelope", "envelope bytes are not protobuf")
        if wire_type == 0:
            _, pos = _varint(data, pos)
        elif wire_type == 1:
            pos += 8
        elif wire_type == 5:
            pos += 4
        elif wire_type == 2:
            n, pos = _varint(data, pos)
            if field == HMAC_FIELD:
                if mac is not None:
                    raise WireError("bad_hmac", "hmac field present more than once")
                mac = data[pos : pos + n]
                cut = (start, pos + n)
            pos += n
        else:
            raise WireError("invalid_envelope", "envelope bytes are not protobuf")
        if field == HMAC_FIELD and wire_type != 2:
            raise WireError("bad_hmac", "hmac field has the wrong wire type")
        if pos > len(data):
            raise WireError("invalid_envelope", "envelope bytes are not protobuf")
    if mac is None:
        return data, None
    return data[: cut[0]] + data[cut[1] :], mac


def open_daemon_envelope(body: bytes, *, key: bytes, replay: ReplayWindow) -> pb.Envelope:
    """Decodes and checks an envelope the daemon sent, in @leash/wire's order: an Envelope with a
    payload and a UUIDv7 id; its HMAC over the bytes as received; a version spoken here; its
    server timestamp within the window and its id not seen before. Raises WireError otherwise."""
    envelope = pb.Envelope()
    try:
        envelope.ParseFromString(body)
    except Exception as error:  # DecodeError, or invalid UTF-8 in a string field
        raise WireError("invalid_envelope", f"frame body is not an SP/1.0 Envelope ({error})") from None
    if envelope.WhichOneof("payload") is None:
        raise WireError("invalid_envelope", "envelope has no payload")
    if not is_message_id(envelope.message_id):
        raise WireError("invalid_envelope", "message_id must be a lowercase UUIDv7")
    unsigned, mac = split_hmac(body)
    if mac is None:
        raise WireError("bad_hmac", "envelope carries no hmac")
    if len(mac) != HMAC_BYTES:
        raise WireError("bad_hmac", f"hmac must be {HMAC_BYTES} bytes")
    if not hmac.compare_digest(hmac.new(key, unsigned, hashlib.sha256).digest(), mac):
        raise WireError("bad_hmac", "hmac does not match")
    if envelope.protocol_version not in SUPPORTED_PROTOCOL_VERSIONS:
        raise WireError(
            "protocol_version_mismatch", f'protocol version "{envelope.protocol_version}" is not spoken here'
        )
    replay.admit(envelope.message_id, envelope.server_timestamp_ns)
    return envelope


def error_code_name(code: int) -> str:
    """The Appendix B name of an ErrorCode value (its number when this client does not know it)."""
    try:
        return str(pb.ErrorCode.Name(code))
    except ValueError:
        return str(code)
