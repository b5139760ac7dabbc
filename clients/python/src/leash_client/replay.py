# The replay window: an envelope is accepted once, and only while its timestamp is near this clock.
# Memory, not storage; the same rules as @leash/wire's ReplayWindow (5 minutes, a hard size bound).
from __future__ import annotations

import time
from collections import OrderedDict
from typing import Callable

from .errors import WireError

DEFAULT_REPLAY_WINDOW_MS = 5 * 60 * 1000
DEFAULT_REPLAY_CAPACITY = 1_000_000


class ReplayWindow:
    def __init__(
        self,
        window_ms: int = DEFAULT_REPLAY_WINDOW_MS,
        capacity: int = DEFAULT_REPLAY_CAPACITY,
        clock_ns: Callable[[], int] = time.time_ns,
    ) -> None:
        self.window_ns = window_ms * 1_000_000
        self.capacity = capacity
        self._clock_ns = clock_ns
        self._ids: OrderedDict[str, int] = OrderedDict()  # id -> expiry (ns), in insertion order

    def admit(self, message_id: str, timestamp_ns: int) -> None:
        """Accepts and remembers `message_id` sent at `timestamp_ns`, or raises WireError."""
        if not message_id:
            raise WireError("invalid_envelope", "message_id is empty")
        now = self._clock_ns()
        skew = abs(timestamp_ns - now)
        if timestamp_ns <= 0 or skew > self.window_ns:
            what = "missing" if timestamp_ns <= 0 else f"{skew // 1_000_000} ms away from this clock"
            raise WireError("timestamp_out_of_window", f"envelope timestamp is {what}")
        while self._ids:
            first, expiry = next(iter(self._ids.items()))
            if expiry > now:
                break
            del self._ids[first]
        seen = self._ids.get(message_id)
        if seen is not None and seen > now:
            raise WireError("replayed_message", f"message id {message_id} was already accepted")
        if seen is not None:
            del self._ids[message_id]
        if len(self._ids) >= self.capacity:
            raise WireError("replay_cache_full", f"replay window holds {self.capacity} unexpired ids")
        self._ids[message_id] = timestamp_ns + self.window_ns
