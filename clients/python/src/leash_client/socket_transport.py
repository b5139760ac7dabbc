# One Unix-socket connection to the daemon, kept up by itself: framing, HMAC, replay checks, requests
# in flight paired by correlation id, reconnect with backoff. Thread-safe; it decides nothing.
from __future__ import annotations

import random
import select
import socket
import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Optional

from ._proto import shackle_pb2 as pb
from .envelope import PROTOCOL_VERSION, error_code_name, open_daemon_envelope, seal_envelope
from .errors import WireError
from .framing import FrameDecoder, encode_frame
from .replay import ReplayWindow
from .transport import Outcome, failed

#: How many timed-out ids are remembered, so their late answers are ignored rather than suspect.
_LATE_IDS = 1024


class _Waiter:
    __slots__ = ("event", "outcome")

    def __init__(self) -> None:
        self.event = threading.Event()
        self.outcome: Optional[Outcome] = None

    def settle(self, outcome: Outcome) -> None:
        self.outcome = outcome
        self.event.set()


class SocketTransport:
    def __init__(
        self,
        path: str,
        *,
        key: bytes,
        key_id: str,
        initial_delay_ms: float,
        max_delay_ms: float,
        on_stray: Callable[[pb.Envelope], None],
        on_connected: Optional[Callable[[], None]] = None,
    ) -> None:
        self._path = path
        self._key = key
        self._key_id = key_id
        self._initial_s = initial_delay_ms / 1000
        self._max_s = max_delay_ms / 1000
        self._on_stray = on_stray
        self._on_connected = on_connected
        self._lock = threading.Lock()
        self._send_lock = threading.Lock()
        self._connect_lock = threading.Lock()
        self._sock: Optional[socket.socket] = None
        self._pending: dict[str, _Waiter] = {}
        self._late: OrderedDict[str, None] = OrderedDict()
        # One per client: a daemon envelope is accepted once, on whichever connection it arrives.
        self._replay = ReplayWindow()
        self._attempts = 0
        self._retry_at = 0.0  # time.monotonic() before which calls do not reconnect (backoff)
        self._closed = False
        self.protocol_version = PROTOCOL_VERSION

    def start(self) -> None:
        """Connects now (a failure only starts the backoff), as @leash/client does at createClient."""
        self._connect(1.0)

    # -- requests ---------------------------------------------------------------------------------

    def request(self, payload: str, message: Any, timeout_s: float) -> Outcome:
        started = time.monotonic()
        ready = self._ready(timeout_s)
        if isinstance(ready, Outcome):
            return ready
        message_id, body = seal_envelope(
            payload, message, key=self._key, key_id=self._key_id, protocol_version=self.protocol_version
        )
        waiter = _Waiter()
        with self._lock:
            self._pending[message_id] = waiter
        sent = self._send(ready, body, started + timeout_s)
        if sent is not None:
            with self._lock:
                self._pending.pop(message_id, None)
            return sent
        remaining = max(0.001, timeout_s - (time.monotonic() - started))
        if not waiter.event.wait(remaining):
            with self._lock:
                if self._pending.pop(message_id, None) is not None:
                    self._remember_late(message_id)
                    return failed("timeout", f"no answer within {round(timeout_s * 1000)} ms")
        assert waiter.outcome is not None
        return waiter.outcome

    def notify(self, payload: str, message: Any, timeout_s: float) -> Outcome:
        # A post_exec with ack_requested: a written frame is not a recorded settlement (the daemon may
        # be stopped or die first), so wait for its post_exec_ack or Error as for any request.
        return self.request(payload, message, timeout_s)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            sock, self._sock = self._sock, None
            waiters = self._take_pending()
        if sock is not None:
            _shut(sock)
        for w in waiters:
            w.settle(failed("daemon_unavailable", "the client is closed"))

    # -- connection -------------------------------------------------------------------------------

    def _ready(self, timeout_s: float) -> socket.socket | Outcome:
        with self._lock:
            if self._closed:
                return failed("daemon_unavailable", "the client is closed")
            if self._sock is not None:
                return self._sock
            if time.monotonic() < self._retry_at:
                # In backoff: answer now rather than hammer a daemon that just refused.
                return failed("daemon_unavailable", "not connected to the daemon (retrying)")
        return self._connect(timeout_s)

    def _connect(self, timeout_s: float) -> socket.socket | Outcome:
        with self._connect_lock:
            with self._lock:
                if self._sock is not None:
                    return self._sock
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout_s)
            try:
                sock.connect(self._path)
            except socket.timeout:
                sock.close()
                self._schedule_retry()
                return failed("timeout", f"no connection within {round(timeout_s * 1000)} ms")
            except OSError as error:
                sock.close()
                self._schedule_retry()
                return failed("daemon_unavailable", f"cannot connect to {self._path}: {error.strerror or error}")
            sock.settimeout(None)
            with self._lock:
                if self._closed:
                    _shut(sock)
                    return failed("daemon_unavailable", "the client is closed")
                self._sock = sock
                self._attempts = 0
                self._retry_at = 0.0
            threading.Thread(target=self._read_loop, args=(sock,), name="leash-client-reader", daemon=True).start()
            if self._on_connected is not None:
                # Off this thread: the listener sends requests, which must not wait on this connect.
                threading.Thread(target=self._on_connected, name="leash-client-connected", daemon=True).start()
            return sock

    def _send(self, sock: socket.socket, body: bytes, deadline: float) -> Optional[Outcome]:
        """Writes one whole frame by `deadline` (time.monotonic()), or says why not. Never blocks past
        it: a daemon that stopped reading (SIGSTOP, a full buffer) is a timeout, as on the answer."""
        frame = memoryview(encode_frame(body))
        if not self._send_lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return failed("timeout", "the connection stayed busy until the deadline")
        try:
            while frame:
                try:
                    frame = frame[sock.send(frame, socket.MSG_DONTWAIT) :]
                except BlockingIOError:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0 or not select.select([], [sock], [], remaining)[1]:
                        # Half a frame may be out: the stream cannot go on, so the connection goes.
                        self._lost(sock, "the daemon stopped reading")
                        return failed("timeout", "the daemon did not take the request before the deadline")
        except OSError:
            self._lost(sock, "the daemon closed the connection")
            return failed("daemon_unavailable", "cannot write to the daemon")
        finally:
            self._send_lock.release()
        return None

    def _read_loop(self, sock: socket.socket) -> None:
        decoder = FrameDecoder()
        while True:
            try:
                chunk = sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                self._lost(sock, "the daemon closed the connection")
                return
            try:
                bodies = decoder.push(chunk)
            except WireError as error:
                self._distrust(sock, f"unreadable frame from the daemon: {error}")
                return
            for body in bodies:
                if not self._receive(sock, body):
                    return

    def _receive(self, sock: socket.socket, body: bytes) -> bool:
        """Routes one frame to its request; False when the stream was dropped as untrustworthy."""
        try:
            with self._lock:
                envelope = open_daemon_envelope(body, key=self._key, replay=self._replay)
        except WireError as error:
            # Its correlation id cannot be trusted either, so no request can take it: all fail closed.
            refused = _key_refusal_of(body)
            if refused is not None:
                # The likely cause first: a wrong hmac_key or key_id (the refusal is unsigned; it
                # changes nothing about the DENY).
                self._drop(sock, failed("auth_failed", f"the daemon refused our key ({refused}): check hmac_key "
                                        f"and key_id against its config (its answer is unsigned: {error})"))
                return False
            self._distrust(sock, f"the daemon's answer does not authenticate: {error}{_refusal_of(body)}")
            return False
        kind = envelope.WhichOneof("payload") or ""
        with self._lock:
            waiter = self._pending.pop(envelope.correlation_id, None)
            late = waiter is None and envelope.correlation_id in self._late
            if late:
                del self._late[envelope.correlation_id]
        if waiter is not None:
            waiter.settle(Outcome(ok=True, kind=kind, answer=getattr(envelope, kind)))
            return True
        if late:
            # The answer to a request that timed out, or to a notification: authentic, just unawaited.
            self._on_stray(envelope)
            return True
        self._distrust(sock, f"an answer for correlation id {envelope.correlation_id!r}, which no request has")
        return False

    def _lost(self, sock: socket.socket, message: str) -> None:
        self._drop(sock, failed("daemon_unavailable", message))

    def _distrust(self, sock: socket.socket, message: str) -> None:
        """Fails every request in flight as bad_response and drops the connection (a new one follows)."""
        self._drop(sock, failed("bad_response", message))

    def _drop(self, sock: socket.socket, outcome: Outcome) -> None:
        with self._lock:
            if self._sock is not sock:
                return
            self._sock = None
            waiters = self._take_pending()
        _shut(sock)
        for w in waiters:
            w.settle(outcome)
        self._schedule_retry()

    def _take_pending(self) -> list[_Waiter]:
        waiters = list(self._pending.values())
        self._pending.clear()
        return waiters

    def _schedule_retry(self) -> None:
        with self._lock:
            ceiling = min(self._max_s, self._initial_s * 2 ** min(self._attempts, 30))
            self._attempts += 1
            # "Equal jitter": half the delay fixed, half random, so many agents do not reconnect in step.
            self._retry_at = time.monotonic() + ceiling / 2 + random.random() * ceiling / 2

    def _remember_late(self, message_id: str) -> None:
        self._late[message_id] = None
        if len(self._late) > _LATE_IDS:
            self._late.popitem(last=False)


def _shut(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _refusal_of(body: bytes) -> str:
    """What an unauthenticated Error says, for the operator's eyes only; it changes nothing."""
    try:
        envelope = pb.Envelope.FromString(body)
    except Exception:
        return ""
    if envelope.WhichOneof("payload") != "error":
        return ""
    return f" (unauthenticated Error: {error_code_name(envelope.error.code)} {envelope.error.detail})"


def _key_refusal_of(body: bytes) -> Optional[str]:
    """The detail of an unsigned AUTHENTICATION_FAILED Error (bad_hmac, unknown_key, …), else None."""
    try:
        envelope = pb.Envelope.FromString(body)
    except Exception:
        return None
    if envelope.WhichOneof("payload") != "error" or envelope.error.code != pb.AUTHENTICATION_FAILED:
        return None
    return envelope.error.detail or "authentication_failed"
