# What the client needs from a transport (Unix socket or gRPC): send a request, get its answer or
# the reason there is none. It decides nothing; the client turns every failure into a fail-closed DENY.
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Protocol

#: Why a request got no usable answer (each becomes fail_closed:<failure> or LeashError(<failure>)).
#: auth_failed: the daemon refused our HMAC key or key id (its unsigned Error says so).
Failure = Literal["daemon_unavailable", "timeout", "bad_response", "auth_failed"]


@dataclass(frozen=True)
class Outcome:
    ok: bool
    #: The answer's payload name ("pre_exec_response", "error", …) when ok.
    kind: str = ""
    answer: Any = None
    failure: Optional[Failure] = None
    message: str = ""


def failed(failure: Failure, message: str) -> Outcome:
    return Outcome(ok=False, failure=failure, message=message)


class Transport(Protocol):
    #: The version sent on every request after register (the negotiated one).
    protocol_version: str

    def request(self, payload: str, message: Any, timeout_s: float) -> Outcome:
        """Sends `message` as `payload` ("pre_exec", "register", …) and waits for its answer. Never raises."""
        ...

    def notify(self, payload: str, message: Any, timeout_s: float) -> Outcome:
        """Sends a post_exec and waits until the daemon has it durably (post_exec_ack on the socket,
        Empty on gRPC) or refuses it. Never raises."""
        ...

    def close(self) -> None: ...
