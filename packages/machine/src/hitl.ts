// The HITL transitions: a request expiring unanswered and a human's answer, each written once for the
// engine and the replay. Pure over the view; the engine's flow/hitl.ts decides when to ask for them.
import {
  type Config,
  type HitlRequest,
  type PendingRequest,
  recordHumanDecision,
  type SessionRecord,
  type State,
} from "@leash/core";
import { DEFAULT_HITL_TIMEOUT_S, TIMEOUT_OPERATOR } from "./constants.js";
import { boundRequest, boundRequestId, pausedOf } from "./hitl-binding.js";
import type { AnswerCommand, Env, Key, MachineError, MachineEvent, Outcome, StateView } from "./types.js";

/** When a request opened at `nowNs` under `config` expires (validateConfig bounds the timeout). */
export function hitlExpiresNs(config: Config, nowNs: number): number {
  const seconds = config.hitl_timeout_s ?? DEFAULT_HITL_TIMEOUT_S;
  return nowNs + Math.round(seconds * 1e9);
}

/** Unanswered and past its expiry: the next look at it records the expiry. */
export function isDue(request: HitlRequest, nowNs: number): boolean {
  return request.status === "PENDING" && request.expires_ns !== null && request.expires_ns <= nowNs;
}

/** An unanswered request of the session is past its expiry: evaluate records the expiry first. */
export function dueInState(state: State, nowNs: number): boolean {
  const paused = pausedOf(state);
  return (
    paused !== null &&
    paused.expired !== true &&
    typeof paused.expires_ns === "number" &&
    paused.expires_ns <= nowNs &&
    (state.pending_transition === null || state.pending_transition === undefined)
  );
}

/** State as stored: seen nonces are the chain entries' (NonceStore), not the session row's. */
export function storable(state: State): State {
  const { seen_nonces: _omit, ...rest } = state;
  return rest;
}

export interface ExpireReply {
  readonly session: SessionRecord;
  /** The closed request, or null when it was not (or no longer) due. */
  readonly closed: HitlRequest | null;
}

/**
 * Request `requestId` of `session` expired unanswered, when it is still PENDING and past its expiry:
 * the row, the session's paused call (so its next attempt is told hitl_timeout) and a hitl_expired
 * entry by "system:timeout". Not due: no events.
 */
export function expireRequest(
  view: StateView,
  session: SessionRecord,
  requestId: string,
  nowNs: number,
): Outcome<ExpireReply> {
  const row = view.hitl(requestId);
  if (row === undefined) return { missing: [{ kind: "hitl", requestId }] };
  if (row === null || row.session_id !== session.session_id || !isDue(row, nowNs)) {
    return { events: [], reply: { session, closed: null } };
  }
  const closed: HitlRequest = { ...row, status: "EXPIRED", operator_id: TIMEOUT_OPERATOR, decided_ns: nowNs };
  const events: MachineEvent[] = [{ type: "hitl", row: closed }];
  let next = session;
  const paused = pausedOf(session.state);
  if (paused !== null && paused.request_id === row.request_id) {
    const pending = { ...paused, expired: true } as PendingRequest;
    next = { ...session, state: { ...session.state, pending_request: pending }, updated_ns: nowNs };
    events.push({ type: "session", row: next });
  }
  events.push({
    type: "entry",
    kind: "hitl_expired",
    data: {
      session_id: session.session_id,
      request_id: row.request_id,
      call_number: row.call_number,
      tool_name: row.tool_name,
      nonce: row.nonce,
      args_digest: row.args_digest,
      operator_id: TIMEOUT_OPERATOR,
      expires_ns: row.expires_ns,
      now_ns: nowNs,
    },
  });
  return { events, reply: { session: next, closed } };
}

const refusal = (
  code: MachineError["code"],
  message: string,
  request?: HitlRequest,
): { error: MachineError } => ({
  error: request === undefined ? { code, message } : { code, message, request },
});

/**
 * The request a human's answer lands on: the session's open (PENDING) one, or the one named, if it
 * is that one. An answered or expired request refuses a second answer.
 */
export function answeredRequest(
  view: StateView,
  session: SessionRecord,
  requestId: string | undefined,
): HitlRequest | { missing: Key[] } | { error: MachineError } {
  const sessionId = session.session_id;
  const pending = view.hitlOf(sessionId, "PENDING");
  if (pending === undefined) return { missing: missingOf({ kind: "hitl_of", sessionId, status: "PENDING" }) };
  const open = [...pending].sort((a, b) => b.call_number - a.call_number)[0];
  if (requestId !== undefined) {
    const named = view.hitl(requestId);
    if (named === undefined) return { missing: missingOf({ kind: "hitl", requestId }) };
    if (named === null || named.session_id !== sessionId) {
      return refusal(
        "no_pending_request",
        `session ${sessionId} has no request ${JSON.stringify(requestId)}`,
      );
    }
    if (named.status === "EXPIRED") return refusal("hitl_expired", "expired", named);
    if (named.status !== "PENDING") return refusal("already_decided", "decided", named);
    if (named.request_id !== open?.request_id) {
      return refusal(
        "superseded",
        `request ${named.request_id} of session ${sessionId} was superseded by request ${open?.request_id} (call ${open?.call_number})`,
      );
    }
    return named;
  }
  if (open !== undefined) return open;
  // The state names the last request a human answered until its answer is used (or reset).
  const lastId = boundRequestId(session.state);
  const last = lastId === null ? null : view.hitl(lastId);
  if (last === undefined) return { missing: missingOf({ kind: "hitl", requestId: lastId! }) };
  if (last !== null && last.session_id === sessionId) {
    return last.status === "EXPIRED"
      ? refusal("hitl_expired", "expired", last)
      : refusal("already_decided", "decided", last);
  }
  return refusal("no_pending_request", `session ${sessionId} has no call awaiting a human`);
}

const missingOf = (key: Key): Key[] => [key];

export interface AnswerReply {
  readonly session: SessionRecord;
  readonly decided: HitlRequest;
}

/** A human's answer on the session's open request: the request closes, the state takes the transition. */
export function answer(view: StateView, command: AnswerCommand, env: Env): Outcome<AnswerReply> {
  const session = view.session(command.sessionId);
  if (session === undefined) return { missing: [{ kind: "session", sessionId: command.sessionId }] };
  if (session === null)
    return refusal("session_not_found", `unknown session ${JSON.stringify(command.sessionId)}`);
  const open = answeredRequest(view, session, command.requestId);
  if ("missing" in open || "error" in open) return open;
  const nowNs = env.nowNs;
  const successor = command.successor;
  const state = recordHumanDecision(
    { ...session.state, pending_request: boundRequest(open) },
    command.decision,
    successor && { nonce: successor.nonce, argsDigest: successor.args_digest },
  );
  // Every answer closes its request, defer and escalate too: the agent's next attempt then asks
  // again as a new request, so no request can take two answers.
  const decided: HitlRequest = {
    ...open,
    status: "DECIDED",
    decision: command.decision,
    operator_id: command.operatorId,
    successor_nonce: successor?.nonce ?? null,
    successor_args_digest: successor?.args_digest ?? null,
    successor_params_json: command.successorParamsJson ?? null,
    comment: command.comment ?? null,
    decided_ns: nowNs,
  };
  const next: SessionRecord = {
    ...session,
    status: state.status ?? session.status,
    state: storable(state),
    updated_ns: nowNs,
  };
  const data = {
    session_id: session.session_id,
    request_id: open.request_id,
    call_number: open.call_number,
    tool_name: open.tool_name,
    decision: command.decision,
    operator_id: command.operatorId,
    nonce: open.nonce,
    args_digest: open.args_digest,
    successor: successor ?? null,
    ...(command.comment ? { comment: command.comment } : {}),
  };
  const events: MachineEvent[] = [
    { type: "hitl", row: decided },
    { type: "session", row: next },
    { type: "entry", kind: "hitl_decision", data },
  ];
  return { events, reply: { session: next, decided } };
}
