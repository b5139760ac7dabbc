# A call's params on the wire: tool_params_json and its SP/1.0 digest (spec §3.6 canonical_hash).
# Canonical JSON here is the reference's own: json.dumps(sort_keys, compact, ensure_ascii=False).
from __future__ import annotations

import hashlib
import json
import math
from typing import Any, Optional

#: The reference implementation's nesting limit: the params object is depth 0; deeper than 64 fails.
CANONICAL_MAX_DEPTH = 64
#: Sent when params have no JSON form: the daemon answers DENY policy_violation:malformed_input.
UNSERIALIZABLE_PARAMS = "<params without a JSON form>"


class NotCanonical(ValueError):
    """Params that cannot be canonicalized (§3.2 rule 1); the code says which structural class."""

    def __init__(self, code: str) -> None:
        super().__init__(code)
        self.code = code


def _check(value: Any, depth: int) -> None:
    # Structural, as §3.8 requires: json.dumps alone would turn int keys into strings and accept NaN.
    if depth > CANONICAL_MAX_DEPTH:
        raise NotCanonical("too_deep")
    if value is None or isinstance(value, (bool, int)):
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise NotCanonical("non_finite_number")
        return
    if isinstance(value, str):
        _check_text(value)
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotCanonical("non_string_key")
            _check_text(k)
            _check(v, depth + 1)
        return
    if isinstance(value, (list, tuple)):
        for v in value:
            _check(v, depth + 1)
        return
    raise NotCanonical("unsupported_type")


def _check_text(text: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise NotCanonical("lone_surrogate") from None


def canonical_json(value: Any) -> str:
    """The canonical JSON text of `value` (any JSON value at the top). Raises NotCanonical."""
    _check(value, 0)
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical_hash(value: Any) -> str:
    """Hex SHA-256 of the canonical JSON: spec §3.6 canonical_hash. Raises NotCanonical."""
    return hashlib.sha256(canonical_json(value).encode("utf-8")).hexdigest()


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def params_on_wire(params: Any) -> tuple[str, Optional[str]]:
    """(tool_params_json, hex digest or None). JSON text is sent as given, hashed as Python reads it
    when it is a JSON object; anything else is serialized canonically. Params with no canonical
    form are sent as a marker the daemon refuses (malformed_input), as @leash/client does."""
    if isinstance(params, str):
        try:
            parsed = json.loads(params, parse_constant=_reject_constant)
            if not isinstance(parsed, dict):
                return params, None
            return params, canonical_hash(parsed)
        except (ValueError, RecursionError):
            return params, None  # the daemon sees the text and answers malformed_input
    value = {} if params is None else params
    try:
        text = canonical_json(value)
    except (NotCanonical, RecursionError):
        return UNSERIALIZABLE_PARAMS, None
    return text, hashlib.sha256(text.encode("utf-8")).hexdigest()
