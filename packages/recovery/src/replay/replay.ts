// replayChain(): folds an audit chain, entry by entry, into the state it implies — sessions, nonces,
// budget accounts, holds, HITL requests — with the pure functions, re-deriving every verdict on the way.
// It checks no signature and no hash link (verifyChain does); it proves what follows from what.
import {
  accountChain,
  chainAvailable,
  chargeExpired,
  ensureAccount,
  expire,
  settle,
} from "@leash/budget-guard";
import type { ChainEntryRecord, Nonce, SessionRecord, State } from "@leash/core";
import { guardAccountId, POLICY_PUBLISHED, sessionAccountId } from "@leash/engine";
import {
  type AnswerCommand,
  type Command,
  DEFAULT_HOLD_TTL_NS,
  decide,
  type Env,
  type MachineEvent,
  type Outcome,
  postExecEvents,
} from "@leash/machine";
import { type CompiledPolicy, loadPolicy, type PolicyState } from "@leash/policy";
import { ReplayLedger } from "./budget-ledger.js";
import { type DecisionFold, foldDecision, UNNAMED } from "./decision.js";
import { type DiffOptions, expectEntry, expectEqual, Mismatch } from "./diff.js";
import { FoldView, type Projection } from "./fold-view.js";

export { nonceKey, recordedForm, sameRecorded } from "./diff.js";
export type { Projection } from "./fold-view.js";

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

type Data = Record<string, unknown>;

/** What a post_exec entry records of its settlement (entries before these fields are not re-derived). */
const SETTLED = ["estimated_usd", "overrun_usd", "budget_after_usd", "late", "over_limit_usd"];

/** A hitl_expired entry's `now_ns` is its own time, which the fold takes from the entry. */
const NOW = new Set(["now_ns"]);

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
      case "session_stale":
        return this.#stale(data, nowNs);
      case "session_revived":
        return this.#revived(data, nowNs);
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

  readonly #view = new FoldView(this.projection);

  /**
   * The machine's transition for the entry's command at the entry's time: its events, once the entry
   * it derives is the recorded one (`diff`). A refusal is the mismatch `field`.
   */
  #derive<R>(command: Command, data: Data, nowNs: number, field: string, diff: DiffOptions = {}) {
    const env: Env = {
      nowNs,
      rng: () => 0,
      newId: () => String(data.session_id),
      holdTtlNs: DEFAULT_HOLD_TTL_NS,
    };
    const outcome = decide(this.#view, command, env) as Outcome<R>;
    if ("error" in outcome)
      throw new Mismatch(field, "an entry that follows", data[field] ?? null, outcome.error.message);
    if (!("events" in outcome))
      throw new Mismatch("entry", "a decidable entry", null, "the fold lacks a row");
    const entry = outcome.events.find(
      (e): e is Extract<MachineEvent, { type: "entry" }> => e.type === "entry",
    );
    if (entry === undefined) {
      throw new Mismatch(
        field,
        "a change of state",
        data[field] ?? null,
        `the entry changes nothing at this point`,
      );
    }
    expectEntry(entry.data, data, diff);
    return outcome;
  }

  async #registered(data: Data, nowNs: number): Promise<void> {
    const sessionId = data.session_id as string;
    if (this.projection.sessions.has(sessionId)) {
      throw new Mismatch(
        "session_id",
        "a new session",
        sessionId,
        `session ${sessionId} is registered twice`,
      );
    }
    const command = {
      kind: "register",
      sessionId,
      agentId: data.agent_id as string,
      organizationId: data.organization_id as string,
      config: data.config as never,
    } as const;
    await this.#view.apply(0, this.#derive(command, data, nowNs, "session_id").events);
  }

  /** The engine's evaluate, through the same machine transition, on the fold instead of a store. */
  async #decision(index: number, data: Data): Promise<void> {
    const fold: DecisionFold = {
      view: this.#view,
      session: (d) => this.#session(d),
      policyOf: (d) => this.#policyOf(d),
      policyCounters: this.policyCounters,
      storedParams: (hash) => this.#storedParams(hash),
      rename: (from, to) => this.#rename(from, to),
    };
    if (await foldDecision(fold, index, data)) this.verdictsChecked++;
    else this.provedFrom = index + 1;
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
    const { events } = postExecEvents({
      session,
      callNumber: data.call_number as number,
      hold,
      settled,
      accounts,
      success: data.success as boolean | undefined,
      errorMessage: data.error_message,
      nowNs,
    });
    const entry = events.find((e) => e.type === "entry") as { data: Data };
    expectEntry(entry.data, data, { only: SETTLED });
    await this.#view.apply(0, events);
  }

  /** An unanswered request expired: its row closes and the paused call is marked for hitl_timeout. */
  async #hitlExpired(data: Data, nowNs: number): Promise<void> {
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
    const command = { kind: "expire", sessionId: session.session_id, requestId } as const;
    await this.#view.apply(0, this.#derive(command, data, nowNs, "expires_ns", { skip: NOW }).events);
  }

  async #hitlDecision(data: Data, nowNs: number): Promise<void> {
    const session = this.#session(data);
    const requestId = data.request_id as string;
    if (!this.projection.hitl.has(requestId)) {
      // Opened by an entry that did not name it: the answer names it now.
      const unnamed = `${UNNAMED}${session.session_id}#${data.call_number as number}`;
      if (this.projection.hitl.has(unnamed)) this.#rename(unnamed, requestId);
    }
    const successor = data.successor as { nonce: Nonce; args_digest: string } | null;
    const command: AnswerCommand = {
      kind: "answer",
      sessionId: session.session_id,
      requestId,
      decision: data.decision as AnswerCommand["decision"],
      operatorId: data.operator_id as string,
      successor: successor ?? undefined,
      comment: typeof data.comment === "string" ? data.comment : null,
    };
    await this.#view.apply(0, this.#derive(command, data, nowNs, "request_id").events);
  }

  #reset(data: Data, nowNs: number): Promise<void> {
    const session = this.#session(data);
    const command = {
      kind: "reset",
      sessionId: session.session_id,
      operatorId: data.operator_id as string,
    } as const;
    return this.#view.apply(0, this.#derive(command, data, nowNs, "trip_reason").events);
  }

  /** Heartbeats are not in the chain: a session_stale entry is checked for the status it left. */
  #stale(data: Data, nowNs: number): Promise<void> {
    const session = this.#session(data);
    expectEqual("previous_status", session.status, data.previous_status);
    const command = {
      kind: "mark_stale",
      sessionId: session.session_id,
      staleAfterNs: null,
      heartbeatIntervalMs: null,
      missedHeartbeats: null,
    } as const;
    const only = { only: ["previous_status"] };
    return this.#view.apply(0, this.#derive(command, data, nowNs, "previous_status", only).events);
  }

  #revived(data: Data, nowNs: number): Promise<void> {
    const session = this.#session(data);
    expectEqual("status", "STALE", session.status);
    const command = { kind: "heartbeat", sessionId: session.session_id } as const;
    return this.#view.apply(0, this.#derive(command, data, nowNs, "status").events);
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

export interface ParsedBody {
  seq: number;
  timestamp_ns: string;
  data: Data;
}
