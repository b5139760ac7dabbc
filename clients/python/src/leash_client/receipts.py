# Receipt checks before the client acts on a verdict: the compact JWS (EdDSA) of the decision's chain
# entry, verified offline with the daemon's public key, and bound to this call. Needs `cryptography`.
from __future__ import annotations

import base64
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Any, Optional

_B64URL = re.compile(r"^[A-Za-z0-9_-]+$")
_MAX_SAFE = 2**53 - 1


def ed25519_available() -> bool:
    try:
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey  # noqa: F401
    except ImportError:
        return False
    return True


def _b64url_decode(part: str) -> Optional[bytes]:
    """Strict base64url (no padding, one spelling per byte string), or None."""
    if not part or _B64URL.match(part) is None or len(part) % 4 == 1:
        return None
    raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
    return raw if base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii") == part else None


def key_id_of(public_key: bytes) -> str:
    """@leash/chain's key id: the first 16 hex characters of SHA-256 over the raw public key."""
    return hashlib.sha256(public_key).hexdigest()[:16]


@dataclass(frozen=True)
class VerifiedReceipt:
    payload: dict[str, Any]
    #: SHA-256 of the payload bytes: the entry's entry_hash.
    entry_hash: str
    seq: int


class ReceiptRefused(ValueError):
    """Why a receipt was refused; `reason` uses @leash/receipts' names (malformed, bad_signature, …)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(f"{reason}: {message}")
        self.reason = reason


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def verify_receipt(receipt: str, public_key_hex: str) -> VerifiedReceipt:
    """@leash/receipts verifyReceipt: canonical compact JWS, alg EdDSA, kid = the key's id, a valid
    Ed25519 signature, a v1 entry body signed under that kid. Raises ReceiptRefused."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    parts = receipt.split(".") if isinstance(receipt, str) else []
    decoded = [_b64url_decode(p) for p in parts]
    if len(parts) != 3 or any(d is None for d in decoded):
        raise ReceiptRefused("malformed", "a receipt is three non-empty, canonically base64url-encoded parts")
    header_bytes, payload_bytes, signature = (d or b"" for d in decoded)
    try:
        header = json.loads(header_bytes.decode("utf-8"), parse_constant=_reject_constant)
    except ValueError as error:
        raise ReceiptRefused("malformed", f"the protected header is not readable JSON ({error})") from None
    if not isinstance(header, dict):
        raise ReceiptRefused("malformed", "the protected header is not a JSON object")
    if header.get("alg") != "EdDSA":
        raise ReceiptRefused("alg_not_allowed", f"alg {header.get('alg')} is not allowed; receipts use EdDSA")
    if "crit" in header or "b64" in header:
        raise ReceiptRefused("malformed", "the protected header asks for JWS extensions receipts never use")
    if re.fullmatch(r"[0-9a-fA-F]{64}", public_key_hex or "") is None:
        raise ReceiptRefused("invalid_key", "the public key is not 64 hex characters (Ed25519)")
    raw = bytes.fromhex(public_key_hex)
    kid = key_id_of(raw)
    if header.get("kid") != kid:
        raise ReceiptRefused("kid_mismatch", f"the receipt names key {header.get('kid')}; the given key is {kid}")
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, f"{parts[0]}.{parts[1]}".encode("ascii"))
    except InvalidSignature:
        raise ReceiptRefused("bad_signature", "the signature does not verify") from None
    except ValueError as error:
        raise ReceiptRefused("invalid_key", f"the public key cannot be used ({error})") from None
    try:
        payload = json.loads(payload_bytes.decode("utf-8"), parse_constant=_reject_constant)
    except ValueError:
        raise ReceiptRefused("invalid_payload", "the payload is not UTF-8 JSON") from None
    problem = _payload_problem(payload, kid)
    if problem is not None:
        raise ReceiptRefused("invalid_payload", problem)
    return VerifiedReceipt(payload, hashlib.sha256(payload_bytes).hexdigest(), payload["seq"])


def _is_safe_int(v: object) -> bool:
    if isinstance(v, bool):
        return False
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return isinstance(v, int) and 0 <= v <= _MAX_SAFE


def _payload_problem(p: object, kid: str) -> Optional[str]:
    if not isinstance(p, dict):
        return "payload is not an object"
    if p.get("v") != 1 or isinstance(p.get("v"), bool):
        return "payload is not a v1 entry body"
    if not isinstance(p.get("chain_id"), str) or p["chain_id"] == "":
        return "payload has no chain_id"
    if not _is_safe_int(p.get("seq")):
        return "payload has no valid seq"
    p["seq"] = int(p["seq"])
    if not isinstance(p.get("entry_id"), str) or not isinstance(p.get("kind"), str):
        return "payload has no entry_id or kind"
    if not isinstance(p.get("data"), dict):
        return "payload has no data object"
    if p.get("key_id") != kid:
        return "payload key_id differs from the header kid"
    return None


def _js_string(value: object) -> Optional[str]:
    """String(value) as JavaScript writes a JSON scalar, for the nonce the daemon recorded."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def receipt_problem(
    receipt: str,
    public_key_hex: str,
    *,
    session_id: str,
    call_number: int,
    tool_name: str,
    params_hash: Optional[str],
    nonce: str,
    verdict: str,
    reason: str,
    entry_hash: str,
    entry_seq: int,
) -> Optional[str]:
    """None when the receipt verifies and binds this decision; otherwise why not (one line)."""
    if receipt == "":
        return "the verdict carries no receipt"
    try:
        verified = verify_receipt(receipt, public_key_hex)
    except ReceiptRefused as refused:
        return f"the receipt does not verify ({refused})"
    if verified.payload["kind"] != "decision":
        return f"the receipt is a {verified.payload['kind']} entry, not a decision"
    if verified.entry_hash != entry_hash:
        return "the receipt is not of the entry the verdict names"
    if verified.seq != entry_seq:
        return "the receipt's chain position differs from the verdict's"
    data = verified.payload["data"]
    bound: list[tuple[str, object, object]] = [
        ("session_id", data.get("session_id"), session_id),
        ("call_number", data.get("call_number"), call_number),
        ("tool_name", data.get("tool_name"), tool_name),
        ("verdict", data.get("verdict"), verdict),
        ("reason", data.get("reason"), reason),
        # The nonce is recorded as the daemon read it (number or decimal text); compare the text.
        ("nonce", _js_string(data.get("nonce")), nonce),
    ]
    if params_hash is not None:
        bound.append(("params_hash", data.get("params_hash"), params_hash))
    for field, got, want in bound:
        if got != want or isinstance(got, bool) != isinstance(want, bool):
            return f"the receipt's {field} is {json.dumps(got)}, not {json.dumps(want)}"
    return None
