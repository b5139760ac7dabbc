# LeashClient.tail(): the organization's audit chain entries as a generator — gRPC's TailEntries stream, or
# the socket's tail_entries long poll asked again from each batch's position. Not a verifier.
from __future__ import annotations

import re
import threading
from typing import Any, Iterator, Optional, Sequence

from ._proto import shackle_pb2 as pb
from .envelope import error_code_name
from .errors import LeashError
from .transport import Transport
from .types import TailEntry, Verdict

#: The socket's long poll: how long the daemon may hold one request while nothing new arrives.
TAIL_POLL_WAIT_MS = 10_000
#: Beyond the poll's wait: time for the daemon to find the start and read a batch.
_TAIL_ANSWER_S = 30.0
_VERDICTS: dict[int, Verdict] = {pb.ALLOW: "ALLOW", pb.DENY: "DENY", pb.HITL: "HITL"}
_HASH = re.compile(r"^[0-9a-f]{64}$")


def tail_request_of(
    *,
    after_seq: Optional[int],
    last: Optional[int],
    session_id: Optional[str],
    kinds: Optional[Sequence[str]],
    follow: bool,
    limit: Optional[int],
) -> pb.TailRequest:
    """The request the options ask for; a bad option is LeashError invalid_argument."""

    def bad(message: str) -> LeashError:
        return LeashError("invalid_argument", f"tail: {message}")

    if after_seq is not None and (not isinstance(after_seq, int) or isinstance(after_seq, bool) or after_seq < -1):
        raise bad("after_seq must be an integer >= -1")
    if last is not None and (not isinstance(last, int) or isinstance(last, bool) or not 0 <= last <= 0xFFFFFFFF):
        raise bad("last must be an integer >= 0")
    if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= 0xFFFFFFFF):
        raise bad("limit must be an integer >= 1")
    if session_id is not None and (not isinstance(session_id, str) or session_id == ""):
        raise bad("session_id must be a non-empty string")
    if kinds is not None and (isinstance(kinds, str) or any(not isinstance(k, str) or k == "" for k in kinds)):
        raise bad("kinds must be a list of non-empty strings")
    request = pb.TailRequest(
        last=last or 0,
        session_id=session_id or "",
        kinds=list(kinds or []),
        follow=follow,
        limit=limit or 0,
    )
    # Neither after_seq nor last: the whole chain (of this organization).
    start = after_seq if after_seq is not None else (-1 if last is None else None)
    if start is not None:
        request.after_seq = start
    return request


def _entry_of(event: Any, request: pb.TailRequest, after: Optional[int]) -> TailEntry:
    def bad(why: str) -> LeashError:
        return LeashError("bad_response", f"the daemon sent a tail event {why}")

    if after is not None and event.seq <= after:
        raise bad(f"out of order (seq {event.seq} after {after})")
    if not _HASH.match(event.entry_hash):
        raise bad("without an entry hash")
    if event.kind == "" or event.session_id == "":
        raise bad("without its kind or session")
    if request.session_id != "" and event.session_id != request.session_id:
        raise bad("of another session")
    if len(request.kinds) > 0 and event.kind not in request.kinds:
        raise bad(f"of kind {event.kind}")
    has = event.HasField
    return TailEntry(
        seq=event.seq,
        entry_hash=event.entry_hash,
        entry_id=event.entry_id,
        time_ns=event.time_ns,
        kind=event.kind,
        session_id=event.session_id,
        agent_id=event.agent_id if has("agent_id") else None,
        call_number=event.call_number if has("call_number") else None,
        tool_name=event.tool_name if has("tool_name") else None,
        verdict=_VERDICTS.get(event.verdict),
        reason=event.reason if has("reason") else None,
        budget_after_usd=event.budget_after_usd_decimal if has("budget_after_usd_decimal") else None,
    )


def socket_tail(transport: Transport, request: pb.TailRequest, stop: Optional[threading.Event]) -> Iterator[TailEntry]:
    after: Optional[int] = request.after_seq if request.HasField("after_seq") else None
    left = request.limit if request.limit > 0 else None
    while stop is None or not stop.is_set():
        ask = pb.TailRequest()
        ask.CopyFrom(request)
        if after is not None:
            ask.after_seq = after
        ask.limit = left or 0
        ask.wait_ms = TAIL_POLL_WAIT_MS
        outcome = transport.request("tail_entries", ask, TAIL_POLL_WAIT_MS / 1000 + _TAIL_ANSWER_S)
        if not outcome.ok:
            raise LeashError(outcome.failure or "bad_response", outcome.message)
        if outcome.kind == "error":
            e = outcome.answer
            raise LeashError("daemon_error", f"the daemon refused: {error_code_name(e.code)} {e.detail}: {e.message}")
        if outcome.kind != "tail_batch":
            raise LeashError("bad_response", f"the daemon answered {outcome.kind} to a tail_entries")
        batch = outcome.answer
        if after is not None and batch.after_seq < after:
            raise LeashError("bad_response", "the daemon's tail position went backwards")
        for event in batch.events:
            entry = _entry_of(event, request, after)
            after = event.seq
            yield entry
            if left is not None:
                left -= 1
                if left <= 0:
                    return
        after = batch.after_seq
        if not batch.more and not request.follow:
            return


def grpc_tail(stream: Any, grpc: Any, request: pb.TailRequest, stop: Optional[threading.Event]) -> Iterator[TailEntry]:
    """`stream`: the TailEntries call (an iterator of TailEvent that can be cancelled)."""
    from .grpc_transport import _outcome_of_status

    after: Optional[int] = request.after_seq if request.HasField("after_seq") else None
    finished = threading.Event()
    if stop is not None:
        stopping = stop

        def watch() -> None:
            # grpcio blocks in next(): a stop cancels the call from this thread (which ends with the tail).
            while not stopping.wait(0.2):
                if finished.is_set():
                    return
            stream.cancel()

        threading.Thread(target=watch, daemon=True).start()
    try:
        for event in stream:
            entry = _entry_of(event, request, after)
            after = event.seq
            yield entry
    except grpc.RpcError as error:
        if stop is not None and stop.is_set():
            return
        outcome = _outcome_of_status(grpc, error, 60.0)
        if outcome.ok and outcome.kind == "error":
            e = outcome.answer
            raise LeashError(
                "daemon_error", f"the daemon refused: {error_code_name(e.code)} {e.detail}: {e.message}"
            ) from None
        raise LeashError(outcome.failure or "bad_response", outcome.message) from None
    finally:
        finished.set()
        stream.cancel()
