# LeashClient: the agent's side of the sidecar daemon — register, pre_exec, post_exec, heartbeat and
# session state over the Unix socket or gRPC. pre_exec never raises: whatever goes wrong, it is a DENY.
from __future__ import annotations

import hashlib
import platform
import re
import secrets
import threading
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence, Union

from ._proto import shackle_pb2 as pb
from .envelope import MIN_KEY_BYTES, error_code_name
from .errors import LeashError, WireError
from .money import Money, money_from_wire, money_to_wire
from .params import params_on_wire
from .receipts import ed25519_available, receipt_problem
from .settlements import SettlementOutbox
from .tail import grpc_tail, socket_tail, tail_request_of
from .transport import Outcome, Transport
from .types import HeartbeatResult, PostExecResult, PreExecResult, RegisterResult, TailEntry

#: The spec's pre_exec SLA is 5 ms (§8); 50 ms leaves room for a loaded host before failing closed.
DEFAULT_TIMEOUT_MS = 50
DEFAULT_CONTROL_TIMEOUT_MS = 1000
DEFAULT_HEARTBEAT_INTERVAL_MS = 30_000
DEFAULT_RECONNECT: dict[str, float] = {"initial_delay_ms": 50, "max_delay_ms": 5000}

_MAX_UINT64 = 2**64 - 1
_VERDICTS = {pb.ALLOW: "ALLOW", pb.DENY: "DENY", pb.HITL: "HITL"}

Nonce = Union[int, str]


class LeashClient:
    """One agent's connection to `leash serve`. Give exactly one of socket_path (HMAC'd envelopes:
    hmac_key and key_id required) or grpc_address (TLS authenticates; grpc_credentials from
    grpc.ssl_channel_credentials(), or none for a plaintext loopback daemon)."""

    def __init__(
        self,
        *,
        organization_id: str,
        agent_id: str,
        socket_path: Optional[str] = None,
        grpc_address: Optional[str] = None,
        hmac_key: Union[bytes, str, None] = None,
        key_id: Optional[str] = None,
        daemon_public_key: Optional[str] = None,
        timeout_ms: float = DEFAULT_TIMEOUT_MS,
        control_timeout_ms: float = DEFAULT_CONTROL_TIMEOUT_MS,
        heartbeat_interval_ms: float = DEFAULT_HEARTBEAT_INTERVAL_MS,
        reconnect: Optional[Mapping[str, float]] = None,
        grpc_credentials: Optional[Any] = None,
        framework: str = "",
        agent_version: str = "",
        on_background_error: Optional[Callable[[BaseException], None]] = None,
    ) -> None:
        if (socket_path is None) == (grpc_address is None):
            raise LeashError("invalid_argument", "LeashClient: give exactly one of socket_path or grpc_address")
        for name, value in (("organization_id", organization_id), ("agent_id", agent_id)):
            if not isinstance(value, str) or value == "":
                raise LeashError("invalid_argument", f"LeashClient: {name} must be a non-empty string")
        if daemon_public_key is not None:
            if not isinstance(daemon_public_key, str) or re.fullmatch(r"[0-9a-fA-F]{64}", daemon_public_key) is None:
                raise LeashError(
                    "invalid_argument", "LeashClient: daemon_public_key must be 64 hex characters (Ed25519)"
                )
            if not ed25519_available():
                raise LeashError(
                    "invalid_argument",
                    "LeashClient: daemon_public_key needs the 'cryptography' package "
                    "(Debian python3-cryptography, or the leash-client[receipts] extra)",
                )
        self._timeout_s = _positive("timeout_ms", timeout_ms) / 1000
        self._control_timeout_s = _positive("control_timeout_ms", control_timeout_ms) / 1000
        if not isinstance(heartbeat_interval_ms, (int, float)) or heartbeat_interval_ms < 0:
            raise LeashError("invalid_argument", "LeashClient: heartbeat_interval_ms must be >= 0 (0 turns it off)")
        self._heartbeat_s = heartbeat_interval_ms / 1000
        self._organization_id = organization_id
        self._agent_id = agent_id
        self._public_key = daemon_public_key.lower() if daemon_public_key is not None else None
        self._framework = framework
        self._agent_version = agent_version
        self._on_background_error = on_background_error
        self._lock = threading.Lock()
        self._session_id: Optional[str] = None
        self._last_call: dict[str, int] = {}
        self._heartbeat_stop = threading.Event()
        self._heartbeat_thread: Optional[threading.Thread] = None
        self._transport: Transport
        self._outbox = SettlementOutbox(
            lambda message: self._transport.notify("post_exec", message, self._control_timeout_s),
            self._gave_up,
        )
        if socket_path is not None:
            if not isinstance(socket_path, str) or socket_path == "":
                raise LeashError("invalid_argument", "LeashClient: socket_path must be a non-empty string")
            key = _hmac_key_of(hmac_key)
            if not isinstance(key_id, str):
                raise LeashError("invalid_argument", "LeashClient: key_id must be a string (the HMAC key's id)")
            backoff = {**DEFAULT_RECONNECT, **(reconnect or {})}
            from .socket_transport import SocketTransport

            transport = SocketTransport(
                socket_path,
                key=key,
                key_id=key_id,
                initial_delay_ms=_positive("reconnect.initial_delay_ms", backoff["initial_delay_ms"]),
                max_delay_ms=_positive("reconnect.max_delay_ms", backoff["max_delay_ms"]),
                on_stray=self._stray,
                on_connected=self._outbox.retry,
            )
            transport.start()
            self._transport = transport
        else:
            if not isinstance(grpc_address, str) or grpc_address == "":
                raise LeashError("invalid_argument", "LeashClient: grpc_address must be HOST:PORT")
            try:
                from .grpc_transport import GrpcTransport
            except ImportError:
                raise LeashError(
                    "invalid_argument",
                    "LeashClient: grpc_address needs the 'grpcio' package "
                    "(Debian python3-grpcio, or the leash-client[grpc] extra)",
                ) from None
            self._transport = GrpcTransport(
                grpc_address, organization_id=organization_id, credentials=grpc_credentials
            )

    # -- lifecycle --------------------------------------------------------------------------------

    @property
    def session_id(self) -> Optional[str]:
        """The session of the last register(), or None before it."""
        return self._session_id

    @property
    def pending_settlements(self) -> int:
        """post_execs sent but not yet confirmed durable by the daemon (kept and sent again)."""
        return self._outbox.size

    def close(self) -> None:
        self._heartbeat_stop.set()
        self._transport.close()

    def __enter__(self) -> LeashClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- calls ------------------------------------------------------------------------------------

    def register(
        self,
        *,
        session_id: Optional[str] = None,
        framework: Optional[str] = None,
        metadata: Optional[Mapping[str, str]] = None,
    ) -> RegisterResult:
        """Opens (or resumes) a session; the policy comes from the daemon's configuration."""
        value = self._control(
            "register",
            pb.RegisterRequest(
                agent_id=self._agent_id,
                organization_id=self._organization_id,
                agent_version=self._agent_version,
                framework=framework if framework is not None else self._framework,
                session_id=session_id or "",
                runtime=f"python {platform.python_version()}",
                metadata=dict(metadata or {}),
            ),
            "register_response",
        )
        if value.session_id == "":
            raise LeashError("bad_response", "the daemon registered no session id")
        if value.negotiated_protocol != "":
            self._transport.protocol_version = value.negotiated_protocol
        self._session_id = value.session_id
        if self._heartbeat_s > 0 and self._heartbeat_thread is None:
            self._heartbeat_thread = threading.Thread(target=self._heartbeat_loop, name="leash-heartbeat", daemon=True)
            self._heartbeat_thread.start()
        return RegisterResult(
            session_id=value.session_id,
            daemon_version=value.daemon_version,
            negotiated_protocol=value.negotiated_protocol,
            active_config=value.active_config if value.HasField("active_config") else None,
            daemon_time_ns=value.daemon_time_ns,
        )

    def pre_exec(
        self,
        tool_name: str,
        params: Any = None,
        *,
        estimated_cost_usd: Money = 0,
        nonce: Optional[Nonce] = None,
        session_id: Optional[str] = None,
    ) -> PreExecResult:
        """The daemon's verdict, or a DENY the client decided itself (fail_closed=True). Never raises."""
        sid = session_id if session_id is not None else (self._session_id or "")
        params_hash: Optional[str] = None

        def deny(reason: str, detail: str) -> PreExecResult:
            return PreExecResult(
                session_id=sid if isinstance(sid, str) else "",
                call_number=0,
                verdict="DENY",
                reason=reason,
                budget_remaining_usd=None,
                params_hash=params_hash,
                entry_seq=None,
                entry_hash=None,
                receipt=None,
                fail_closed=True,
                detail=detail,
            )

        try:
            if not isinstance(sid, str) or sid == "":
                return deny("fail_closed:bad_request", "no session_id given and register() has not run")
            if not isinstance(tool_name, str) or tool_name == "":
                return deny("fail_closed:bad_request", "tool_name must be a non-empty string")
            json_text, params_hash = params_on_wire(params)
            try:
                estimate = money_to_wire(estimated_cost_usd)
                wire_nonce = _nonce_of(nonce)
            except (WireError, ValueError) as error:
                return deny("fail_closed:bad_request", str(error))
            request = pb.PreExecRequest(
                session_id=sid,
                call_number=self._last_call.get(sid, 0) + 1,
                tool_name=tool_name,
                tool_params_json=json_text,
                estimated_cost_usd=estimate[0],
                estimated_cost_usd_decimal=estimate[1],
                nonce=wire_nonce,
            )
            if params_hash is not None:
                request.tool_params_hash = bytes.fromhex(params_hash)
            outcome = self._transport.request("pre_exec", request, self._timeout_s)
            if not outcome.ok:
                return deny(f"fail_closed:{outcome.failure}", outcome.message)
            if outcome.kind == "error":
                e = outcome.answer
                return deny("fail_closed:daemon_error", f"{error_code_name(e.code)} {e.detail}: {e.message}")
            if outcome.kind != "pre_exec_response":
                return deny("fail_closed:bad_response", f"the daemon answered {outcome.kind} to a pre_exec")
            r: pb.PreExecResponse = outcome.answer
            if r.session_id != sid:
                return deny("fail_closed:bad_response", f"a verdict for session {r.session_id!r}")
            if r.reason == "":
                return deny("fail_closed:bad_response", "a verdict without its reason")
            try:
                remaining = money_from_wire(
                    r.budget_remaining_usd, r.budget_remaining_usd_decimal, "budget_remaining_usd"
                )
            except WireError as error:
                return deny("fail_closed:bad_response", str(error))
            result = PreExecResult(
                session_id=sid,
                call_number=r.call_number,
                # UNSPECIFIED or a value this client does not know is DENY (shackle.proto Verdict).
                verdict=_VERDICTS.get(r.verdict, "DENY"),  # type: ignore[arg-type]
                reason=r.reason,
                budget_remaining_usd=remaining,
                params_hash=params_hash,
                entry_seq=r.chain_seq,
                entry_hash=r.entry_hash,
                receipt=r.receipt if r.receipt != "" else None,
                fail_closed=False,
            )
            with self._lock:
                if result.call_number > self._last_call.get(sid, 0):
                    self._last_call[sid] = result.call_number
            if self._public_key is not None:
                problem = receipt_problem(
                    r.receipt,
                    self._public_key,
                    session_id=sid,
                    call_number=result.call_number,
                    tool_name=tool_name,
                    params_hash=params_hash,
                    nonce=str(wire_nonce),
                    verdict=result.verdict,
                    reason=result.reason,
                    entry_hash=r.entry_hash,
                    entry_seq=r.chain_seq,
                )
                if problem is not None:
                    return deny("fail_closed:bad_receipt", problem)
            return result
        except Exception as error:
            # Whatever went wrong, the answer is DENY, never an exception a caller might swallow.
            return deny("fail_closed:bad_request", f"{type(error).__name__}: {error}")

    def post_exec(
        self,
        call_number: int,
        actual_cost_usd: Money,
        *,
        session_id: Optional[str] = None,
        success: bool = True,
        error_message: str = "",
        duration_ms: float = 0,
        tokens_in: int = 0,
        tokens_out: int = 0,
        model_used: str = "",
        idempotency_key: str = "",
    ) -> PostExecResult:
        """Settles the call's budget hold; returns once the daemon has it durably (its post_exec_ack;
        gRPC's Empty). Without an answer (a timeout, a daemon stopped or gone) it raises, but the
        client keeps the settlement and sends it again after the next reconnect, heartbeat or
        post_exec until the daemon confirms it (one settlement per call is recorded). A refusal of a
        re-send goes to on_background_error; a refusal now raises daemon_error."""
        sid = self._session_of(session_id)
        if isinstance(call_number, bool) or not isinstance(call_number, int) or not 1 <= call_number <= _MAX_UINT64:
            raise LeashError("invalid_argument", "post_exec: call_number must be an integer >= 1")
        try:
            cost = money_to_wire(actual_cost_usd)
        except WireError as error:
            raise LeashError("invalid_argument", f"post_exec: actual_cost_usd: {error}") from None
        if self._outbox.size > 0:  # earlier settlements still unconfirmed: sent again beside this one
            threading.Thread(target=self._outbox.retry, name="leash-settlements", daemon=True).start()
        outcome = self._outbox.send(
            f"{sid}#{call_number}",
            pb.PostExecNotification(
                session_id=sid,
                call_number=call_number,
                actual_cost_usd=cost[0],
                actual_cost_usd_decimal=cost[1],
                success=success,
                error_message=error_message,
                duration_ms=max(0, int(duration_ms)),
                tokens_in=tokens_in,
                tokens_out=tokens_out,
                model_used=model_used,
                idempotency_key=idempotency_key,
                ack_requested=True,
            ),
        )
        if not outcome.ok:
            raise LeashError(
                outcome.failure or "bad_response", f"{outcome.message} (the settlement is kept and sent again)"
            )
        if outcome.kind == "error":
            e = outcome.answer
            raise LeashError("daemon_error", f"the daemon refused: {error_code_name(e.code)} {e.detail}: {e.message}")
        if outcome.kind not in ("post_exec_ack", "empty"):
            raise LeashError("bad_response", f"the daemon answered {outcome.kind} to a post_exec")
        return PostExecResult(session_id=sid, call_number=call_number)

    def heartbeat(self) -> HeartbeatResult:
        """§4.5: the daemon's view of the session's budget. Raises LeashError."""
        sid = self._session_of(None)
        ack = self._control(
            "heartbeat",
            pb.Heartbeat(session_id=sid, last_call_number=self._last_call.get(sid, 0)),
            "heartbeat_ack",
        )
        try:
            remaining = money_from_wire(
                ack.daemon_budget_remaining, ack.daemon_budget_remaining_decimal, "daemon_budget_remaining"
            )
        except WireError as error:
            raise LeashError("bad_response", str(error)) from None
        return HeartbeatResult(
            session_id=ack.session_id,
            daemon_budget_remaining_usd=remaining,
            drift_detected=ack.drift_detected,
            daemon_time_ns=ack.daemon_time_ns,
        )

    def get_session(self, session_id: Optional[str] = None) -> pb.SessionState:
        """§5.1's SessionState of this (or the given) session. Raises LeashError."""
        state: pb.SessionState = self._control(
            "get_session_state", pb.GetSessionStateRequest(session_id=self._session_of(session_id)), "session_state"
        )
        return state

    def tail(
        self,
        *,
        after_seq: Optional[int] = None,
        last: Optional[int] = None,
        session_id: Optional[str] = None,
        kinds: Optional[Sequence[str]] = None,
        follow: bool = False,
        limit: Optional[int] = None,
        stop: Optional[threading.Event] = None,
    ) -> Iterator[TailEntry]:
        """Your organization's audit chain entries, oldest first (`leash tail --daemon`): the whole chain
        by default, after `after_seq`, or the latest `last`; with `follow`, then each new one until `stop`
        is set. A dead daemon, a refusal or an answer that does not fit raises LeashError (fail closed)."""
        request = tail_request_of(
            after_seq=after_seq, last=last, session_id=session_id, kinds=kinds, follow=follow, limit=limit
        )
        from .grpc_transport import GrpcTransport

        if isinstance(self._transport, GrpcTransport):
            import grpc

            return grpc_tail(self._transport.tail_stream(request), grpc, request, stop)
        return socket_tail(self._transport, request, stop)

    # -- internals --------------------------------------------------------------------------------

    def _control(self, payload: str, message: Any, expected: str) -> Any:
        """A control request's answer of the expected kind, or a raised LeashError."""
        outcome: Outcome = self._transport.request(payload, message, self._control_timeout_s)
        if not outcome.ok:
            raise LeashError(outcome.failure or "bad_response", outcome.message)
        if outcome.kind == "error":
            e = outcome.answer
            raise LeashError("daemon_error", f"the daemon refused: {error_code_name(e.code)} {e.detail}: {e.message}")
        if outcome.kind != expected:
            raise LeashError("bad_response", f"the daemon answered {outcome.kind} to a {payload}")
        return outcome.answer

    def _session_of(self, given: Optional[str]) -> str:
        sid = given if given is not None else self._session_id
        if not isinstance(sid, str) or sid == "":
            raise LeashError("invalid_argument", "no session_id given and register() has not run")
        return sid

    def _heartbeat_loop(self) -> None:
        while not self._heartbeat_stop.wait(self._heartbeat_s):
            self._outbox.retry()
            try:
                self.heartbeat()
            except Exception as error:
                if self._on_background_error is not None:
                    self._on_background_error(error)

    def _gave_up(self, message: Any, why: str) -> None:
        if self._on_background_error is not None:
            self._on_background_error(
                LeashError(
                    "daemon_error",
                    f"the settlement of call {message.call_number} of session {message.session_id} "
                    f"was not recorded: {why}",
                )
            )

    def _stray(self, envelope: pb.Envelope) -> None:
        if envelope.WhichOneof("payload") != "error" or self._on_background_error is None:
            return
        e = envelope.error
        self._on_background_error(
            LeashError(
                "daemon_error",
                f"the daemon refused a notification or late request: {error_code_name(e.code)} {e.detail}: {e.message}",
            )
        )


def _nonce_of(nonce: Optional[Nonce]) -> int:
    """The uint64 nonce to send: an integer or uint64 decimal as given; any other text (a UUID)
    maps to 52 bits of its SHA-256, plus one. Default: a random integer below 2^53 + 1, exact
    however the daemon reads it."""
    if nonce is None:
        return secrets.randbits(53) + 1
    if isinstance(nonce, bool):
        raise ValueError("nonce must be a non-empty string or an integer")
    if isinstance(nonce, int):
        if not 1 <= nonce <= _MAX_UINT64:
            raise ValueError(f"nonce {nonce} is outside 1 … 2^64 − 1")
        return nonce
    if not isinstance(nonce, str) or nonce == "":
        raise ValueError("nonce must be a non-empty string or an integer")
    if re.fullmatch(r"[1-9][0-9]{0,19}", nonce) and int(nonce) <= _MAX_UINT64:
        return int(nonce)
    digest = hashlib.sha256(nonce.encode("utf-8")).digest()
    return (int.from_bytes(digest[:8], "big") >> 12) + 1


def _hmac_key_of(key: Union[bytes, str, None]) -> bytes:
    if isinstance(key, str):
        text = key.strip()
        if re.fullmatch(r"([0-9a-fA-F]{2})+", text) is None:
            raise LeashError("invalid_argument", "LeashClient: hmac_key is not hex")
        raw = bytes.fromhex(text)
    elif isinstance(key, (bytes, bytearray)):
        raw = bytes(key)
    else:
        raise LeashError("invalid_argument", "LeashClient: hmac_key (bytes or hex) is required with socket_path")
    if len(raw) < MIN_KEY_BYTES:
        raise LeashError("invalid_argument", f"LeashClient: hmac_key must be at least {MIN_KEY_BYTES} bytes")
    return raw


def _positive(name: str, value: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0 or value == float("inf"):
        raise LeashError("invalid_argument", f"LeashClient: {name} must be > 0")
    return float(value)
