# The post_execs the daemon has not yet confirmed durable, kept per (session, call) and sent again
# (after a reconnect, a heartbeat, the next post_exec) until an ack or a definite refusal arrives.
# It decides nothing; a re-send is safe because the daemon records one settlement per call.
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Optional

from ._proto import shackle_pb2 as pb
from .envelope import error_code_name
from .transport import Outcome

#: Refusals that say the settlement was not recorded yet and may be sent again.
_RETRYABLE = {pb.DAEMON_UNAVAILABLE, pb.RATE_LIMITED}
#: Answers that say the settlement is durable: the socket's post_exec_ack, gRPC's Empty.
_CONFIRMED = {"post_exec_ack", "empty"}
#: How many unconfirmed settlements one client keeps; past it the oldest is given up (and reported).
MAX_KEPT_SETTLEMENTS = 10_000


class SettlementOutbox:
    def __init__(self, send: Callable[[Any], Outcome], on_give_up: Callable[[Any, str], None]) -> None:
        self._send = send
        self._on_give_up = on_give_up
        self._lock = threading.Lock()
        self._kept: OrderedDict[str, Any] = OrderedDict()
        self._flushing = False

    @property
    def size(self) -> int:
        with self._lock:
            return len(self._kept)

    def send(self, key: str, message: Any) -> Outcome:
        """Keeps `message` under `key` and sends it; kept until confirmed or definitely refused."""
        dropped: Optional[Any] = None
        with self._lock:
            self._kept.pop(key, None)
            self._kept[key] = message
            if len(self._kept) > MAX_KEPT_SETTLEMENTS:
                dropped = self._kept.popitem(last=False)[1]
        if dropped is not None:
            self._on_give_up(dropped, f"more than {MAX_KEPT_SETTLEMENTS} settlements unconfirmed")
        outcome = self._send(message)
        self._conclude(key, message, outcome)
        return outcome

    def retry(self) -> None:
        """Sends every kept settlement again, one after another; stops at the first without an answer."""
        with self._lock:
            if self._flushing or not self._kept:
                return
            self._flushing = True
            kept = list(self._kept.items())
        try:
            for key, message in kept:
                with self._lock:
                    if self._kept.get(key) is not message:
                        continue  # replaced or confirmed meanwhile
                outcome = self._send(message)
                refusal = self._conclude(key, message, outcome)
                if refusal is not None:
                    self._on_give_up(message, refusal)
                if not outcome.ok:
                    return
        finally:
            with self._lock:
                self._flushing = False

    def _conclude(self, key: str, message: Any, outcome: Outcome) -> Optional[str]:
        """Forgets the settlement once its answer is final; returns a definite refusal's text, else None."""
        if not outcome.ok:
            return None
        refusal: Optional[str] = None
        if outcome.kind == "error":
            if outcome.answer.code in _RETRYABLE:
                return None
            e = outcome.answer
            refusal = f"{error_code_name(e.code)} {e.detail}: {e.message}"
        elif outcome.kind not in _CONFIRMED:
            return None  # not an answer to a settlement: kept, the next re-send asks again
        with self._lock:
            if self._kept.get(key) is message:
                del self._kept[key]
        return refusal
