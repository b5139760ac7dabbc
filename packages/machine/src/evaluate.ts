// The evaluate transition: one tool call judged on the view — SP/1.0's decide(), the engine's own
// guards, the policy step, the budget hold, feedback — into the rows it changes and its decision entry.
// Written once: the engine runs it live and the replay folds every decision entry through it.
import { chainAvailable, type Money, moneyString, planHold } from "@leash/budget-guard";
import {
  type BudgetAccount,
  type Call,
  canonicalizationError,
  type Decision,
  decide as decideSp,
  denyProbability,
  feedback,
  type HitlRequest,
  type PendingTransition,
  type SessionRecord,
  type State,
} from "@leash/core";
import { budgetEnabled, sessionAccountId } from "./accounts.js";
import { outranksEstimate, recordableErrorText, recordableEstimate, resolveEstimate } from "./call-input.js";
import { holdId } from "./constants.js";
import { countsOnly } from "./count-only.js";
import { dueInState, expireRequest, storable } from "./hitl.js";
import {
  bindToPausedTool,
  boundRequest,
  boundRequestId,
  consumedTransitionOf,
  HITL_TIMEOUT,
  hasTransition,
  PARAMS_HASH_MISMATCH,
  pausedOf,
  releasesApproval,
  timedOut,
} from "./hitl-binding.js";
import { openRequest, requestEntry } from "./hitl-open.js";
import { maxParamsBytes, oversizedBytes, PARAMS_TOO_LARGE } from "./params-cap.js";
import { type EngineDecision, MALFORMED, OVERRUN } from "./reasons.js";
import { repeatSeen } from "./repeat-seen.js";
import {
  canonicalParamsText,
  nodeSha256Hex,
  nodeSha256HexOfBytes,
  paramsBlobOf,
  replayInputs,
} from "./replay-inputs.js";
import { denyListed } from "./tool-policy.js";
import type { Env, EvaluateCommand, Key, MachineError, MachineEvent, Outcome, StateView } from "./types.js";

/** Params read with their number texts keep them in the stored JSON, as their digest does. */
const _NUMBER_TEXT = { numberText: true } as const;

export interface EvaluateReply {
  readonly session: SessionRecord;
  readonly callNumber: number;
  readonly decision: EngineDecision;
  readonly remaining: string | null;
  readonly reservationId: string | null;
  readonly estimateUsd: string | null;
  readonly rng: number | null;
  readonly paramsHash: string | null;
  readonly repeatCount: number;
  /** The request this call opened (HITL), and the one an expiry closed before it was judged. */
  readonly opened: HitlRequest | null;
  readonly expired: HitlRequest | null;
  /** The policy step's record (null when it did not run), and the state decide() saw. */
  readonly policyRecord: unknown;
  readonly seen: State;
}

/** What the call is judged on, gathered from the view (or the keys still to fetch). */
interface Gathered {
  readonly session: SessionRecord;
  readonly before: MachineEvent[];
  readonly expired: HitlRequest | null;
  readonly state: State;
  readonly replayed: PendingTransition | null;
  readonly accountId: string | null;
  readonly accounts: readonly BudgetAccount[] | undefined;
  readonly remainingBefore: Money | null;
}

function gather(
  view: StateView,
  cmd: EvaluateCommand,
  env: Env,
): Gathered | { missing: Key[] } | { error: MachineError } {
  const sessionId = cmd.sessionId;
  const loaded = view.session(sessionId);
  if (loaded === undefined) return { missing: [{ kind: "session", sessionId }] };
  if (loaded === null) {
    return { error: { code: "session_not_found", message: `unknown session ${JSON.stringify(sessionId)}` } };
  }
  const nonce = cmd.nonce;
  const hasNonce = nonce !== undefined && nonce !== null;
  const seen = hasNonce ? view.nonceSeen(sessionId, nonce) : false;
  if (seen === undefined) return { missing: [{ kind: "nonce", sessionId, nonce: nonce! }] };
  let session = loaded;
  const before: MachineEvent[] = [];
  let expired: HitlRequest | null = null;
  // A request past its expiry is closed before this call is judged (lazily: nothing else watches the clock).
  if (dueInState(loaded.state, env.nowNs)) {
    const closing = expireRequest(view, loaded, pausedOf(loaded.state)!.request_id, env.nowNs);
    if (!("events" in closing)) return closing as { missing: Key[] };
    before.push(...closing.events);
    session = closing.reply.session;
    expired = closing.reply.closed;
  }
  const state: State = { ...session.state, seen_nonces: seen && hasNonce ? [nonce] : [] };
  // A re-dispatch of an approval already used: decide() is shown that approval as consumed, so rule 3
  // answers duplicate_resume_no_effect (spec §3.6). Looked up only for a nonce already seen.
  let replayed: PendingTransition | null = null;
  if (seen && hasNonce && cmd.malformed === null && !hasTransition(state)) {
    const used = view.hitlOf(sessionId, "CONSUMED");
    if (used === undefined) return { missing: [{ kind: "hitl_of", sessionId, status: "CONSUMED" }] };
    replayed = consumedTransitionOf(used, nonce);
    if (replayed !== null) state.pending_transition = replayed;
  }
  const { config } = session;
  const accountId = budgetEnabled(config) ? sessionAccountId(config, session) : null;
  let accounts: readonly BudgetAccount[] | undefined;
  let remainingBefore: Money | null = null;
  if (accountId !== null) {
    accounts = view.accounts(accountId);
    if (accounts === undefined) return { missing: [{ kind: "accounts", accountId }] };
    remainingBefore = chainAvailable(accounts);
    state.budget_initial_usd = config.budget_usd;
    state.budget_remaining_usd = remainingBefore.toNumber();
  }
  return { session, before, expired, state, replayed, accountId, accounts, remainingBefore };
}

/** The call's params as the entry records them: canonical text, digest, size over the cap, blob. */
function paramsOf(cmd: EvaluateCommand, capBytes: number | null) {
  const recorded = cmd.recordedParams;
  if (recorded !== undefined) {
    const tooLarge =
      capBytes === null
        ? null
        : recorded.bytes !== null
          ? recorded.bytes > capBytes
            ? recorded.bytes
            : null
          : oversizedBytes(recorded.text, capBytes);
    return { text: recorded.text, hash: recorded.hash, tooLarge, bytesRecorded: recorded.bytes };
  }
  const value = cmd.params ?? {};
  // The canonical text is kept for the entry (replay re-runs decide() on it); its digest is the hash.
  const text = canonicalizationError(value) === null ? canonicalParamsText(value) : null;
  const hash = text === null ? null : nodeSha256Hex(text);
  return {
    text,
    hash,
    tooLarge: capBytes === null ? null : oversizedBytes(text, capBytes),
    bytesRecorded: null,
  };
}

/** The call as decide() sees it, with the estimate that applies under a budget. */
function callOf(cmd: EvaluateCommand, g: Gathered) {
  const { session } = g;
  const estimate =
    g.accountId === null || cmd.malformed !== null
      ? null
      : resolveEstimate(
          session.config,
          cmd.toolName,
          cmd.policy === undefined
            ? cmd.estimatedCostUsd
            : cmd.policy.estimate(cmd.toolName, session, cmd.estimatedCostUsd),
        );
  const call: Call = {
    tool_name: cmd.malformed === null ? cmd.toolName : "",
    params: (cmd.params ?? {}) as Call["params"],
    nonce: cmd.malformed === null ? (cmd.nonce ?? undefined) : undefined,
    estimated_cost_usd:
      estimate === null
        ? (cmd.estimatedCostUsd as number | undefined)
        : !estimate.ok
          ? undefined
          : estimate.hold === null
            ? Number.POSITIVE_INFINITY
            : estimate.hold.toNumber(),
  };
  return { call, estimate };
}

type Judged = ReturnType<typeof judge>;

/** decide(), then the engine's guards in their order, then the policy step: the verdict before the hold. */
function judge(cmd: EvaluateCommand, g: Gathered, env: Env) {
  const { session, state } = g;
  const { config } = session;
  const { call, estimate } = callOf(cmd, g);
  const provable = cmd.foldVerdict === undefined;
  const cap = provable && cmd.rules >= 3 ? maxParamsBytes(config) : null;
  const params = paramsOf(cmd, cap);
  const previousError = recordableErrorText(cmd.previousError);
  const rng =
    denyProbability(config as Record<string, unknown>, state as Record<string, unknown>) > 0
      ? env.rng()
      : null;
  const malformed = cmd.malformed !== null;
  let decision: EngineDecision;
  if (!provable) decision = cmd.foldVerdict!;
  else {
    // An approval decide() releases must also be spent by the paused tool (hitl-binding.ts).
    decision = malformed
      ? MALFORMED
      : bindToPausedTool(
          decideSp(config, state, call, {
            nowNs: env.nowNs,
            rng: rng ?? undefined,
            ...(previousError === undefined ? {} : { errorText: previousError }),
            sha256Hex: nodeSha256Hex,
            sha256HexOfBytes: nodeSha256HexOfBytes,
          }),
          state,
          call,
        );
    // A tool in the config's denied_tools never runs (tool-policy.ts).
    if (!malformed) decision = denyListed(decision, config, call);
    if (estimate !== null && !estimate.ok && !outranksEstimate(decision)) {
      decision = { verdict: "DENY", reason: estimate.reason };
    }
    // The paused call's request expired unanswered: its next attempt is told so, unless denied anyway.
    if (!malformed && decision.verdict !== "DENY" && timedOut(state, call)) decision = HITL_TIMEOUT;
    const expected = cmd.expectedHash;
    if (expected !== undefined && expected !== null && expected !== params.hash)
      decision = PARAMS_HASH_MISMATCH;
    // Params over the guard's cap are refused whatever else was decided, and never stored (params-cap.ts).
    if (params.tooLarge !== null) decision = PARAMS_TOO_LARGE;
  }
  // The operator's policy, after every SP/1.0 and engine check allowed, before the hold.
  const policy = cmd.policy;
  const judged =
    policy === undefined || !provable
      ? null
      : policy.judge({
          decision,
          malformed,
          session,
          state,
          toolName: call.tool_name,
          paramsHash: params.hash,
          paramsText: params.text,
          estimate: call.estimated_cost_usd,
          budget:
            g.remainingBefore === null
              ? null
              : { limit_usd: Number(config.budget_usd), remaining_usd: g.remainingBefore.toNumber() },
          nowNs: env.nowNs,
        });
  if (judged !== null) decision = judged.decision;
  return { call, estimate, params, previousError, rng, decision, policyRecord: judged?.record ?? null };
}

/** The hold an ALLOW places under a budget (planHold: no store call); the exact ledger has the last word. */
function hold(g: Gathered, j: Judged, env: Env, callNumber: number) {
  let decision = j.decision;
  let reservation = null;
  let charged: readonly BudgetAccount[] = [];
  let remainingAfter = g.remainingBefore;
  const { estimate } = j;
  if (decision.verdict === "ALLOW" && g.accountId !== null && estimate?.ok === true) {
    if (estimate.hold === null)
      decision = OVERRUN; // beyond the money range: more than any budget holds
    else {
      const held = planHold(g.accounts!, {
        reservation_id: holdId(g.session.session_id, callNumber),
        account_id: g.accountId,
        session_id: g.session.session_id,
        call_number: callNumber,
        amount_usd: estimate.hold,
        nowNs: env.nowNs,
        ttlNs: env.holdTtlNs,
      });
      if (held.ok) {
        reservation = held.reservation;
        charged = held.charged;
        remainingAfter = held.result.availableAfter;
      } else decision = { verdict: "DENY", reason: held.code };
    }
  }
  return { decision, reservation, charged, remainingAfter };
}

/** The approvals a released call used: the request the state names, or (older states) every decided one. */
function consumedRows(view: StateView, sessionId: string, state: State): HitlRequest[] | { missing: Key[] } {
  const id = boundRequestId(state);
  let rows: readonly (HitlRequest | null)[];
  if (id === null) {
    const decided = view.hitlOf(sessionId, "DECIDED");
    if (decided === undefined) return { missing: [{ kind: "hitl_of", sessionId, status: "DECIDED" }] };
    rows = decided;
  } else {
    const row = view.hitl(id);
    if (row === undefined) return { missing: [{ kind: "hitl", requestId: id }] };
    rows = [row];
  }
  const used: HitlRequest[] = [];
  for (const row of rows) {
    if (row !== null && row.session_id === sessionId && row.status === "DECIDED")
      used.push({ ...row, status: "CONSUMED" });
  }
  return used;
}

/** The session's state after the call: feedback, unless the verdict only counts it. */
function nextState(
  cmd: EvaluateCommand,
  g: Gathered,
  j: Judged,
  decision: EngineDecision,
  nowNs: number,
): State {
  const { state, session } = g;
  const isPolicy = (reason: string) => cmd.policy?.isPolicyReason(reason) === true;
  // With a ledger the remaining budget written is the ledger's, so feedback is not asked for its own.
  let next = countsOnly(decision, isPolicy)
    ? state
    : feedback(
        session.config,
        g.accountId === null ? state : withoutRemaining(state),
        j.call,
        decision as Decision,
        {
          nowNs,
          paramsHash: j.params.hash,
        },
      );
  // The timeout is told once: the session then no longer waits on that request.
  if (decision === HITL_TIMEOUT) next = { ...next, pending_request: null, status: "ACTIVE" };
  // The consumed approval was shown to decide() for this call only; the session keeps none.
  if (g.replayed !== null) next = { ...next, pending_transition: session.state.pending_transition ?? null };
  return next;
}

function withoutRemaining(state: State): State {
  const { budget_remaining_usd: _omit, ...rest } = state;
  return rest;
}

/** One evaluate: the events (rows, then the decision entry, then a HITL request's own) and the answer. */
export function evaluate(view: StateView, cmd: EvaluateCommand, env: Env): Outcome<EvaluateReply> {
  const g = gather(view, cmd, env);
  if ("missing" in g || "error" in g) return g;
  const { session } = g;
  const callNumber = session.call_count + 1;
  const j = judge(cmd, g, env);
  const held = hold(g, j, env, callNumber);
  const decision = held.decision;
  let next = nextState(cmd, g, j, decision, env.nowNs);
  const events = g.before; // a fresh array of this call's
  let opened: HitlRequest | null = null;
  if (decision.verdict === "HITL") {
    opened = openRequest(
      {
        session,
        callNumber,
        toolName: j.call.tool_name,
        nonce: cmd.nonce ?? null,
        params: cmd.params,
        paramsText: j.params.text,
        paramsHash: j.params.hash,
        reason: decision.reason,
        account: g.accounts?.[0],
        remainingBefore: g.remainingBefore === null ? null : g.remainingBefore.toFixed(),
      },
      env,
    );
    events.push({ type: "hitl", row: opened, insert: true });
    // The state names the request, so the human's answer and its use are tied to this one.
    next = { ...next, pending_request: boundRequest(opened) };
  }
  if (releasesApproval(decision)) {
    const used = consumedRows(view, session.session_id, g.state);
    if (!Array.isArray(used)) return used;
    for (const row of used) events.push({ type: "hitl", row });
  }
  for (const row of held.charged) events.push({ type: "account", row });
  if (held.reservation !== null) events.push({ type: "hold", row: held.reservation });
  const remaining = held.remainingAfter === null ? null : held.remainingAfter.toFixed();
  const row: SessionRecord = {
    ...session,
    status: next.status ?? session.status,
    state: storable({
      ...next,
      budget_remaining_usd: remaining === null ? next.budget_remaining_usd : Number(remaining),
    }),
    call_count: callNumber,
    updated_ns: env.nowNs,
  };
  events.push({ type: "session", row });
  const estimateUsd =
    j.estimate?.ok === true && j.estimate.hold !== null ? moneyString(j.estimate.hold) : null;
  const reply: EvaluateReply = {
    session: row,
    callNumber,
    decision,
    remaining,
    reservationId: held.reservation?.reservation_id ?? null,
    estimateUsd,
    rng: j.rng,
    paramsHash: j.params.hash,
    repeatCount: repeatSeen(g.state, j.call.tool_name),
    opened,
    expired: g.expired,
    policyRecord: j.policyRecord,
    seen: g.state,
  };
  events.push(decisionEntry(cmd, g, j, reply, env));
  if (opened !== null) events.push(requestEntry(opened));
  return { events, reply };
}

/** The decision entry: inputs and outcome (the state decide() saw is the fold of the entries before). */
function decisionEntry(
  cmd: EvaluateCommand,
  g: Gathered,
  j: Judged,
  r: EvaluateReply,
  env: Env,
): MachineEvent {
  const { session } = g;
  const malformed = cmd.malformed !== null;
  const hasNonce = cmd.nonce !== undefined && cmd.nonce !== null && !malformed;
  // From replay inputs 3 on, large params are stored by digest beside the chain (params-cap.ts).
  const blob = cmd.rules >= 3 ? paramsBlobOf(j.params.text, j.params.hash, j.params.tooLarge) : null;
  const data: Record<string, unknown> = {
    session_id: session.session_id,
    agent_id: session.agent_id,
    organization_id: session.organization_id,
    call_number: r.callNumber,
    tool_name: malformed ? null : j.call.tool_name,
    params_hash: j.params.hash,
    nonce: hasNonce ? cmd.nonce : null,
    estimated_cost_usd: recordableEstimate(cmd.estimatedCostUsd),
    // The hold the call asked for (its own estimate or its config's default), exact.
    estimate_usd: r.estimateUsd,
    ...(malformed
      ? { input_problem: cmd.malformed }
      : j.estimate?.ok === false
        ? { input_problem: j.estimate.problem }
        : {}),
    verdict: r.decision.verdict,
    reason: r.decision.reason,
    budget_before_usd: g.remainingBefore === null ? null : g.remainingBefore.toFixed(),
    budget_after_usd: r.remaining,
    reservation_id: r.reservationId,
    // The random number probabilistic denial consumed; absent when it did not run.
    ...(j.rng === null ? {} : { rng: j.rng }),
    // An input decide() saw (error amplification), so replay sees it too; absent when not given.
    ...(j.previousError === undefined ? {} : { previous_error: j.previousError }),
    now_ns: env.nowNs,
    // The policy version in force, and what it judged; absent without a policy.
    ...(cmd.policy === undefined ? {} : cmd.policy.fields(r.policyRecord)),
    ...replayInputs({
      paramsText: j.params.text,
      paramsBytes: j.params.tooLarge,
      paramsBlob: blob !== null,
      expectedHash: cmd.expectedHash,
      hitlRequestId: r.opened === null ? null : r.opened.request_id,
      holdTtlNs: r.reservationId === null ? null : env.holdTtlNs,
    }),
  };
  // Spent on ALLOW (even one the ledger then turned into a DENY): the entry's indexed nonce column.
  const spends = j.decision.verdict === "ALLOW" && hasNonce ? { nonce: cmd.nonce! } : undefined;
  return {
    type: "entry",
    kind: "decision",
    data,
    ...(spends === undefined ? {} : { spends }),
    ...(blob === null ? {} : { blob }),
  };
}
