# leash_client: the Python agent's side of the Leash sidecar daemon (SHACKLE SP/1.0, `leash serve`).
# It decides nothing: the daemon does; whenever no trustworthy verdict arrives, the client DENYs.
from ._proto import shackle_pb2 as pb
from .client import (
    DEFAULT_CONTROL_TIMEOUT_MS,
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_RECONNECT,
    DEFAULT_TIMEOUT_MS,
    LeashClient,
)
from .errors import LeashDenied, LeashError, LeashHitl
from .guard import guard
from .params import canonical_hash
from .receipts import ReceiptRefused, verify_receipt
from .types import FAIL_CLOSED_REASONS, HeartbeatResult, PostExecResult, PreExecResult, RegisterResult, TailEntry

__version__ = "0.1.0"

__all__ = [
    "DEFAULT_CONTROL_TIMEOUT_MS",
    "DEFAULT_HEARTBEAT_INTERVAL_MS",
    "DEFAULT_RECONNECT",
    "DEFAULT_TIMEOUT_MS",
    "FAIL_CLOSED_REASONS",
    "HeartbeatResult",
    "LeashClient",
    "LeashDenied",
    "LeashError",
    "LeashHitl",
    "PostExecResult",
    "PreExecResult",
    "ReceiptRefused",
    "RegisterResult",
    "TailEntry",
    "canonical_hash",
    "guard",
    "pb",
    "verify_receipt",
]
