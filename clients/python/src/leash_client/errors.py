# The client's exceptions, with @leash/client's names and stable snake_case codes (LeashError.code).
# Verdicts are results, not exceptions: only guard() turns a DENY or HITL into LeashDenied / LeashHitl.
from __future__ import annotations

from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .types import PreExecResult

LeashErrorCode = Literal[
    "invalid_argument",
    "denied",
    "hitl_required",
    "daemon_unavailable",  # no connection to the daemon, or it closed with the request in flight
    "timeout",  # no answer within the request's timeout
    "bad_response",  # an answer that does not parse, authenticate or answer the request
    "auth_failed",  # the daemon refused our HMAC key or key id (a wrong key, or a key id it lacks)
    "daemon_error",  # the daemon answered an SP/1.0 Error (its Appendix B code is in the message)
    "closed",
]


class LeashError(Exception):
    """Every error the client raises; `code` is stable, the message is for people."""

    code: LeashErrorCode

    def __init__(self, code: LeashErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.code!r}, {self.message!r})"


class LeashDenied(LeashError):
    """Raised by guard() when the verdict is DENY (a fail-closed DENY included): the tool did not run."""

    verdict: Literal["DENY"] = "DENY"

    def __init__(self, result: PreExecResult) -> None:
        super().__init__("denied", f"Leash denied the call ({result.reason}); the tool did not run")
        self.result = result
        self.reason = result.reason
        self.session_id = result.session_id
        self.call_number = result.call_number


class LeashHitl(LeashError):
    """Raised by guard() when the verdict is HITL: a human must decide; the tool did not run."""

    verdict: Literal["HITL"] = "HITL"

    def __init__(self, result: PreExecResult) -> None:
        super().__init__("hitl_required", f"Leash needs a human decision ({result.reason}); the tool did not run")
        self.result = result
        self.reason = result.reason
        self.session_id = result.session_id
        self.call_number = result.call_number


class WireError(Exception):
    """A refusal of the wire layer (framing, HMAC, replay, money); the client turns it into a DENY."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
