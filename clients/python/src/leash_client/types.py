# The client's result shapes: @leash/client's field names (session_id, call_number, …) as frozen
# dataclasses, so a guarded tool reads the same fields in Python as in TypeScript. Plain data; no I/O.
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from ._proto import shackle_pb2 as pb

Verdict = Literal["ALLOW", "DENY", "HITL"]

#: Why the client itself answered DENY without a verdict it can trust (README "Fail closed").
FAIL_CLOSED_REASONS = (
    "fail_closed:daemon_unavailable",
    "fail_closed:timeout",
    "fail_closed:bad_response",
    "fail_closed:auth_failed",
    "fail_closed:bad_receipt",
    "fail_closed:daemon_error",
    "fail_closed:bad_request",
)


@dataclass(frozen=True)
class PreExecResult:
    session_id: str
    #: The daemon's call number (0 when the client failed closed before the daemon answered).
    call_number: int
    verdict: Verdict
    #: The exact §3.5 (or extension) reason, or one of FAIL_CLOSED_REASONS.
    reason: str
    #: Exact decimal string, or None when no budget is set (or the client failed closed).
    budget_remaining_usd: Optional[str]
    #: Hex SHA-256 of the canonical params, or None when they have no canonical form.
    params_hash: Optional[str]
    entry_seq: Optional[int]
    entry_hash: Optional[str]
    #: The compact JWS of the decision's chain entry; None when the client failed closed.
    receipt: Optional[str]
    #: True when the client decided (DENY) itself; `detail` then says why.
    fail_closed: bool
    detail: Optional[str] = None


@dataclass(frozen=True)
class RegisterResult:
    session_id: str
    daemon_version: str
    negotiated_protocol: str
    #: The policy the daemon applies (from its configuration, never from the agent).
    active_config: Optional[pb.GuardConfig]
    daemon_time_ns: int


@dataclass(frozen=True)
class HeartbeatResult:
    session_id: str
    #: The daemon's view of the budget (exact decimal), or None when none is set.
    daemon_budget_remaining_usd: Optional[str]
    drift_detected: bool
    daemon_time_ns: int


@dataclass(frozen=True)
class PostExecResult:
    session_id: str
    call_number: int


@dataclass(frozen=True)
class TailEntry:
    """One audit chain entry of your organization as the daemon summarizes it (not a signed record)."""

    seq: int
    entry_hash: str
    entry_id: str
    #: The daemon's clock when it wrote the entry, ns since the Unix epoch.
    time_ns: int
    kind: str
    session_id: str
    agent_id: Optional[str]
    call_number: Optional[int]
    #: None on a decision about a malformed call (and on kinds that name no tool).
    tool_name: Optional[str]
    #: Decisions only.
    verdict: Optional[Verdict]
    reason: Optional[str]
    budget_after_usd: Optional[str]
