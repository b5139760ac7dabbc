// replayChain(): folds an audit chain, entry by entry, into the state it implies — sessions, nonces,
// budget accounts, holds, HITL requests — with the pure functions, re-deriving every verdict on the way.
// It checks no signature and no hash link (verifyChain does); it proves what follows from what.
import {
  accountChain,
  chainAvailable,
  chainOverLimit,
  chargeExpired,
  ensureAccount,
  expire,
  type Money,
  moneyString,
  reserve,
  settle,
  toMoney,
} from "@leash/budget-guard";
import {
  type BudgetAccount,
  type Call,
  type ChainEntryRecord,
  type Config,
  type Decision,
  decide,
  denyProbability,
  feedback,
  type HitlRequest,
  type Nonce,
  parseJsonKeepingNumberText,
  recordHumanDecision,
  resetCircuit,
  type SessionRecord,
  type State,
  type Substrate,
} from "@leash/core";
import {
  bindToPausedTool,
  boundRequest,
  boundRequestId,
  budgetEnabled,
  consumedTransitionOf,
  countedAfter,
  countedCallOf,
  counterFormOf,
  countsOnly,
  denyListed,
  type EngineDecision,
  estimateWithPolicy,
  guardAccountId,
  HITL_TIMEOUT,
  hasTransition,
  hitlExpiresNs,
  judgeByPolicy,
  maxParamsBytes,
  nodeSha256Hex,
  nodeSha256HexOfBytes,
  outranksEstimate,
  oversizedBytes,
  PARAMS_HASH_MISMATCH,
  PARAMS_TOO_LARGE,
  POLICY_PUBLISHED,
  type PolicyRecord,
  pausedOf,
  releasesApproval,
  resolveEstimate,
  type StoredPolicyRecord,
  sessionAccountId,
  storedRecordOf,
  TOOL_MISMATCH,
  timedOut,
  updatesOf,
} from "@leash/engine";
import { type CompiledPolicy, EMPTY_STATE, loadPolicy, type PolicyState } from "@leash/policy";
import { ReplayLedger } from "./budget-ledger.js";

/** The state a chain implies, as the snapshot tables should hold it. */
export interface Projection {
  sessions: Map<string, SessionRecord>;
  /** Seen nonces by session, keyed by nonceKey (7 and "7" are different nonces). */
  nonces: Map<string, Map<string, Nonce>>;
  /**
   * The nonce each decision entry spent, by its stream position (its seq on a chain replayed from
   * entry 0): what the store's indexed nonce column of that entry must hold (null for every other).
   */
  spent: Map<number, Nonce>;
  /** How many entries were folded (positions 0 … folded − 1). */
  folded: number;
  ledger: ReplayLedger;
  hitl: Map<string, HitlRequest>;
}

export interface ReplayMismatch {
  /** Stream position of the entry (its seq on a verified chain). */
  index: number;
  seq: number;
  kind: string;
  session_id: string | null;
  /** The recorded field that does not follow (`verdict`, `state`, `budget_after_usd`, …). */
  field: string;
  expected: unknown;
  recorded: unknown;
  message: string;
}

export interface ReplayResult {
  ok: boolean;
  /** Entries folded (up to and including a mismatching one). */
  count: number;
  /**
   * The first index from which every decision's verdict was re-derived. Decision entries written
   * before the engine recorded replay inputs (params, the caller's digest, the hold TTL) are folded
   * on their recorded verdict; this is the index after the last of them (0: the whole chain).
   */
  proved_from: number;
  /** Decision entries whose verdict was re-derived with decide(). */
  verdicts_checked: number;
  mismatch: ReplayMismatch | null;
  /** Head of what was folded: the snapshot position the projection reflects. */
  head: { seq: number; entry_hash: string } | null;
  projection: Projection;
  /** Entry kinds seen, with counts. */
  kinds: Record<string, number>;
  /** Kinds replay does not know, folded as changing nothing. */
  unknown_kinds: string[];
}

/** Thrown inside the fold, caught by replayChain and reported as the mismatch. */
class Mismatch extends Error {
  constructor(
    readonly field: string,
    readonly expected: unknown,
    readonly recorded: unknown,
    message: string,
  ) {
    super(message);
  }
}

const MALFORMED: EngineDecision = { verdict: "DENY", reason: "policy_violation:malformed_input" };
const OVERRUN: EngineDecision = { verdict: "DENY", reason: "budget_overrun" };
/** The engine's default hold TTL (EngineOptions.reservationTtlMs), for entries that did not record theirs. */
const DEFAULT_TTL_NS = 300_000 * 1e6;
/** Params that rule 1 refuses: what a recorded `params_json: null` stands for. */
const NON_CANONICAL = Object.freeze({ value: Number.NaN });
/** Request ids of HITL requests opened by entries that did not record them; named by a later hitl_decision. */
const UNNAMED = "unnamed-request:";

export const nonceKey = (nonce: Nonce): string => (typeof nonce === "number" ? `n:${nonce}` : `s:${nonce}`);

/** The JSON the chain records for a value (audit entries hold big integers as decimal text). */
export function recordedForm(value: unknown): unknown {
  if (value === null || value === undefined) return null;
  if (typeof value === "number") {
    if (!Number.isFinite(value)) return null;
    return Number.isInteger(value) && !Number.isSafeInteger(value) ? BigInt(value).toString() : value;
  }
  if (Array.isArray(value)) return value.map(recordedForm);
  if (typeof value === "object") {
    const out: Record<string, unknown> = {};
    for (const k of Object.keys(value)) {
      const v = (value as Record<string, unknown>)[k];
      if (v !== undefined) out[k] = recordedForm(v);
    }
    return out;
  }
  return value;
}

/**
 * Whether `folded` (a value replay computed) is what the chain recorded: the recorded form of it,
 * compared in place, without building either's JSON (this runs several times per entry).
 */
export function sameRecorded(folded: unknown, recorded: unknown): boolean {
  if (folded === recorded) return true;
  if (folded === undefined || folded === null) return recorded === null || recorded === undefined;
  if (typeof folded === "number") {
    if (!Number.isFinite(folded)) return recorded === null;
    return (
      Number.isInteger(folded) && !Number.isSafeInteger(folded) && recorded === BigInt(folded).toString()
    );
  }
  if (typeof folded !== "object" || typeof recorded !== "object" || recorded === null) return false;
  if (Array.isArray(folded)) {
    if (!Array.isArray(recorded) || recorded.length !== folded.length) return false;
    for (let i = 0; i < folded.length; i++) if (!sameRecorded(folded[i], recorded[i])) return false;
    return true;
  }
  if (Array.isArray(recorded)) return false;
  const theirs = recorded as Record<string, unknown>;
  let keys = 0;
  for (const key in folded) {
    const value = (folded as Record<string, unknown>)[key];
    if (value === undefined) continue;
    keys++;
    if (!Object.hasOwn(theirs, key) || !sameRecorded(value, theirs[key])) return false;
  }
  return keys === Object.keys(theirs).length;
}

function expectEqual(field: string, expected: unknown, recorded: unknown): void {
  if (!sameRecorded(expected, recorded)) {
    throw new Mismatch(
      field,
      expected,
      recorded,
      `${field} is ${JSON.stringify(recorded)} in the entry, but the entries before it give ${JSON.stringify(recordedForm(expected))}`,
    );
  }
}

/**
 * The entry's `policy` against the re-derived judgement, both in the stored (compact) form: absent only
 * for a default ALLOW with nothing to say, null when the policy did not run. An older entry's full
 * record compacts to the same, and its `hash` must name the entry's version.
 */
function expectPolicyRecord(hash: string, judged: PolicyRecord | null, data: Data): void {
  const present = Object.hasOwn(data, "policy");
  const recorded = data.policy as StoredPolicyRecord | null | undefined;
  // An entry from before `counted` is compared in its own shape (full `counter_updates`).
  const form = counterFormOf(recorded);
  const expected = storedRecordOf(judged, form);
  if (present && recorded !== null && typeof recorded === "object" && recorded.hash !== undefined) {
    expectEqual("policy.hash", hash, recorded.hash);
  }
  const normalized =
    present && recorded != null && typeof recorded === "object" ? storedRecordOf(recorded, form) : recorded;
  if ((expected === undefined) !== (normalized === undefined) || !sameRecorded(expected, normalized)) {
    throw new Mismatch(
      "policy",
      expected,
      data.policy,
      `policy is ${present ? JSON.stringify(data.policy) : "absent"} in the entry, but the entries before it give ${expected === undefined ? "none (a default ALLOW)" : JSON.stringify(expected)}`,
    );
  }
}

function storable(state: State): State {
  const { seen_nonces: _omit, ...rest } = state;
  return rest;
}

function withoutRemaining(state: State): State {
  const { budget_remaining_usd: _omit, ...rest } = state;
  return rest;
}

type Data = Record<string, unknown>;

/** node:crypto's SHA-256, for the digests replay recomputes (core's pure one is for browsers). */
const sha256Hex = nodeSha256Hex;

/**
 * A number literal JSON.parse might read differently from Python (a fraction, an exponent, 16 or
 * more digits): only then is the slower parser that keeps number text needed.
 */
const RISKY_NUMBER = /[0-9][.eE]|[0-9]{16}/;

/** The params as the engine saw them, from their recorded canonical text. */
function readParams(text: string): unknown {
  return RISKY_NUMBER.test(text) ? parseJsonKeepingNumberText(text) : JSON.parse(text);
}

export function emptyProjection(): Projection {
  return {
    sessions: new Map(),
    nonces: new Map(),
    spent: new Map(),
    folded: 0,
    ledger: new ReplayLedger(),
    hitl: new Map(),
  };
}

/** Folds entries one at a time; `replayChain` drives it over a whole chain. */
/** Where replay finds params stored by digest (a store's ChainStore.params; see storedParams). */
export type ParamsSource = (hashes: readonly string[]) => Promise<Map<string, string>>;

export interface ReplayOptions {
  /** Params stored by digest beside the chain; entries that carry theirs (`ChainEntryRecord.params`) need none. */
  params?: ParamsSource;
}

/** How many params texts replay keeps at hand: calls repeating the same large params fetch them once. */
const PARAMS_KEPT = 8;

export class ChainReplayer {
  readonly projection: Projection = emptyProjection();
  provedFrom = 0;
  verdictsChecked = 0;
  readonly unknownKinds = new Set<string>();
  /** Policy versions the chain published, by hash, and each organization's limit counters. */
  readonly policies = new Map<string, CompiledPolicy>();
  readonly policyCounters = new Map<string, PolicyState>();
  /** The params the entry being folded carries beside it (read from an export), if any. */
  #attached: ChainEntryRecord["params"];
  readonly #kept = new Map<string, string>();

  constructor(private readonly options: ReplayOptions = {}) {}

  /** The stored params text of `hash`: the entry's own, one kept, or the source's; null when none has it. */
  async #storedParams(hash: string): Promise<string | null> {
    if (this.#attached?.hash === hash) return this.#attached.text;
    const kept = this.#kept.get(hash);
    if (kept !== undefined) return kept;
    const text = (await this.options.params?.([hash]))?.get(hash);
    if (text === undefined) return null;
    if (this.#kept.size >= PARAMS_KEPT) this.#kept.delete(this.#kept.keys().next().value!);
    this.#kept.set(hash, text);
    return text;
  }

  #session(data: Data): SessionRecord {
    const id = data.session_id;
    const session = typeof id === "string" ? this.projection.sessions.get(id) : undefined;
    if (session === undefined) {
      throw new Mismatch(
        "session_id",
        "a registered session",
        id,
        `session ${JSON.stringify(id)} was never registered`,
      );
    }
    return session;
  }

  /** Folds one stored entry (its body parsed here). @throws as `apply`. */
  async applyEntry(
    index: number,
    entry: ChainEntryRecord,
    body: ParsedBody = JSON.parse(entry.body) as ParsedBody,
  ): Promise<void> {
    this.#attached = entry.params;
    try {
      await this.apply(index, entry.kind, body.data, Number(body.timestamp_ns));
    } finally {
      this.#attached = undefined;
    }
  }

  /** Folds one entry. @throws Mismatch when what it records does not follow from the entries before. */
  async apply(index: number, kind: string, data: Data, nowNs: number): Promise<void> {
    this.projection.folded = Math.max(this.projection.folded, index + 1);
    switch (kind) {
      case "session_registered":
        return this.#registered(data, nowNs);
      case "decision":
        return this.#decision(index, data);
      case "post_exec":
        return this.#postExec(data, nowNs);
      case "hitl_decision":
        return this.#hitlDecision(data, nowNs);
      case "hitl_expired":
        return this.#hitlExpired(data, nowNs);
      case "hitl_request":
        return; // announces the request its decision entry (just before) opened; no state of its own
      case "circuit_reset":
        return this.#reset(data, nowNs);
      case "session_stale": {
        const session = this.#session(data);
        expectEqual("previous_status", session.status, data.previous_status);
        if (session.status !== "ACTIVE" && session.status !== "PAUSED") {
          throw new Mismatch(
            "previous_status",
            "ACTIVE or PAUSED",
            session.status,
            "only a live session goes stale",
          );
        }
        this.#put({ ...session, status: "STALE", updated_ns: nowNs });
        return;
      }
      case "session_revived": {
        const session = this.#session(data);
        expectEqual("status", "STALE", session.status);
        this.#put({ ...session, status: session.state.status === "PAUSED" ? "PAUSED" : "ACTIVE" });
        return;
      }
      case "guard_created":
        await ensureAccount(this.projection.ledger, {
          account_id: guardAccountId(data.guard_id as string),
          scope: "guard",
          parent_id: typeof data.parent_guard_id === "string" ? guardAccountId(data.parent_guard_id) : null,
          limit_usd: data.limit_usd as string,
          nowNs,
        });
        return;
      case "reservation_expired":
        return this.#expired(data, nowNs);
      case "settled_by_expiry":
        return this.#settledByExpiry(data, nowNs);
      case POLICY_PUBLISHED:
        return this.#published(data);
      case "key_rotation":
      case "snapshot_repaired":
      case "rollback_accepted":
        return; // no state of a session or a budget changes
      default:
        // A kind the engine does not write (a note, another tool's record): folded as changing no
        // state and listed; were it to change state, the snapshot check would see the difference.
        this.unknownKinds.add(kind);
        return;
    }
  }

  /** A published version must load from its own canonical text to the hash it names. */
  #published(data: Data): void {
    let policy: CompiledPolicy;
    try {
      policy = loadPolicy(String(data.canonical));
    } catch (error) {
      throw new Mismatch(
        "canonical",
        "a policy that loads",
        null,
        `policy_published: ${(error as Error).message}`,
      );
    }
    expectEqual("policy_hash", policy.hash, data.policy_hash);
    this.policies.set(policy.hash, policy);
  }

  /** The policy version a decision entry names; it must have been published before it. */
  #policyOf(data: Data): CompiledPolicy | undefined {
    if (data.policy_hash === undefined) return undefined;
    const policy = typeof data.policy_hash === "string" ? this.policies.get(data.policy_hash) : undefined;
    if (policy === undefined) {
      throw new Mismatch(
        "policy_hash",
        "a published policy",
        data.policy_hash,
        "the policy was never published",
      );
    }
    return policy;
  }

  #put(session: SessionRecord): void {
    this.projection.sessions.set(session.session_id, session);
  }

  async #registered(data: Data, nowNs: number): Promise<void> {
    const ids = {
      session_id: data.session_id as string,
      agent_id: data.agent_id as string,
      organization_id: data.organization_id as string,
    };
    if (this.projection.sessions.has(ids.session_id)) {
      throw new Mismatch(
        "session_id",
        "a new session",
        ids.session_id,
        `session ${ids.session_id} is registered twice`,
      );
    }
    const config = data.config as Config;
    if (budgetEnabled(config)) {
      await ensureAccount(this.projection.ledger, {
        account_id: sessionAccountId(config, ids),
        scope: config.budget_scope ?? "session",
        parent_id: config.parent_guard_id ? guardAccountId(config.parent_guard_id) : null,
        limit_usd: config.budget_usd as number,
        nowNs,
      });
    }
    this.#put({
      ...ids,
      status: "ACTIVE",
      config,
      state: {
        circuit_tripped: false,
        total_calls: 0,
        session_started_ns: nowNs,
        ...(budgetEnabled(config) ? { budget_initial_usd: config.budget_usd } : {}),
      },
      call_count: 0,
      created_ns: nowNs,
      updated_ns: nowNs,
      last_heartbeat_ns: nowNs,
      at_seq: null,
    });
  }

  #seen(sessionId: string): Map<string, Nonce> {
    let seen = this.projection.nonces.get(sessionId);
    if (seen === undefined) {
      seen = new Map();
      this.projection.nonces.set(sessionId, seen);
    }
    return seen;
  }

  /** The engine's evaluateIn, step for step, on the projection instead of a store. */
  async #decision(index: number, data: Data): Promise<void> {
    const session = this.#session(data);
    const { config } = session;
    const nowNs = Number(data.now_ns);
    const provable = data.replay_inputs !== undefined;
    const malformed = data.tool_name === null && data.input_problem !== undefined;
    const nonce = malformed ? undefined : (data.nonce as Nonce | null);
    const hasNonce = nonce !== undefined && nonce !== null;
    const seenNonces = this.#seen(session.session_id);
    const seen = hasNonce && seenNonces.has(nonceKey(nonce));
    const callNumber = session.call_count + 1;
    expectEqual("call_number", callNumber, data.call_number);

    const accountId = budgetEnabled(config) ? sessionAccountId(config, session) : null;
    const toolName = malformed ? "" : (data.tool_name as string);
    // The policy the entry names, also for the estimate an `estimate_usd` rule gives a call without one.
    const policy = this.#policyOf(data);
    const estimate =
      accountId === null || malformed
        ? null
        : resolveEstimate(
            config,
            toolName,
            estimateWithPolicy(policy, toolName, session, data.estimated_cost_usd),
          );
    let params: unknown = {};
    let paramsHash = data.params_hash as string | null;
    const text = data.params_json;
    // The params' canonical text, inline or stored by digest: what the policy layer's conditions read.
    let canonicalText: string | null = null;
    if (provable) {
      if (typeof text === "string") {
        canonicalText = text;
        paramsHash = sha256Hex(text);
        expectEqual("params_hash", paramsHash, data.params_hash);
        params = readParams(text);
      } else if (data.params_blob === true && typeof paramsHash === "string") {
        // Stored once by digest beside the chain: the text must be there and hash to the signed digest.
        const stored = await this.#storedParams(paramsHash);
        if (stored === null) {
          throw new Mismatch(
            "params_blob",
            paramsHash,
            null,
            `the params of digest ${paramsHash} are not stored beside the chain`,
          );
        }
        expectEqual("params_hash", sha256Hex(stored), paramsHash);
        params = readParams(stored);
        canonicalText = stored;
      } else if (typeof data.params_bytes === "number") {
        // Params over the cap were recorded by digest and size alone: the cap decides, not decide().
        params = NON_CANONICAL;
      } else {
        expectEqual("params_hash", null, data.params_hash);
        params = NON_CANONICAL;
      }
    }
    const call: Call = {
      tool_name: toolName,
      params: params as Record<string, unknown>,
      nonce,
      estimated_cost_usd:
        estimate === null
          ? (data.estimated_cost_usd as number | undefined)
          : !estimate.ok
            ? undefined
            : estimate.hold === null
              ? Number.POSITIVE_INFINITY
              : estimate.hold.toNumber(),
    };
    const state: State = { ...session.state, seen_nonces: seen ? [nonce] : [] };
    // A re-dispatch of a used approval is shown that approval as consumed, as the engine does.
    const reused =
      seen && !malformed && !hasTransition(state)
        ? consumedTransitionOf(
            [...this.projection.hitl.values()].filter(
              (r) => r.session_id === session.session_id && r.status === "CONSUMED",
            ),
            nonce as Nonce,
          )
        : null;
    if (reused !== null) state.pending_transition = reused;
    let remainingBefore: Money | null = null;
    let accounts: BudgetAccount[] | undefined;
    const ledger = this.projection.ledger;
    if (accountId !== null) {
      accounts = await accountChain(ledger, accountId);
      remainingBefore = chainAvailable(accounts);
      state.budget_initial_usd = config.budget_usd;
      state.budget_remaining_usd = remainingBefore.toNumber();
    }
    // Entries of replay inputs 1 also carry the state decide() saw: it must be the folded one. Later
    // entries carry none; the verdict and budget figures below are then checked against the fold alone.
    if (data.state !== undefined) this.#expectState(state, data.state);
    const recordedRng = (data.rng ?? null) as number | null;
    const rngValue =
      denyProbability(config as Record<string, unknown>, state as Record<string, unknown>) > 0
        ? recordedRng
        : null;
    expectEqual("rng", rngValue, recordedRng);

    let decision: EngineDecision;
    if (!provable) {
      // Folded on its recorded verdict: without the params the call cannot be decided again.
      decision = (
        data.reason === TOOL_MISMATCH.reason
          ? TOOL_MISMATCH
          : data.reason === PARAMS_HASH_MISMATCH.reason
            ? PARAMS_HASH_MISMATCH
            : data.reason === HITL_TIMEOUT.reason
              ? HITL_TIMEOUT
              : { verdict: data.verdict, reason: data.reason }
      ) as EngineDecision;
      this.provedFrom = index + 1;
    } else {
      this.verdictsChecked++;
      decision = malformed
        ? MALFORMED
        : bindToPausedTool(
            decide(config, state, call, {
              nowNs,
              rng: rngValue ?? undefined,
              ...(typeof data.previous_error === "string" ? { errorText: data.previous_error } : {}),
              sha256Hex,
              sha256HexOfBytes: nodeSha256HexOfBytes,
            }),
            state,
            call,
          );
      if (!malformed) decision = denyListed(decision, config, call);
      if (estimate !== null && !estimate.ok && !outranksEstimate(decision)) {
        decision = { verdict: "DENY", reason: estimate.reason };
      }
      if (!malformed && decision.verdict !== "DENY" && timedOut(state, call)) decision = HITL_TIMEOUT;
      const expectedHash = data.expected_params_hash;
      if (typeof expectedHash === "string" && expectedHash !== paramsHash) decision = PARAMS_HASH_MISMATCH;
      // From replay inputs 3 on, the guard's params cap applies, as in the engine (params-cap.ts).
      if (typeof data.replay_inputs === "number" && data.replay_inputs >= 3) {
        const cap = maxParamsBytes(config);
        const recorded = typeof data.params_bytes === "number" ? data.params_bytes : null;
        const tooLarge =
          recorded === null ? oversizedBytes(typeof text === "string" ? text : null, cap) : recorded;
        if (tooLarge !== null && tooLarge > cap) decision = PARAMS_TOO_LARGE;
        expectEqual("params_bytes", tooLarge !== null && tooLarge > cap ? tooLarge : null, recorded);
      }
    }
    // The policy layer, with the version the entry names and the counters folded so far.
    const counters = this.policyCounters.get(session.organization_id) ?? EMPTY_STATE;
    let policyRecord = (data.policy ?? null) as StoredPolicyRecord | null;
    if (policy !== undefined && provable) {
      const judged = judgeByPolicy({
        policy,
        decision,
        malformed,
        session,
        state,
        toolName,
        paramsHash,
        paramsText: canonicalText,
        estimate: call.estimated_cost_usd,
        budget:
          remainingBefore === null
            ? null
            : { limit_usd: Number(config.budget_usd), remaining_usd: remainingBefore.toNumber() },
        nowNs,
        counters,
      });
      expectPolicyRecord(policy.hash, judged.record, data);
      policyRecord = judged.record;
      decision = judged.decision;
    }

    let reservationId: string | null = null;
    let remainingAfter = remainingBefore;
    if (decision.verdict === "ALLOW") {
      if (hasNonce) {
        seenNonces.set(nonceKey(nonce), nonce);
        this.projection.spent.set(index, nonce);
      }
      if (accountId !== null && estimate?.ok === true && estimate.hold === null) {
        decision = OVERRUN;
      } else if (accountId !== null && estimate?.ok === true && estimate.hold !== null) {
        const ttl = data.hold_ttl_ns;
        const held = await reserve(ledger, {
          reservation_id: `${session.session_id}#${callNumber}`,
          account_id: accountId,
          session_id: session.session_id,
          call_number: callNumber,
          amount_usd: estimate.hold,
          nowNs,
          ttlNs: typeof ttl === "number" && ttl > 0 ? ttl : DEFAULT_TTL_NS,
          accounts,
        });
        if (held.ok) {
          reservationId = held.reservation.reservation_id;
          remainingAfter = held.availableAfter;
        } else {
          decision = { verdict: "DENY", reason: held.code };
        }
      }
    }
    expectEqual("verdict", decision.verdict, data.verdict);
    expectEqual("reason", decision.reason, data.reason);
    if (policy !== undefined) {
      this.policyCounters.set(
        session.organization_id,
        countedAfter(
          counters,
          updatesOf(policyRecord, policy, countedCallOf(data, nowNs)),
          decision.verdict,
          nowNs,
        ),
      );
    }
    expectEqual("reservation_id", reservationId, data.reservation_id);
    expectEqual("budget_before_usd", remainingBefore?.toFixed() ?? null, data.budget_before_usd);
    const remaining = remainingAfter === null ? null : remainingAfter.toFixed();
    expectEqual("budget_after_usd", remaining, data.budget_after_usd);
    const estimateUsd = estimate?.ok === true && estimate.hold !== null ? moneyString(estimate.hold) : null;
    expectEqual("estimate_usd", estimateUsd, data.estimate_usd);

    let next = countsOnly(decision)
      ? state
      : feedback(config, accountId === null ? state : withoutRemaining(state), call, decision as Decision, {
          nowNs,
          paramsHash,
        });
    // As the engine: the timeout is told once, and a used approval shown to decide() is not kept.
    if (decision === HITL_TIMEOUT) next = { ...next, pending_request: null, status: "ACTIVE" };
    if (reused !== null) next = { ...next, pending_transition: session.state.pending_transition ?? null };
    if (decision.verdict === "HITL") {
      const named = data.hitl_request_id;
      const request: HitlRequest = {
        request_id: typeof named === "string" ? named : `${UNNAMED}${session.session_id}#${callNumber}`,
        session_id: session.session_id,
        call_number: callNumber,
        tool_name: call.tool_name,
        nonce: hasNonce ? nonce : null,
        args_digest: paramsHash,
        reason: decision.reason as Decision["reason"],
        status: "PENDING",
        decision: null,
        operator_id: null,
        successor_nonce: null,
        successor_args_digest: null,
        created_ns: nowNs,
        decided_ns: null,
        // The operator's view (params, budget, policy) is not state replay derives; the expiry is.
        params_json: null,
        budget_spent_usd: null,
        budget_limit_usd: null,
        budget_remaining_usd: null,
        policy_id: null,
        expires_ns: hitlExpiresNs(config, nowNs),
        comment: null,
        successor_params_json: null,
      };
      this.projection.hitl.set(request.request_id, request);
      next = { ...next, pending_request: boundRequest(request) };
    }
    if (releasesApproval(decision)) this.#consumeApproval(session.session_id, state);
    this.#put({
      ...session,
      status: next.status ?? session.status,
      state: storable({
        ...next,
        budget_remaining_usd: remaining === null ? next.budget_remaining_usd : Number(remaining),
      }),
      call_count: callNumber,
      updated_ns: nowNs,
    });
  }

  /**
   * The state decide() saw must be the folded one. A request opened by an entry that did not name
   * it takes its name from the first entry that shows it.
   */
  #expectState(folded: State, recorded: unknown): void {
    const pending = folded.pending_request as { request_id?: unknown } | null | undefined;
    const shown = (recorded as State | null)?.pending_request as { request_id?: unknown } | null | undefined;
    if (
      typeof pending?.request_id === "string" &&
      pending.request_id.startsWith(UNNAMED) &&
      typeof shown?.request_id === "string"
    ) {
      this.#rename(pending.request_id, shown.request_id);
      folded.pending_request = {
        ...folded.pending_request!,
        request_id: shown.request_id,
      } as State["pending_request"];
    }
    expectEqual("state", folded, recorded);
  }

  #rename(from: string, to: string): void {
    const request = this.projection.hitl.get(from);
    if (request === undefined) return;
    this.projection.hitl.delete(from);
    this.projection.hitl.set(to, { ...request, request_id: to });
    const session = this.projection.sessions.get(request.session_id);
    const bound = session?.state.pending_request as { request_id?: unknown } | null | undefined;
    if (session !== undefined && bound?.request_id === from) {
      this.#put({
        ...session,
        state: {
          ...session.state,
          pending_request: { ...session.state.pending_request!, request_id: to } as State["pending_request"],
        },
      });
    }
  }

  #consumeApproval(sessionId: string, state: State): void {
    const id = boundRequestId(state);
    for (const row of this.projection.hitl.values()) {
      if (
        row.session_id === sessionId &&
        row.status === "DECIDED" &&
        (id === null || row.request_id === id)
      ) {
        this.projection.hitl.set(row.request_id, { ...row, status: "CONSUMED" });
      }
    }
  }

  async #postExec(data: Data, nowNs: number): Promise<void> {
    const session = this.#session(data);
    const ledger = this.projection.ledger;
    const id = data.reservation_id as string;
    const hold = await ledger.getReservation(id);
    if (hold === null)
      throw new Mismatch("reservation_id", "a placed hold", id, `hold ${id} was never placed`);
    expectEqual("hold_status", hold.status, data.hold_status);
    const key = typeof data.idempotency_key === "string" ? data.idempotency_key : `postexec:${id}`;
    const settled = await settle(ledger, id, {
      actual_usd: data.actual_usd as string,
      nowNs,
      idempotency_key: key,
    });
    expectEqual("replayed", false, settled.replayed);
    const accounts = await accountChain(ledger, sessionAccountId(session.config, session));
    const remaining = chainAvailable(accounts).toFixed();
    expectEqual("estimated_usd", settled.amount_usd.toFixed(), data.estimated_usd);
    expectEqual("overrun_usd", settled.overrun_usd.toFixed(), data.overrun_usd);
    expectEqual("budget_after_usd", remaining, data.budget_after_usd);
    expectEqual("late", settled.late, data.late);
    expectEqual("over_limit_usd", chainOverLimit(accounts).toFixed(), data.over_limit_usd);
    const spent = toMoney(session.state.budget_spent_usd ?? 0).plus(toMoney(data.actual_usd as string));
    this.#put({
      ...session,
      state: {
        ...session.state,
        budget_spent_usd: spent.toNumber(),
        budget_remaining_usd: Number(remaining),
      },
      updated_ns: nowNs,
    });
  }

  /** An unanswered request expired: its row closes and the paused call is marked for hitl_timeout. */
  #hitlExpired(data: Data, nowNs: number): void {
    const session = this.#session(data);
    const requestId = data.request_id as string;
    const open = this.projection.hitl.get(requestId);
    if (open === undefined || open.session_id !== session.session_id || open.status !== "PENDING") {
      throw new Mismatch(
        "request_id",
        "a PENDING request of the session",
        open?.status ?? requestId,
        `request ${requestId} of session ${session.session_id} cannot expire`,
      );
    }
    expectEqual("expires_ns", open.expires_ns, data.expires_ns);
    if (open.expires_ns === null || open.expires_ns > nowNs) {
      throw new Mismatch("expires_ns", `<= ${nowNs}`, open.expires_ns, `request ${requestId} was not due`);
    }
    this.projection.hitl.set(requestId, {
      ...open,
      status: "EXPIRED",
      operator_id: data.operator_id as string,
      decided_ns: nowNs,
    });
    const paused = pausedOf(session.state);
    if (paused !== null && paused.request_id === requestId) {
      this.#put({
        ...session,
        state: {
          ...session.state,
          pending_request: { ...paused, expired: true } as State["pending_request"],
        },
        updated_ns: nowNs,
      });
    }
  }

  async #hitlDecision(data: Data, nowNs: number): Promise<void> {
    const session = this.#session(data);
    const requestId = data.request_id as string;
    let open = this.projection.hitl.get(requestId);
    if (open === undefined) {
      // Opened by an entry that did not name it: the answer names it now.
      const unnamed = `${UNNAMED}${session.session_id}#${data.call_number as number}`;
      if (this.projection.hitl.has(unnamed)) {
        this.#rename(unnamed, requestId);
        open = this.projection.hitl.get(requestId);
      }
    }
    if (open === undefined || open.session_id !== session.session_id) {
      throw new Mismatch(
        "request_id",
        "an open request of the session",
        requestId,
        `request ${requestId} was never opened for session ${session.session_id}`,
      );
    }
    if (open.status !== "PENDING") {
      throw new Mismatch(
        "request_id",
        "PENDING",
        open.status,
        `request ${requestId} was answered already (${open.status})`,
      );
    }
    expectEqual("call_number", open.call_number, data.call_number);
    expectEqual("tool_name", open.tool_name, data.tool_name);
    expectEqual("nonce", open.nonce, data.nonce);
    expectEqual("args_digest", open.args_digest, data.args_digest);
    const successor = data.successor as { nonce: Nonce; args_digest: string } | null;
    const state = recordHumanDecision(
      { ...session.state, pending_request: boundRequest(open) },
      data.decision as "approve",
      successor ? { nonce: successor.nonce, argsDigest: successor.args_digest } : undefined,
    );
    this.projection.hitl.set(requestId, {
      ...open,
      status: "DECIDED",
      decision: data.decision as string,
      operator_id: data.operator_id as string,
      successor_nonce: successor?.nonce ?? null,
      successor_args_digest: successor?.args_digest ?? null,
      decided_ns: nowNs,
    });
    this.#put({
      ...session,
      status: state.status ?? session.status,
      state: storable(state),
      updated_ns: nowNs,
    });
  }

  #reset(data: Data, nowNs: number): void {
    const session = this.#session(data);
    expectEqual("trip_reason", session.state.circuit_trip_reason ?? null, data.trip_reason);
    const state = resetCircuit(session.state);
    this.#put({ ...session, status: state.status ?? "ACTIVE", state, updated_ns: nowNs });
  }

  async #expired(data: Data, nowNs: number): Promise<void> {
    const ledger = this.projection.ledger;
    const id = data.reservation_id as string;
    const done = await ledger.expiring(id, () => expire(ledger, nowNs, 1));
    if (done.length !== 1) {
      const hold = ledger.reservations.get(id);
      throw new Mismatch(
        "reservation_id",
        "a PENDING hold past its TTL",
        hold?.status ?? null,
        `hold ${id} could not expire at this entry`,
      );
    }
    expectEqual("released_usd", done[0]!.amount_usd, data.released_usd);
  }

  /** An ALLOWed call's hold passed its TTL unsettled and was charged at its estimate. */
  async #settledByExpiry(data: Data, nowNs: number): Promise<void> {
    const ledger = this.projection.ledger;
    const id = data.reservation_id as string;
    const done = await ledger.expiring(id, () => chargeExpired(ledger, nowNs, 1));
    if (done.length !== 1) {
      const hold = ledger.reservations.get(id);
      throw new Mismatch(
        "reservation_id",
        "a PENDING hold past its TTL",
        hold?.status ?? null,
        `hold ${id} could not be charged at this entry`,
      );
    }
    expectEqual("charged_usd", done[0]!.amount_usd, data.charged_usd);
    const accounts = await accountChain(ledger, done[0]!.account_ids[0]!);
    expectEqual("budget_after_usd", chainAvailable(accounts).toFixed(), data.budget_after_usd);
  }
}

interface ParsedBody {
  seq: number;
  timestamp_ns: string;
  data: Data;
}

/** The params a store keeps by digest (ChainStore.params), read in a transaction of their own. */
export function storedParams(substrate: Substrate): ParamsSource {
  return (hashes) => substrate.transaction((tx) => tx.chain.params(hashes));
}

/**
 * Replays `entries` (a whole chain, from seq 0) and stops at the first entry whose recorded verdict,
 * state or amounts do not follow from the entries before it. A body that does not parse is reported
 * the same way (verifyChain says why).
 */
export async function replayChain(
  entries: Iterable<ChainEntryRecord> | AsyncIterable<ChainEntryRecord>,
  options: ReplayOptions = {},
): Promise<ReplayResult> {
  const replayer = new ChainReplayer(options);
  const kinds: Record<string, number> = {};
  let index = 0;
  let head: ReplayResult["head"] = null;
  let mismatch: ReplayMismatch | null = null;
  for await (const entry of entries) {
    let body: ParsedBody | null = null;
    try {
      body = JSON.parse(entry.body) as ParsedBody;
      kinds[entry.kind] = (kinds[entry.kind] ?? 0) + 1;
      await replayer.applyEntry(index, entry, body);
    } catch (error) {
      const data = body?.data;
      mismatch = {
        index,
        seq: entry.seq,
        kind: entry.kind,
        session_id: typeof data?.session_id === "string" ? data.session_id : entry.session_id,
        field: error instanceof Mismatch ? error.field : "entry",
        expected: error instanceof Mismatch ? recordedForm(error.expected) : null,
        recorded: error instanceof Mismatch ? error.recorded : null,
        message: error instanceof Error ? error.message : String(error),
      };
      index++;
      head = { seq: entry.seq, entry_hash: entry.entry_hash };
      break;
    }
    index++;
    head = { seq: entry.seq, entry_hash: entry.entry_hash };
  }
  return {
    ok: mismatch === null,
    count: index,
    proved_from: replayer.provedFrom,
    verdicts_checked: replayer.verdictsChecked,
    mismatch,
    head,
    projection: replayer.projection,
    kinds,
    unknown_kinds: [...replayer.unknownKinds],
  };
}
