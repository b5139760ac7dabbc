# The gRPC transport: the standard ShackleDaemon service through grpcio's generic unary-unary calls
# (paths and protobuf (de)serializers, no generated stubs). Bare messages: TLS, not HMAC, authenticates.
from __future__ import annotations

from typing import Any, Optional

from ._proto import shackle_pb2 as pb
from .envelope import PROTOCOL_VERSION
from .errors import LeashError
from .transport import Outcome, failed

SERVICE = "/shackle.sp1.ShackleDaemon/"
#: The daemon's metadata (packages/daemon/src/grpc.ts): who the caller is (insecure loopback mode
#: only), the version it speaks, and on a refusal the Appendix B code name and detail.
ORGANIZATION_METADATA = "leash-organization"
PROTOCOL_VERSION_METADATA = "leash-protocol-version"
ERROR_CODE_METADATA = "leash-error-code"
ERROR_DETAIL_METADATA = "leash-error-detail"

# payload name -> (method, request type, response type, answer payload name as on the socket)
_METHODS: dict[str, tuple[str, Any, Any, str]] = {
    "register": ("Register", pb.RegisterRequest, pb.RegisterResponse, "register_response"),
    "pre_exec": ("PreExec", pb.PreExecRequest, pb.PreExecResponse, "pre_exec_response"),
    "post_exec": ("PostExec", pb.PostExecNotification, None, "empty"),
    "heartbeat": ("Heartbeat", pb.Heartbeat, pb.HeartbeatAck, "heartbeat_ack"),
    "get_session_state": ("GetSessionState", pb.GetSessionStateRequest, pb.SessionState, "session_state"),
}


class GrpcTransport:
    def __init__(self, address: str, *, organization_id: str, credentials: Optional[Any] = None) -> None:
        import grpc
        from google.protobuf import empty_pb2

        self._grpc = grpc
        self._organization_id = organization_id
        self._channel = (
            grpc.insecure_channel(address) if credentials is None else grpc.secure_channel(address, credentials)
        )
        self._calls = {
            payload: self._channel.unary_unary(
                SERVICE + method,
                request_serializer=request.SerializeToString,
                response_deserializer=(response or empty_pb2.Empty).FromString,
            )
            for payload, (method, request, response, _) in _METHODS.items()
        }
        self._tail = self._channel.unary_stream(
            SERVICE + "TailEntries",
            request_serializer=pb.TailRequest.SerializeToString,
            response_deserializer=pb.TailEvent.FromString,
        )
        self._closed = False
        self.protocol_version = PROTOCOL_VERSION

    def request(self, payload: str, message: Any, timeout_s: float) -> Outcome:
        if self._closed:
            return failed("daemon_unavailable", "the client is closed")
        grpc = self._grpc
        metadata = (
            (ORGANIZATION_METADATA, self._organization_id),
            (PROTOCOL_VERSION_METADATA, self.protocol_version),
        )
        try:
            answer = self._calls[payload](message, timeout=timeout_s, metadata=metadata)
        except grpc.RpcError as error:
            return _outcome_of_status(grpc, error, timeout_s)
        except Exception as error:  # a serializer or channel problem: no answer to trust
            return failed("bad_response", f"gRPC call failed: {error}")
        return Outcome(ok=True, kind=_METHODS[payload][3], answer=answer)

    def tail_stream(self, request: Any) -> Any:
        """The TailEntries call: iterate it for TailEvents; cancel() ends it. Bounded unless following."""
        if self._closed:
            raise LeashError("daemon_unavailable", "the client is closed")
        metadata = (
            (ORGANIZATION_METADATA, self._organization_id),
            (PROTOCOL_VERSION_METADATA, self.protocol_version),
        )
        return self._tail(request, metadata=metadata, timeout=None if request.follow else 60.0)

    def notify(self, payload: str, message: Any, timeout_s: float) -> Outcome:
        # PostExec answers Empty on gRPC once the settlement is durable, or a refusal.
        return self.request(payload, message, timeout_s)

    def close(self) -> None:
        self._closed = True
        self._channel.close()


def _outcome_of_status(grpc: Any, error: Any, timeout_s: float) -> Outcome:
    code = error.code() if callable(getattr(error, "code", None)) else None
    details = error.details() if callable(getattr(error, "details", None)) else str(error)
    trailing = dict(error.trailing_metadata() or ()) if callable(getattr(error, "trailing_metadata", None)) else {}
    if ERROR_CODE_METADATA in trailing:
        # The daemon refused with an SP/1.0 Error: the same answer the socket gives, as a message.
        name = str(trailing[ERROR_CODE_METADATA])
        refusal = pb.Error(
            code=pb.ErrorCode.Value(name) if name in pb.ErrorCode.keys() else pb.ERROR_CODE_UNSPECIFIED,
            message=details or "",
            detail=str(trailing.get(ERROR_DETAIL_METADATA, "")),
        )
        return Outcome(ok=True, kind="error", answer=refusal)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return failed("timeout", f"no answer within {round(timeout_s * 1000)} ms")
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED):
        return failed("daemon_unavailable", f"gRPC {code.name}: {details}")
    return failed("bad_response", f"gRPC {getattr(code, 'name', code)}: {details}")
