from google.protobuf import empty_pb2 as _empty_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Iterable as _Iterable, Mapping as _Mapping, Optional as _Optional, Union as _Union

ACTIVE: SessionStatus
ALLOW: Verdict
AUTHENTICATION_FAILED: ErrorCode
BUDGET_EXHAUSTED: DenyReason
BUDGET_OVERRUN: DenyReason
BUDGET_THRESHOLD: DenyReason
CIRCUIT_OPEN: DenyReason
DAEMON_UNAVAILABLE: ErrorCode
DENY: Verdict
DESCRIPTOR: _descriptor.FileDescriptor
DUPLICATE_NONCE: DenyReason
DUPLICATE_RESUME_NO_EFFECT: DenyReason
ERROR_AMPLIFIED_REPEAT: DenyReason
ERROR_CODE_UNSPECIFIED: ErrorCode
GLOBAL_LIMIT: DenyReason
HITL: Verdict
HITL_ALL_CALLS: DenyReason
HITL_ALWAYS: HitlMode
HITL_CONSUMED: HitlStatus
HITL_DECIDED: HitlStatus
HITL_DECISION_APPROVE: HitlDecisionKind
HITL_DECISION_DEFER: HitlDecisionKind
HITL_DECISION_ESCALATE: HitlDecisionKind
HITL_DECISION_MODIFY: HitlDecisionKind
HITL_DECISION_REJECT: HitlDecisionKind
HITL_DECISION_UNSPECIFIED: HitlDecisionKind
HITL_DEFER_ESCALATE: DenyReason
HITL_DIGEST_MISMATCH: DenyReason
HITL_EXPIRED: HitlStatus
HITL_NEVER: HitlMode
HITL_NONCE_MISMATCH: DenyReason
HITL_ON_BUDGET_THRESHOLD: HitlMode
HITL_ON_DENY: HitlMode
HITL_PENDING: HitlStatus
HITL_REJECT: DenyReason
HITL_STATUS_UNSPECIFIED: HitlStatus
HITL_SUPERSEDED_ORIGINAL: DenyReason
HITL_TERMINAL_NO_EFFECT: DenyReason
HITL_TOOL_MISMATCH: DenyReason
HITL_UNBOUND_AUTHORIZATION: DenyReason
HITL_UNKNOWN_DECISION: DenyReason
INVALID_MESSAGE: ErrorCode
MALFORMED_INPUT: DenyReason
MAX_REPEAT_EXCEEDED: DenyReason
MESSAGE_TOO_LARGE: ErrorCode
NONE: DenyReason
OPAQUE_CONTEXT: DenyReason
ORGANIZATION_QUOTA_EXCEEDED: ErrorCode
OTHER: DenyReason
PARAMS_HASH_MISMATCH: DenyReason
PARENT_GUARD_DENIED: ErrorCode
PAUSED: SessionStatus
PER_AGENT: BudgetScope
PER_ORGANIZATION: BudgetScope
PER_SESSION: BudgetScope
PROBABILISTIC_DENY: DenyReason
PROTOCOL_VERSION_MISMATCH: ErrorCode
RATE_LIMITED: ErrorCode
SESSION_NOT_FOUND: ErrorCode
STALE: SessionStatus
TERMINATED: SessionStatus
TIMEOUT: DenyReason
TOOL_DENIED: DenyReason
VERDICT_UNSPECIFIED: Verdict
WINDOW_EXCEEDED: DenyReason

class AnswerHitlRequest(_message.Message):
    __slots__ = ["decision", "request_id"]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    decision: HitlDecision
    request_id: str
    def __init__(self, request_id: _Optional[str] = ..., decision: _Optional[_Union[HitlDecision, _Mapping]] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ["agent_id", "budget_after_usd", "budget_after_usd_decimal", "budget_before_usd", "budget_before_usd_decimal", "call_number", "chain_seq", "deny_reason", "entry_hash", "entry_id", "operator_id", "organization_id", "previous_entry_hash", "reason", "receipt", "session_id", "signature", "timestamp_ns", "tool_name", "tool_params_hash", "verdict"]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_AFTER_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_AFTER_USD_FIELD_NUMBER: _ClassVar[int]
    BUDGET_BEFORE_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_BEFORE_USD_FIELD_NUMBER: _ClassVar[int]
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    CHAIN_SEQ_FIELD_NUMBER: _ClassVar[int]
    DENY_REASON_FIELD_NUMBER: _ClassVar[int]
    ENTRY_HASH_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_ID_FIELD_NUMBER: _ClassVar[int]
    ORGANIZATION_ID_FIELD_NUMBER: _ClassVar[int]
    PREVIOUS_ENTRY_HASH_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNATURE_FIELD_NUMBER: _ClassVar[int]
    TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_PARAMS_HASH_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    budget_after_usd: float
    budget_after_usd_decimal: str
    budget_before_usd: float
    budget_before_usd_decimal: str
    call_number: int
    chain_seq: int
    deny_reason: DenyReason
    entry_hash: str
    entry_id: str
    operator_id: str
    organization_id: str
    previous_entry_hash: bytes
    reason: str
    receipt: str
    session_id: str
    signature: bytes
    timestamp_ns: int
    tool_name: str
    tool_params_hash: bytes
    verdict: Verdict
    def __init__(self, entry_id: _Optional[str] = ..., timestamp_ns: _Optional[int] = ..., session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., organization_id: _Optional[str] = ..., call_number: _Optional[int] = ..., tool_name: _Optional[str] = ..., tool_params_hash: _Optional[bytes] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., deny_reason: _Optional[_Union[DenyReason, str]] = ..., budget_before_usd: _Optional[float] = ..., budget_after_usd: _Optional[float] = ..., operator_id: _Optional[str] = ..., signature: _Optional[bytes] = ..., previous_entry_hash: _Optional[bytes] = ..., reason: _Optional[str] = ..., budget_before_usd_decimal: _Optional[str] = ..., budget_after_usd_decimal: _Optional[str] = ..., chain_seq: _Optional[int] = ..., entry_hash: _Optional[str] = ..., receipt: _Optional[str] = ...) -> None: ...

class ConsoleEvent(_message.Message):
    __slots__ = ["correlation_id", "error", "hello", "list", "request", "update"]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HELLO_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    UPDATE_FIELD_NUMBER: _ClassVar[int]
    correlation_id: str
    error: Error
    hello: ConsoleHello
    list: ListHitlResponse
    request: HitlRequestView
    update: HitlUpdate
    def __init__(self, correlation_id: _Optional[str] = ..., hello: _Optional[_Union[ConsoleHello, _Mapping]] = ..., list: _Optional[_Union[ListHitlResponse, _Mapping]] = ..., request: _Optional[_Union[HitlRequestView, _Mapping]] = ..., update: _Optional[_Union[HitlUpdate, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ...) -> None: ...

class ConsoleHello(_message.Message):
    __slots__ = ["daemon_time_ns", "daemon_version", "operator_id", "readonly"]
    DAEMON_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_ID_FIELD_NUMBER: _ClassVar[int]
    READONLY_FIELD_NUMBER: _ClassVar[int]
    daemon_time_ns: int
    daemon_version: str
    operator_id: str
    readonly: bool
    def __init__(self, operator_id: _Optional[str] = ..., readonly: bool = ..., daemon_version: _Optional[str] = ..., daemon_time_ns: _Optional[int] = ...) -> None: ...

class ConsoleRequest(_message.Message):
    __slots__ = ["answer", "correlation_id", "get", "list"]
    ANSWER_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    GET_FIELD_NUMBER: _ClassVar[int]
    LIST_FIELD_NUMBER: _ClassVar[int]
    answer: AnswerHitlRequest
    correlation_id: str
    get: GetHitlRequest
    list: ListHitlRequest
    def __init__(self, correlation_id: _Optional[str] = ..., list: _Optional[_Union[ListHitlRequest, _Mapping]] = ..., get: _Optional[_Union[GetHitlRequest, _Mapping]] = ..., answer: _Optional[_Union[AnswerHitlRequest, _Mapping]] = ...) -> None: ...

class Envelope(_message.Message):
    __slots__ = ["client_timestamp_ns", "correlation_id", "error", "get_session_state", "heartbeat", "heartbeat_ack", "hitl_update", "hmac", "key_id", "message_id", "post_exec", "post_exec_ack", "pre_exec", "pre_exec_response", "protocol_version", "register", "register_response", "server_timestamp_ns", "session_state", "tail_batch", "tail_entries", "wait_hitl"]
    CLIENT_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    CORRELATION_ID_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    GET_SESSION_STATE_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_ACK_FIELD_NUMBER: _ClassVar[int]
    HEARTBEAT_FIELD_NUMBER: _ClassVar[int]
    HITL_UPDATE_FIELD_NUMBER: _ClassVar[int]
    HMAC_FIELD_NUMBER: _ClassVar[int]
    KEY_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    POST_EXEC_ACK_FIELD_NUMBER: _ClassVar[int]
    POST_EXEC_FIELD_NUMBER: _ClassVar[int]
    PRE_EXEC_FIELD_NUMBER: _ClassVar[int]
    PRE_EXEC_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    PROTOCOL_VERSION_FIELD_NUMBER: _ClassVar[int]
    REGISTER_FIELD_NUMBER: _ClassVar[int]
    REGISTER_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    SERVER_TIMESTAMP_NS_FIELD_NUMBER: _ClassVar[int]
    SESSION_STATE_FIELD_NUMBER: _ClassVar[int]
    TAIL_BATCH_FIELD_NUMBER: _ClassVar[int]
    TAIL_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    WAIT_HITL_FIELD_NUMBER: _ClassVar[int]
    client_timestamp_ns: int
    correlation_id: str
    error: Error
    get_session_state: GetSessionStateRequest
    heartbeat: Heartbeat
    heartbeat_ack: HeartbeatAck
    hitl_update: HitlUpdate
    hmac: bytes
    key_id: str
    message_id: str
    post_exec: PostExecNotification
    post_exec_ack: PostExecAck
    pre_exec: PreExecRequest
    pre_exec_response: PreExecResponse
    protocol_version: str
    register: RegisterRequest
    register_response: RegisterResponse
    server_timestamp_ns: int
    session_state: SessionState
    tail_batch: TailBatch
    tail_entries: TailRequest
    wait_hitl: WaitHitlRequest
    def __init__(self, protocol_version: _Optional[str] = ..., message_id: _Optional[str] = ..., correlation_id: _Optional[str] = ..., client_timestamp_ns: _Optional[int] = ..., server_timestamp_ns: _Optional[int] = ..., hmac: _Optional[bytes] = ..., pre_exec: _Optional[_Union[PreExecRequest, _Mapping]] = ..., pre_exec_response: _Optional[_Union[PreExecResponse, _Mapping]] = ..., post_exec: _Optional[_Union[PostExecNotification, _Mapping]] = ..., register: _Optional[_Union[RegisterRequest, _Mapping]] = ..., register_response: _Optional[_Union[RegisterResponse, _Mapping]] = ..., heartbeat: _Optional[_Union[Heartbeat, _Mapping]] = ..., heartbeat_ack: _Optional[_Union[HeartbeatAck, _Mapping]] = ..., error: _Optional[_Union[Error, _Mapping]] = ..., get_session_state: _Optional[_Union[GetSessionStateRequest, _Mapping]] = ..., session_state: _Optional[_Union[SessionState, _Mapping]] = ..., wait_hitl: _Optional[_Union[WaitHitlRequest, _Mapping]] = ..., hitl_update: _Optional[_Union[HitlUpdate, _Mapping]] = ..., tail_entries: _Optional[_Union[TailRequest, _Mapping]] = ..., tail_batch: _Optional[_Union[TailBatch, _Mapping]] = ..., post_exec_ack: _Optional[_Union[PostExecAck, _Mapping]] = ..., key_id: _Optional[str] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ["code", "detail", "message", "retry_after_ms", "supported_versions"]
    CODE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_VERSIONS_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    detail: str
    message: str
    retry_after_ms: int
    supported_versions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., detail: _Optional[str] = ..., supported_versions: _Optional[_Iterable[str]] = ..., retry_after_ms: _Optional[int] = ...) -> None: ...

class GetHitlRequest(_message.Message):
    __slots__ = ["request_id"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class GetSessionStateRequest(_message.Message):
    __slots__ = ["session_id"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class GuardConfig(_message.Message):
    __slots__ = ["budget_scope", "budget_usd", "budget_usd_decimal", "denied_tools", "deny_jitter_ratio", "error_amplification", "hitl_budget_threshold", "hitl_mode", "max_repeat_calls", "max_total_calls", "parent_guard_id", "probabilistic_deny", "timeout_seconds", "window_duration_s", "window_max_calls"]
    BUDGET_SCOPE_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    DENIED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    DENY_JITTER_RATIO_FIELD_NUMBER: _ClassVar[int]
    ERROR_AMPLIFICATION_FIELD_NUMBER: _ClassVar[int]
    HITL_BUDGET_THRESHOLD_FIELD_NUMBER: _ClassVar[int]
    HITL_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_REPEAT_CALLS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOTAL_CALLS_FIELD_NUMBER: _ClassVar[int]
    PARENT_GUARD_ID_FIELD_NUMBER: _ClassVar[int]
    PROBABILISTIC_DENY_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    WINDOW_MAX_CALLS_FIELD_NUMBER: _ClassVar[int]
    budget_scope: BudgetScope
    budget_usd: float
    budget_usd_decimal: str
    denied_tools: _containers.RepeatedScalarFieldContainer[str]
    deny_jitter_ratio: float
    error_amplification: bool
    hitl_budget_threshold: float
    hitl_mode: HitlMode
    max_repeat_calls: int
    max_total_calls: int
    parent_guard_id: str
    probabilistic_deny: bool
    timeout_seconds: int
    window_duration_s: int
    window_max_calls: int
    def __init__(self, budget_usd: _Optional[float] = ..., budget_scope: _Optional[_Union[BudgetScope, str]] = ..., max_repeat_calls: _Optional[int] = ..., error_amplification: bool = ..., timeout_seconds: _Optional[int] = ..., window_duration_s: _Optional[int] = ..., window_max_calls: _Optional[int] = ..., max_total_calls: _Optional[int] = ..., probabilistic_deny: bool = ..., deny_jitter_ratio: _Optional[float] = ..., hitl_mode: _Optional[_Union[HitlMode, str]] = ..., hitl_budget_threshold: _Optional[float] = ..., parent_guard_id: _Optional[str] = ..., budget_usd_decimal: _Optional[str] = ..., denied_tools: _Optional[_Iterable[str]] = ...) -> None: ...

class Heartbeat(_message.Message):
    __slots__ = ["last_call_number", "local_budget_remaining", "local_budget_remaining_decimal", "session_id"]
    LAST_CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BUDGET_REMAINING_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    LOCAL_BUDGET_REMAINING_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    last_call_number: int
    local_budget_remaining: float
    local_budget_remaining_decimal: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., last_call_number: _Optional[int] = ..., local_budget_remaining: _Optional[float] = ..., local_budget_remaining_decimal: _Optional[str] = ...) -> None: ...

class HeartbeatAck(_message.Message):
    __slots__ = ["daemon_budget_remaining", "daemon_budget_remaining_decimal", "daemon_time_ns", "drift_detected", "session_id"]
    DAEMON_BUDGET_REMAINING_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    DAEMON_BUDGET_REMAINING_FIELD_NUMBER: _ClassVar[int]
    DAEMON_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    DRIFT_DETECTED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    daemon_budget_remaining: float
    daemon_budget_remaining_decimal: str
    daemon_time_ns: int
    drift_detected: bool
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., daemon_budget_remaining: _Optional[float] = ..., drift_detected: bool = ..., daemon_time_ns: _Optional[int] = ..., daemon_budget_remaining_decimal: _Optional[str] = ...) -> None: ...

class HitlBudget(_message.Message):
    __slots__ = ["limit_usd_decimal", "remaining_usd_decimal", "spent_usd_decimal"]
    LIMIT_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    REMAINING_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    SPENT_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    limit_usd_decimal: str
    remaining_usd_decimal: str
    spent_usd_decimal: str
    def __init__(self, limit_usd_decimal: _Optional[str] = ..., remaining_usd_decimal: _Optional[str] = ..., spent_usd_decimal: _Optional[str] = ...) -> None: ...

class HitlDecision(_message.Message):
    __slots__ = ["comment", "kind", "params_json"]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    comment: str
    kind: HitlDecisionKind
    params_json: str
    def __init__(self, kind: _Optional[_Union[HitlDecisionKind, str]] = ..., params_json: _Optional[str] = ..., comment: _Optional[str] = ...) -> None: ...

class HitlRequestView(_message.Message):
    __slots__ = ["agent_id", "args_digest", "budget", "call_number", "comment", "created_ns", "decided_ns", "decision", "expires_ns", "nonce", "operator_id", "organization_id", "params_json", "policy", "reason", "recent_verdicts", "request_id", "session_id", "status", "successor_args_digest", "successor_nonce", "successor_params_json", "tool_name"]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    ARGS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    BUDGET_FIELD_NUMBER: _ClassVar[int]
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    COMMENT_FIELD_NUMBER: _ClassVar[int]
    CREATED_NS_FIELD_NUMBER: _ClassVar[int]
    DECIDED_NS_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    OPERATOR_ID_FIELD_NUMBER: _ClassVar[int]
    ORGANIZATION_ID_FIELD_NUMBER: _ClassVar[int]
    PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECENT_VERDICTS_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_ARGS_DIGEST_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_NONCE_FIELD_NUMBER: _ClassVar[int]
    SUCCESSOR_PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    args_digest: str
    budget: HitlBudget
    call_number: int
    comment: str
    created_ns: int
    decided_ns: int
    decision: HitlDecisionKind
    expires_ns: int
    nonce: str
    operator_id: str
    organization_id: str
    params_json: str
    policy: str
    reason: str
    recent_verdicts: _containers.RepeatedCompositeFieldContainer[HitlVerdictSummary]
    request_id: str
    session_id: str
    status: HitlStatus
    successor_args_digest: str
    successor_nonce: str
    successor_params_json: str
    tool_name: str
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., organization_id: _Optional[str] = ..., call_number: _Optional[int] = ..., tool_name: _Optional[str] = ..., nonce: _Optional[str] = ..., params_json: _Optional[str] = ..., args_digest: _Optional[str] = ..., reason: _Optional[str] = ..., budget: _Optional[_Union[HitlBudget, _Mapping]] = ..., policy: _Optional[str] = ..., created_ns: _Optional[int] = ..., expires_ns: _Optional[int] = ..., status: _Optional[_Union[HitlStatus, str]] = ..., decision: _Optional[_Union[HitlDecisionKind, str]] = ..., operator_id: _Optional[str] = ..., comment: _Optional[str] = ..., decided_ns: _Optional[int] = ..., successor_nonce: _Optional[str] = ..., successor_params_json: _Optional[str] = ..., successor_args_digest: _Optional[str] = ..., recent_verdicts: _Optional[_Iterable[_Union[HitlVerdictSummary, _Mapping]]] = ...) -> None: ...

class HitlUpdate(_message.Message):
    __slots__ = ["final", "request"]
    FINAL_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    final: bool
    request: HitlRequestView
    def __init__(self, request: _Optional[_Union[HitlRequestView, _Mapping]] = ..., final: bool = ...) -> None: ...

class HitlVerdictSummary(_message.Message):
    __slots__ = ["at_ns", "budget_remaining_usd_decimal", "call_number", "reason", "tool_name", "verdict"]
    AT_NS_FIELD_NUMBER: _ClassVar[int]
    BUDGET_REMAINING_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    at_ns: int
    budget_remaining_usd_decimal: str
    call_number: int
    reason: str
    tool_name: str
    verdict: Verdict
    def __init__(self, call_number: _Optional[int] = ..., tool_name: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., reason: _Optional[str] = ..., budget_remaining_usd_decimal: _Optional[str] = ..., at_ns: _Optional[int] = ...) -> None: ...

class ListHitlRequest(_message.Message):
    __slots__ = ["session_id", "status"]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    status: HitlStatus
    def __init__(self, session_id: _Optional[str] = ..., status: _Optional[_Union[HitlStatus, str]] = ...) -> None: ...

class ListHitlResponse(_message.Message):
    __slots__ = ["requests"]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    requests: _containers.RepeatedCompositeFieldContainer[HitlRequestView]
    def __init__(self, requests: _Optional[_Iterable[_Union[HitlRequestView, _Mapping]]] = ...) -> None: ...

class PostExecAck(_message.Message):
    __slots__ = ["budget_remaining_usd_decimal", "call_number", "replayed", "session_id"]
    BUDGET_REMAINING_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    REPLAYED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    budget_remaining_usd_decimal: str
    call_number: int
    replayed: bool
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., call_number: _Optional[int] = ..., replayed: bool = ..., budget_remaining_usd_decimal: _Optional[str] = ...) -> None: ...

class PostExecNotification(_message.Message):
    __slots__ = ["ack_requested", "actual_cost_usd", "actual_cost_usd_decimal", "call_number", "duration_ms", "error_message", "idempotency_key", "model_used", "session_id", "success", "tokens_in", "tokens_out"]
    ACK_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_COST_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    ACTUAL_COST_USD_FIELD_NUMBER: _ClassVar[int]
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    ERROR_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    MODEL_USED_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_IN_FIELD_NUMBER: _ClassVar[int]
    TOKENS_OUT_FIELD_NUMBER: _ClassVar[int]
    ack_requested: bool
    actual_cost_usd: float
    actual_cost_usd_decimal: str
    call_number: int
    duration_ms: int
    error_message: str
    idempotency_key: str
    model_used: str
    session_id: str
    success: bool
    tokens_in: int
    tokens_out: int
    def __init__(self, session_id: _Optional[str] = ..., call_number: _Optional[int] = ..., actual_cost_usd: _Optional[float] = ..., success: bool = ..., error_message: _Optional[str] = ..., duration_ms: _Optional[int] = ..., tokens_in: _Optional[int] = ..., tokens_out: _Optional[int] = ..., model_used: _Optional[str] = ..., actual_cost_usd_decimal: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., ack_requested: bool = ...) -> None: ...

class PreExecRequest(_message.Message):
    __slots__ = ["call_number", "estimated_cost_usd", "estimated_cost_usd_decimal", "nonce", "parent_guard_id", "session_id", "tags", "tool_name", "tool_params_hash", "tool_params_json"]
    class TagsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COST_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    ESTIMATED_COST_USD_FIELD_NUMBER: _ClassVar[int]
    NONCE_FIELD_NUMBER: _ClassVar[int]
    PARENT_GUARD_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TAGS_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_PARAMS_HASH_FIELD_NUMBER: _ClassVar[int]
    TOOL_PARAMS_JSON_FIELD_NUMBER: _ClassVar[int]
    call_number: int
    estimated_cost_usd: float
    estimated_cost_usd_decimal: str
    nonce: int
    parent_guard_id: str
    session_id: str
    tags: _containers.ScalarMap[str, str]
    tool_name: str
    tool_params_hash: bytes
    tool_params_json: str
    def __init__(self, session_id: _Optional[str] = ..., call_number: _Optional[int] = ..., tool_name: _Optional[str] = ..., tool_params_hash: _Optional[bytes] = ..., estimated_cost_usd: _Optional[float] = ..., parent_guard_id: _Optional[str] = ..., nonce: _Optional[int] = ..., tags: _Optional[_Mapping[str, str]] = ..., tool_params_json: _Optional[str] = ..., estimated_cost_usd_decimal: _Optional[str] = ...) -> None: ...

class PreExecResponse(_message.Message):
    __slots__ = ["budget_remaining_usd", "budget_remaining_usd_decimal", "call_number", "chain_seq", "daemon_time_ns", "deny_reason", "entry_hash", "hitl_expires_ns", "hitl_request_id", "human_readable_reason", "probabilistic_deny", "reason", "receipt", "repeat_count", "session_id", "verdict"]
    BUDGET_REMAINING_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_REMAINING_USD_FIELD_NUMBER: _ClassVar[int]
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    CHAIN_SEQ_FIELD_NUMBER: _ClassVar[int]
    DAEMON_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    DENY_REASON_FIELD_NUMBER: _ClassVar[int]
    ENTRY_HASH_FIELD_NUMBER: _ClassVar[int]
    HITL_EXPIRES_NS_FIELD_NUMBER: _ClassVar[int]
    HITL_REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    HUMAN_READABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    PROBABILISTIC_DENY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RECEIPT_FIELD_NUMBER: _ClassVar[int]
    REPEAT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    budget_remaining_usd: float
    budget_remaining_usd_decimal: str
    call_number: int
    chain_seq: int
    daemon_time_ns: int
    deny_reason: DenyReason
    entry_hash: str
    hitl_expires_ns: int
    hitl_request_id: str
    human_readable_reason: str
    probabilistic_deny: bool
    reason: str
    receipt: str
    repeat_count: int
    session_id: str
    verdict: Verdict
    def __init__(self, session_id: _Optional[str] = ..., call_number: _Optional[int] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., deny_reason: _Optional[_Union[DenyReason, str]] = ..., human_readable_reason: _Optional[str] = ..., budget_remaining_usd: _Optional[float] = ..., repeat_count: _Optional[int] = ..., daemon_time_ns: _Optional[int] = ..., probabilistic_deny: bool = ..., reason: _Optional[str] = ..., budget_remaining_usd_decimal: _Optional[str] = ..., receipt: _Optional[str] = ..., chain_seq: _Optional[int] = ..., entry_hash: _Optional[str] = ..., hitl_request_id: _Optional[str] = ..., hitl_expires_ns: _Optional[int] = ...) -> None: ...

class RegisterRequest(_message.Message):
    __slots__ = ["agent_id", "agent_version", "framework", "metadata", "organization_id", "runtime", "session_id"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    FRAMEWORK_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ORGANIZATION_ID_FIELD_NUMBER: _ClassVar[int]
    RUNTIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    agent_version: str
    framework: str
    metadata: _containers.ScalarMap[str, str]
    organization_id: str
    runtime: str
    session_id: str
    def __init__(self, agent_id: _Optional[str] = ..., agent_version: _Optional[str] = ..., framework: _Optional[str] = ..., session_id: _Optional[str] = ..., organization_id: _Optional[str] = ..., runtime: _Optional[str] = ..., metadata: _Optional[_Mapping[str, str]] = ...) -> None: ...

class RegisterResponse(_message.Message):
    __slots__ = ["active_config", "daemon_time_ns", "daemon_version", "negotiated_protocol", "session_id"]
    ACTIVE_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DAEMON_TIME_NS_FIELD_NUMBER: _ClassVar[int]
    DAEMON_VERSION_FIELD_NUMBER: _ClassVar[int]
    NEGOTIATED_PROTOCOL_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    active_config: GuardConfig
    daemon_time_ns: int
    daemon_version: str
    negotiated_protocol: str
    session_id: str
    def __init__(self, session_id: _Optional[str] = ..., daemon_version: _Optional[str] = ..., negotiated_protocol: _Optional[str] = ..., active_config: _Optional[_Union[GuardConfig, _Mapping]] = ..., daemon_time_ns: _Optional[int] = ...) -> None: ...

class SessionState(_message.Message):
    __slots__ = ["agent_id", "budget_initial_usd", "budget_initial_usd_decimal", "budget_remaining_usd", "budget_remaining_usd_decimal", "budget_spent_usd", "budget_spent_usd_decimal", "circuit_trip_reason", "circuit_tripped", "circuit_tripped_at_ns", "last_activity_ns", "last_tool_name", "last_tool_params_hash", "metadata", "organization_id", "repeat_counts", "session_id", "status", "total_calls", "window_counts", "window_duration_s", "window_max_calls", "window_start_ns"]
    class MetadataEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    class RepeatCountsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    class WindowCountsEntry(_message.Message):
        __slots__ = ["key", "value"]
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_INITIAL_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_INITIAL_USD_FIELD_NUMBER: _ClassVar[int]
    BUDGET_REMAINING_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_REMAINING_USD_FIELD_NUMBER: _ClassVar[int]
    BUDGET_SPENT_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    BUDGET_SPENT_USD_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_TRIPPED_AT_NS_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_TRIPPED_FIELD_NUMBER: _ClassVar[int]
    CIRCUIT_TRIP_REASON_FIELD_NUMBER: _ClassVar[int]
    LAST_ACTIVITY_NS_FIELD_NUMBER: _ClassVar[int]
    LAST_TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    LAST_TOOL_PARAMS_HASH_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    ORGANIZATION_ID_FIELD_NUMBER: _ClassVar[int]
    REPEAT_COUNTS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_CALLS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_COUNTS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_DURATION_S_FIELD_NUMBER: _ClassVar[int]
    WINDOW_MAX_CALLS_FIELD_NUMBER: _ClassVar[int]
    WINDOW_START_NS_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    budget_initial_usd: float
    budget_initial_usd_decimal: str
    budget_remaining_usd: float
    budget_remaining_usd_decimal: str
    budget_spent_usd: float
    budget_spent_usd_decimal: str
    circuit_trip_reason: str
    circuit_tripped: bool
    circuit_tripped_at_ns: int
    last_activity_ns: int
    last_tool_name: str
    last_tool_params_hash: bytes
    metadata: _containers.ScalarMap[str, str]
    organization_id: str
    repeat_counts: _containers.ScalarMap[str, int]
    session_id: str
    status: SessionStatus
    total_calls: int
    window_counts: _containers.ScalarMap[str, int]
    window_duration_s: int
    window_max_calls: int
    window_start_ns: int
    def __init__(self, session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., organization_id: _Optional[str] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., budget_initial_usd: _Optional[float] = ..., budget_remaining_usd: _Optional[float] = ..., budget_spent_usd: _Optional[float] = ..., total_calls: _Optional[int] = ..., repeat_counts: _Optional[_Mapping[str, int]] = ..., window_counts: _Optional[_Mapping[str, int]] = ..., circuit_tripped: bool = ..., circuit_trip_reason: _Optional[str] = ..., circuit_tripped_at_ns: _Optional[int] = ..., window_start_ns: _Optional[int] = ..., window_duration_s: _Optional[int] = ..., window_max_calls: _Optional[int] = ..., last_tool_name: _Optional[str] = ..., last_tool_params_hash: _Optional[bytes] = ..., last_activity_ns: _Optional[int] = ..., metadata: _Optional[_Mapping[str, str]] = ..., budget_initial_usd_decimal: _Optional[str] = ..., budget_remaining_usd_decimal: _Optional[str] = ..., budget_spent_usd_decimal: _Optional[str] = ...) -> None: ...

class TailBatch(_message.Message):
    __slots__ = ["after_seq", "events", "more"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    MORE_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    events: _containers.RepeatedCompositeFieldContainer[TailEvent]
    more: bool
    def __init__(self, events: _Optional[_Iterable[_Union[TailEvent, _Mapping]]] = ..., after_seq: _Optional[int] = ..., more: bool = ...) -> None: ...

class TailEvent(_message.Message):
    __slots__ = ["agent_id", "budget_after_usd_decimal", "call_number", "entry_hash", "entry_id", "kind", "reason", "seq", "session_id", "time_ns", "tool_name", "verdict"]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    BUDGET_AFTER_USD_DECIMAL_FIELD_NUMBER: _ClassVar[int]
    CALL_NUMBER_FIELD_NUMBER: _ClassVar[int]
    ENTRY_HASH_FIELD_NUMBER: _ClassVar[int]
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_NS_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    agent_id: str
    budget_after_usd_decimal: str
    call_number: int
    entry_hash: str
    entry_id: str
    kind: str
    reason: str
    seq: int
    session_id: str
    time_ns: int
    tool_name: str
    verdict: Verdict
    def __init__(self, seq: _Optional[int] = ..., entry_hash: _Optional[str] = ..., entry_id: _Optional[str] = ..., time_ns: _Optional[int] = ..., kind: _Optional[str] = ..., session_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., call_number: _Optional[int] = ..., tool_name: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., reason: _Optional[str] = ..., budget_after_usd_decimal: _Optional[str] = ...) -> None: ...

class TailRequest(_message.Message):
    __slots__ = ["after_seq", "follow", "kinds", "last", "limit", "session_id", "wait_ms"]
    AFTER_SEQ_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    KINDS_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    after_seq: int
    follow: bool
    kinds: _containers.RepeatedScalarFieldContainer[str]
    last: int
    limit: int
    session_id: str
    wait_ms: int
    def __init__(self, after_seq: _Optional[int] = ..., last: _Optional[int] = ..., session_id: _Optional[str] = ..., kinds: _Optional[_Iterable[str]] = ..., follow: bool = ..., limit: _Optional[int] = ..., wait_ms: _Optional[int] = ...) -> None: ...

class WaitHitlRequest(_message.Message):
    __slots__ = ["request_id", "session_id"]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    session_id: str
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ...) -> None: ...

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class DenyReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class SessionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class BudgetScope(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HitlMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HitlStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []

class HitlDecisionKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = []
