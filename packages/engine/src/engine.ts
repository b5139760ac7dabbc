// createEngine(): library mode — one substrate transaction per evaluate (load → decide → feedback →
// reserve → commit → verdict). No verdict is returned before its transaction has committed.
import { randomUUID } from "node:crypto";
import {
  accountChain,
  available,
  chainAvailable,
  ensureAccount,
  expire,
  type Money,
  reserve,
  settle,
  toMoney,
} from "@leash/budget-guard";
import { compactJws, keyRotationData, type Signer } from "@leash/chain";
import {
  type BudgetAccount,
  type Call,
  type ChainEntryRecord,
  canonicalHash,
  canonicalizationError,
  type Decision,
  decide,
  denyProbability,
  feedback,
  type HitlRequest,
  recordHumanDecision,
  resetCircuit,
  type SessionRecord,
  type State,
  type Substrate,
  SubstrateError,
  type SubstrateTx,
  type TransactionHints,
} from "@leash/core";
import { validateConfig } from "@leash/core/schema";
import { systemClock } from "@leash/outbox";
import { budgetEnabled, ensureSessionAccount, guardAccountId, sessionAccountId } from "./accounts.js";
import { Auditor, type ChainHead } from "./audit.js";
import { LeashAlreadyDecided, LeashError } from "./errors.js";
import {
  bindToPausedTool,
  boundRequest,
  boundRequestId,
  type EngineDecision,
  PARAMS_HASH_MISMATCH,
  releasesApproval,
  TOOL_MISMATCH,
} from "./hitl-binding.js";
import { checkResumeRequest } from "./resume-input.js";
import type {
  EngineOptions,
  EvaluateRequest,
  EvaluateResult,
  PostExecRequest,
  PostExecResult,
  RegisterRequest,
  ResumeRequest,
  SessionView,
} from "./types.js";

/** The default clock: epoch nanoseconds that never go backwards within the process. */
export { systemClock };

const reservationId = (sessionId: string, callNumber: number) => `${sessionId}#${callNumber}`;

/** State as stored: seen nonces live in the NonceStore, not in the session row. */
function storable(state: State): State {
  const { seen_nonces: _omit, ...rest } = state;
  return rest;
}

/** State without its remaining budget: feedback then leaves that field to the caller. */
function withoutRemaining(state: State): State {
  const { budget_remaining_usd: _omit, ...rest } = state;
  return rest;
}

/**
 * The rows evaluate reads (the session, its nonce, the chain head and the budget accounts this
 * session drew on last time), so a substrate may fetch them ahead. The accounts are a guess from
 * `accountsOf`: hints never change what the transaction sees, only how soon.
 */
function evaluateHints(
  request: EvaluateRequest,
  accountsOf: ReadonlyMap<string, readonly string[]>,
): TransactionHints | undefined {
  const sessionId = request.session_id;
  if (typeof sessionId !== "string" || sessionId === "") return undefined;
  const nonce = request.nonce;
  const accounts = accountsOf.get(sessionId);
  return {
    sessions: [sessionId],
    ...(typeof nonce === "string" || typeof nonce === "number" ? { nonces: [{ sessionId, nonce }] } : {}),
    ...(accounts === undefined ? {} : { accounts }),
    chainHead: true,
  };
}

/** Sessions whose account chain evaluate remembers for its hints; past it the memory starts afresh. */
const HINTED_SESSIONS_MAX = 10_000;

export interface Engine {
  readonly substrate: Substrate;
  register(request: RegisterRequest): Promise<SessionView>;
  evaluate(request: EvaluateRequest): Promise<EvaluateResult>;
  postExec(request: PostExecRequest): Promise<PostExecResult>;
  getSession(sessionId: string): Promise<SessionView>;
  /**
   * Records a human's decision on the session's paused call (spec §3.6). Each request takes one
   * answer: a later (or concurrent) one is refused with LeashAlreadyDecided; bad input with
   * INVALID_ARGUMENT, before anything is written.
   */
  resume(request: ResumeRequest): Promise<SessionView>;
  /** Operator reset of a tripped circuit. */
  reset(sessionId: string, operatorId: string): Promise<SessionView>;
  heartbeat(sessionId: string): Promise<void>;
  /**
   * Marks an ACTIVE or PAUSED session STALE when its last heartbeat (or its registration) is older
   * than `staleAfterNs` (spec §4.5: three missed 30 s heartbeats), with a signed session_stale entry.
   * Returns the entry's position, or null when the session is not (or no longer) overdue.
   */
  markStale(
    sessionId: string,
    options: { staleAfterNs: number; heartbeatIntervalMs?: number; missedHeartbeats?: number },
  ): Promise<{ entry_seq: number; entry_hash: string } | null>;
  /** Creates a named budget guard that sessions can draw on through `parent_guard_id`. */
  createGuard(guard: {
    guard_id: string;
    limit_usd: number | string;
    parent_guard_id?: string;
  }): Promise<void>;
  /** Releases budget holds whose agent never reported back; returns how many. */
  expireReservations(limit?: number): Promise<number>;
  /** Signs a key_rotation entry naming `next` with the current key, then signs with `next`. */
  rotateKey(next: Signer, operatorId: string): Promise<void>;
  /** The public key that signs new entries (hex). */
  readonly publicKeyHex: string;
}

export function createEngine(options: EngineOptions): Engine {
  const { substrate } = options;
  const clock = options.clock ?? systemClock;
  const rng = options.rng ?? Math.random;
  const ttlNs = (options.reservationTtlMs ?? 300_000) * 1e6;
  const newId = options.newId ?? randomUUID;
  if (options.signer === undefined) {
    throw new LeashError(
      "INVALID_ARGUMENT",
      "createEngine needs a signer: every decision is signed into the audit chain",
    );
  }
  const auditor = new Auditor(options.signer);
  /** The account chain each session's last evaluate read: the next one hints at it (see evaluateHints). */
  const accountsOf = new Map<string, readonly string[]>();
  function rememberAccounts(sessionId: string, accounts: readonly BudgetAccount[]): void {
    if (accountsOf.size >= HINTED_SESSIONS_MAX && !accountsOf.has(sessionId)) accountsOf.clear();
    accountsOf.set(
      sessionId,
      accounts.map((account) => account.account_id),
    );
  }

  /** substrate.transaction, telling the auditor which transaction committed (the last try, after retries). */
  function transaction<T>(fn: (tx: SubstrateTx) => Promise<T>, hints?: TransactionHints): Promise<T> {
    let last: SubstrateTx | undefined;
    return substrate
      .transaction((tx) => {
        last = tx;
        return fn(tx);
      }, hints)
      .then((value) => {
        if (last !== undefined) auditor.committed(last);
        return value;
      });
  }

  function checkSessionId(sessionId: unknown): asserts sessionId is string {
    if (typeof sessionId !== "string" || sessionId === "") {
      throw new LeashError("INVALID_ARGUMENT", "session_id must be a non-empty string");
    }
  }

  async function loadSession(tx: SubstrateTx, sessionId: string): Promise<SessionRecord> {
    checkSessionId(sessionId);
    const session = await tx.sessions.get(sessionId);
    if (session === null)
      throw new LeashError("SESSION_NOT_FOUND", `unknown session ${JSON.stringify(sessionId)}`);
    return session;
  }

  /**
   * Marks the request whose approval `state` released as used, and only that one. A state written
   * before requests were named in it consumes every decided request of the session instead.
   */
  async function consumeApproval(tx: SubstrateTx, sessionId: string, state: State): Promise<void> {
    const id = boundRequestId(state);
    const rows = id === null ? await tx.hitl.list({ sessionId, status: "DECIDED" }) : [await tx.hitl.get(id)];
    for (const row of rows) {
      if (row !== null && row.session_id === sessionId && row.status === "DECIDED") {
        await tx.hitl.update({ ...row, status: "CONSUMED" });
      }
    }
  }

  /**
   * The request a human's answer lands on: the session's open (PENDING) one, or the one named, if it
   * is that one. Read under the session row's lock, so two answers at once find it one after the
   * other: the second sees the first's answer and is told so (LeashAlreadyDecided).
   */
  async function answeredRequest(
    tx: SubstrateTx,
    session: SessionRecord,
    requestId?: string,
  ): Promise<HitlRequest> {
    const sessionId = session.session_id;
    const pending = await tx.hitl.list({ sessionId, status: "PENDING" });
    const open = pending.sort((a, b) => b.call_number - a.call_number)[0];
    if (requestId !== undefined) {
      const named = await tx.hitl.get(requestId);
      if (named === null || named.session_id !== sessionId) {
        throw new LeashError(
          "NO_PENDING_REQUEST",
          `session ${sessionId} has no request ${JSON.stringify(requestId)}`,
        );
      }
      if (named.status !== "PENDING") throw new LeashAlreadyDecided(named);
      if (named.request_id !== open?.request_id) {
        throw new LeashError(
          "INVALID_ARGUMENT",
          `request ${named.request_id} of session ${sessionId} was superseded by request ${open?.request_id} (call ${open?.call_number})`,
        );
      }
      return named;
    }
    if (open !== undefined) return open;
    // The state names the last request a human answered until its answer is used (or reset).
    const lastId = boundRequestId(session.state);
    const last = lastId === null ? null : await tx.hitl.get(lastId);
    if (last !== null && last.session_id === sessionId) throw new LeashAlreadyDecided(last);
    throw new LeashError("NO_PENDING_REQUEST", `session ${sessionId} has no call awaiting a human`);
  }

  async function remainingOf(tx: SubstrateTx, session: SessionRecord): Promise<string | null> {
    if (!budgetEnabled(session.config)) return null;
    return (await available(tx, sessionAccountId(session.config, session))).toFixed();
  }

  async function view(tx: SubstrateTx, session: SessionRecord): Promise<SessionView> {
    return {
      session_id: session.session_id,
      agent_id: session.agent_id,
      organization_id: session.organization_id,
      status: session.status,
      config: session.config,
      state: session.state,
      call_count: session.call_count,
      budget_remaining_usd: await remainingOf(tx, session),
    };
  }

  /** The verdict and the entry that records it; the receipt is made from the entry after COMMIT. */
  async function evaluateIn(
    tx: SubstrateTx,
    request: EvaluateRequest,
  ): Promise<{ result: Omit<EvaluateResult, "receipt">; entry: ChainEntryRecord }> {
    checkSessionId(request.session_id); // before any statement names it
    const nonce = request.nonce;
    const hasNonce = nonce !== undefined && nonce !== null;
    // Independent reads are issued together (a pipelining substrate answers them in one round
    // trip). The nonce lookup needs no lock of its own: the session row's lock orders its calls.
    const [session, seen] = await Promise.all([
      loadSession(tx, request.session_id),
      hasNonce ? tx.nonces.has(request.session_id, nonce) : false,
    ]);
    const { config } = session;
    const nowNs = clock.nowNs();
    const call: Call = {
      tool_name: request.tool_name,
      params: request.params,
      nonce: request.nonce,
      estimated_cost_usd: request.estimated_cost_usd,
    };

    // The budget the decision sees is the chain's live remaining, read under the transaction's locks.
    const accountId = budgetEnabled(config) ? sessionAccountId(config, session) : null;
    const state: State = { ...session.state, seen_nonces: seen && hasNonce ? [nonce] : [] };
    let remainingBefore: Money | null = null;
    // Read (and on PostgreSQL locked) once: the same rows serve the decision and the hold below;
    // the chain head is read with them (after them, in lock order) for the entry this call writes.
    let accounts: BudgetAccount[] | undefined;
    let head: ChainHead | null;
    if (accountId === null) {
      head = await tx.chain.head();
    } else {
      [accounts, head] = await Promise.all([accountChain(tx, accountId), tx.chain.head()]);
      rememberAccounts(session.session_id, accounts);
      remainingBefore = chainAvailable(accounts);
      state.budget_initial_usd = config.budget_usd;
      state.budget_remaining_usd = remainingBefore.toNumber();
    }
    const rngValue =
      denyProbability(config as Record<string, unknown>, state as Record<string, unknown>) > 0 ? rng() : null;
    // An approval decide() releases must also be spent by the paused tool (hitl-binding.ts).
    let decision: EngineDecision = bindToPausedTool(
      decide(config, state, call, { nowNs, rng: rngValue ?? undefined }),
      state,
      call,
    );
    const paramsValue = call.params ?? {};
    const paramsHash = canonicalizationError(paramsValue) === null ? canonicalHash(paramsValue) : null;
    const expectedHash = request.expected_params_hash;
    if (expectedHash !== undefined && expectedHash !== null && expectedHash !== paramsHash) {
      decision = PARAMS_HASH_MISMATCH;
    }
    const callNumber = session.call_count + 1;

    let reservation_id: string | null = null;
    let remainingAfter = remainingBefore;
    // Recorded on ALLOW, its answer awaited only at the end (so it shares a round trip with the
    // writes below): under the session row's lock nobody else can have recorded it since `seen`.
    let nonceRecorded: Promise<boolean> | null = null;
    if (decision.verdict === "ALLOW") {
      if (hasNonce) {
        // unseen: `seen` was read under the session row's lock, which orders this session's calls.
        nonceRecorded = tx.nonces.add(session.session_id, nonce, nowNs, { unseen: true });
        nonceRecorded.catch(() => undefined); // awaited below; this only keeps an early failure handled
      }
      if (accountId !== null) {
        const held = await reserve(tx, {
          reservation_id: reservationId(session.session_id, callNumber),
          account_id: accountId,
          session_id: session.session_id,
          call_number: callNumber,
          amount_usd: Math.max(0, request.estimated_cost_usd ?? 0),
          nowNs,
          ttlNs,
          accounts,
          unusedId: true, // call numbers only grow, under the session row's lock
        });
        // decide() judged a float snapshot; the exact ledger has the last word (fail closed).
        if (held.ok) {
          reservation_id = held.reservation.reservation_id;
          remainingAfter = held.availableAfter;
        } else {
          decision = { verdict: "DENY", reason: held.code };
        }
      }
    }

    // With a ledger, the remaining budget written below is the ledger's, so feedback is not asked
    // for its own float estimate of it (exact decimal work whose result would be overwritten).
    // A tool mismatch changes nothing but the call count: the circuit stays closed and the approval
    // unspent, so the paused call itself can still use it.
    let next =
      decision === TOOL_MISMATCH || decision === PARAMS_HASH_MISMATCH
        ? state
        : feedback(config, accountId === null ? state : withoutRemaining(state), call, decision as Decision, {
            nowNs,
            paramsHash,
          });
    if (decision.verdict === "HITL") {
      const request: HitlRequest = {
        request_id: newId(),
        session_id: session.session_id,
        call_number: callNumber,
        tool_name: call.tool_name,
        nonce: hasNonce ? nonce : null,
        args_digest: paramsHash,
        reason: (decision as Decision).reason, // only decide() answers HITL
        status: "PENDING",
        decision: null,
        operator_id: null,
        successor_nonce: null,
        successor_args_digest: null,
        created_ns: nowNs,
        decided_ns: null,
      };
      await tx.hitl.insert(request);
      // The state names the request, so the human's answer and its use are tied to this one.
      next = { ...next, pending_request: boundRequest(request) };
    }
    if (releasesApproval(decision)) await consumeApproval(tx, session.session_id, state);

    const remaining = remainingAfter === null ? null : remainingAfter.toFixed();
    const updated = tx.sessions.update({
      ...session,
      status: next.status ?? session.status,
      state: storable({
        ...next,
        budget_remaining_usd: remaining === null ? next.budget_remaining_usd : Number(remaining),
      }),
      call_count: callNumber,
      updated_ns: nowNs,
    });
    // Issued together with the session update; a failure of either fails the whole transaction.
    const [, entry] = await Promise.all([
      updated,
      auditor.record(
        tx,
        "decision",
        {
          session_id: session.session_id,
          agent_id: session.agent_id,
          organization_id: session.organization_id,
          call_number: callNumber,
          tool_name: call.tool_name,
          params_hash: paramsHash,
          nonce: hasNonce ? nonce : null,
          estimated_cost_usd: request.estimated_cost_usd ?? null,
          verdict: decision.verdict,
          reason: decision.reason,
          budget_before_usd: remainingBefore === null ? null : remainingBefore.toFixed(),
          budget_after_usd: remaining,
          reservation_id,
          rng: rngValue,
          operator_id: null,
          // What decide() saw, so the verdict can be re-derived from the log alone (the session's
          // config never changes: it is in its session_registered entry).
          state,
          now_ns: nowNs,
        },
        nowNs,
        head,
      ),
    ]);
    if (nonceRecorded !== null && !(await nonceRecorded)) {
      // Fail closed: the whole transaction, verdict and entry included, rolls back.
      throw new SubstrateError(
        "conflict",
        `nonce ${JSON.stringify(nonce)} of session ${session.session_id} was recorded by another transaction despite the session's lock`,
      );
    }
    return {
      result: {
        session_id: session.session_id,
        call_number: callNumber,
        verdict: decision.verdict,
        reason: decision.reason,
        budget_remaining_usd: remaining,
        reservation_id,
        rng: rngValue,
        params_hash: paramsHash,
        entry_seq: entry.seq,
        entry_hash: entry.entry_hash,
      },
      entry,
    };
  }

  return {
    substrate,

    async register(request) {
      const config = validateConfig(request.config);
      if (!config.ok)
        throw new LeashError("CONFIG_INVALID", `invalid guard config: ${config.errors.join("; ")}`);
      if (typeof request.agent_id !== "string" || request.agent_id === "") {
        throw new LeashError("INVALID_ARGUMENT", "agent_id must be a non-empty string");
      }
      return transaction(async (tx) => {
        const nowNs = clock.nowNs();
        const ids = {
          session_id: request.session_id ?? newId(),
          agent_id: request.agent_id,
          organization_id: request.organization_id ?? "default",
        };
        const existing = await tx.sessions.get(ids.session_id);
        if (existing !== null) {
          if (existing.agent_id !== ids.agent_id) {
            throw new LeashError("SESSION_EXISTS", `session ${ids.session_id} belongs to another agent`);
          }
          return view(tx, existing); // resuming a session keeps its config and state
        }
        await ensureSessionAccount(tx, config.value, ids, nowNs);
        const record: SessionRecord = {
          ...ids,
          status: "ACTIVE",
          config: config.value,
          state: {
            circuit_tripped: false,
            total_calls: 0,
            session_started_ns: nowNs,
            ...(budgetEnabled(config.value) ? { budget_initial_usd: config.value.budget_usd } : {}),
          },
          call_count: 0,
          created_ns: nowNs,
          updated_ns: nowNs,
          last_heartbeat_ns: nowNs,
        };
        await tx.sessions.insert(record);
        await auditor.record(tx, "session_registered", { ...ids, config: config.value }, nowNs);
        return view(tx, record);
      });
    },

    evaluate(request) {
      // The receipt is built outside the transaction: on a shared store, not while holding its locks.
      return transaction((tx) => evaluateIn(tx, request), evaluateHints(request, accountsOf)).then(
        ({ result, entry }) => ({ ...result, receipt: compactJws(entry) }),
      );
    },

    postExec(request) {
      return transaction(async (tx) => {
        const session = await loadSession(tx, request.session_id);
        const nowNs = clock.nowNs();
        const actual = toMoney(request.actual_cost_usd);
        if (!budgetEnabled(session.config)) {
          return {
            session_id: session.session_id,
            call_number: request.call_number,
            actual_usd: actual.toFixed(),
            overrun_usd: "0",
            budget_remaining_usd: null,
            replayed: false,
          };
        }
        const id = reservationId(session.session_id, request.call_number);
        if ((await tx.budgets.getReservation(id)) === null) {
          throw new LeashError(
            "RESERVATION_NOT_FOUND",
            `no budget hold for call ${request.call_number} of session ${session.session_id}`,
          );
        }
        const settled = await settle(tx, id, {
          actual_usd: actual,
          nowNs,
          idempotency_key: request.idempotency_key ?? `postexec:${id}`,
        });
        const remaining = await remainingOf(tx, session);
        if (!settled.replayed) {
          await auditor.record(
            tx,
            "post_exec",
            {
              session_id: session.session_id,
              call_number: request.call_number,
              reservation_id: id,
              estimated_usd: settled.amount_usd.toFixed(),
              actual_usd: settled.actual_usd.toFixed(),
              overrun_usd: settled.overrun_usd.toFixed(),
              success: request.success ?? true,
              budget_after_usd: remaining,
            },
            nowNs,
          );
          const spent = toMoney(session.state.budget_spent_usd ?? 0).plus(actual);
          await tx.sessions.update({
            ...session,
            state: {
              ...session.state,
              budget_spent_usd: spent.toNumber(),
              budget_remaining_usd: Number(remaining),
            },
            updated_ns: nowNs,
          });
        }
        return {
          session_id: session.session_id,
          call_number: request.call_number,
          actual_usd: settled.actual_usd.toFixed(),
          overrun_usd: settled.overrun_usd.toFixed(),
          budget_remaining_usd: remaining,
          replayed: settled.replayed,
        };
      });
    },

    getSession(sessionId) {
      return transaction(async (tx) => view(tx, await loadSession(tx, sessionId)));
    },

    resume(input) {
      let request: ReturnType<typeof checkResumeRequest>;
      try {
        request = checkResumeRequest(input); // before the transaction: bad input records nothing
      } catch (error) {
        return Promise.reject(error);
      }
      return transaction(async (tx) => {
        const session = await loadSession(tx, request.session_id);
        const open = await answeredRequest(tx, session, request.request_id);
        const nowNs = clock.nowNs();
        const state = recordHumanDecision(
          { ...session.state, pending_request: boundRequest(open) },
          request.decision,
          request.successor && { nonce: request.successor.nonce, argsDigest: request.successor.args_digest },
        );
        // Every answer closes its request, defer and escalate too: the agent's next attempt then asks
        // again as a new request, so no request can take two answers.
        await tx.hitl.update({
          ...open,
          status: "DECIDED",
          decision: request.decision,
          operator_id: request.operator_id,
          successor_nonce: request.successor?.nonce ?? null,
          successor_args_digest: request.successor?.args_digest ?? null,
          decided_ns: nowNs,
        });
        const next: SessionRecord = {
          ...session,
          status: state.status ?? session.status,
          state: storable(state),
          updated_ns: nowNs,
        };
        await tx.sessions.update(next);
        await auditor.record(
          tx,
          "hitl_decision",
          {
            session_id: session.session_id,
            request_id: open.request_id,
            call_number: open.call_number,
            tool_name: open.tool_name,
            decision: request.decision,
            operator_id: request.operator_id,
            nonce: open.nonce,
            args_digest: open.args_digest,
            successor: request.successor ?? null,
          },
          nowNs,
        );
        return view(tx, next);
      });
    },

    reset(sessionId, operatorId) {
      if (typeof operatorId !== "string" || operatorId === "") {
        return Promise.reject(
          new LeashError("INVALID_ARGUMENT", "an operator id is required to reset a circuit"),
        );
      }
      return transaction(async (tx) => {
        const session = await loadSession(tx, sessionId);
        const state = resetCircuit(session.state);
        const nowNs = clock.nowNs();
        const next: SessionRecord = {
          ...session,
          status: state.status ?? "ACTIVE",
          state,
          updated_ns: nowNs,
        };
        await tx.sessions.update(next);
        await auditor.record(
          tx,
          "circuit_reset",
          {
            session_id: session.session_id,
            operator_id: operatorId,
            trip_reason: session.state.circuit_trip_reason ?? null,
          },
          nowNs,
        );
        return view(tx, next);
      });
    },

    heartbeat(sessionId) {
      return transaction(async (tx) => {
        const session = await loadSession(tx, sessionId);
        const nowNs = clock.nowNs();
        const revived = session.status === "STALE";
        await tx.sessions.update({
          ...session,
          status: revived ? (session.state.status === "PAUSED" ? "PAUSED" : "ACTIVE") : session.status,
          last_heartbeat_ns: nowNs,
        });
        // Coming back from STALE is a state change, so it is audited like going stale was.
        if (revived) await auditor.record(tx, "session_revived", { session_id: session.session_id }, nowNs);
      });
    },

    markStale(sessionId, options) {
      return transaction(async (tx) => {
        const session = await loadSession(tx, sessionId);
        if (session.status !== "ACTIVE" && session.status !== "PAUSED") return null;
        const nowNs = clock.nowNs();
        const lastSeen = session.last_heartbeat_ns ?? session.created_ns;
        if (nowNs - lastSeen <= options.staleAfterNs) return null; // a heartbeat landed meanwhile
        await tx.sessions.update({ ...session, status: "STALE", updated_ns: nowNs });
        const entry = await auditor.record(
          tx,
          "session_stale",
          {
            session_id: session.session_id,
            agent_id: session.agent_id,
            organization_id: session.organization_id,
            previous_status: session.status,
            last_heartbeat_ns: session.last_heartbeat_ns,
            last_seen_ns: lastSeen,
            heartbeat_interval_ms: options.heartbeatIntervalMs ?? null,
            missed_heartbeats: options.missedHeartbeats ?? null,
            now_ns: nowNs,
            reason: "heartbeat_timeout",
          },
          nowNs,
        );
        return { entry_seq: entry.seq, entry_hash: entry.entry_hash };
      });
    },

    createGuard(guard) {
      return transaction(async (tx) => {
        const nowNs = clock.nowNs();
        const account = await ensureAccount(tx, {
          account_id: guardAccountId(guard.guard_id),
          scope: "guard",
          parent_id: guard.parent_guard_id ? guardAccountId(guard.parent_guard_id) : null,
          limit_usd: guard.limit_usd,
          nowNs,
        });
        if (account.created_ns === nowNs) {
          await auditor.record(
            tx,
            "guard_created",
            {
              guard_id: guard.guard_id,
              parent_guard_id: guard.parent_guard_id ?? null,
              limit_usd: account.limit_usd,
            },
            nowNs,
          );
        }
      });
    },

    expireReservations(limit = 1000) {
      return transaction(async (tx) => {
        const nowNs = clock.nowNs();
        const expired = await expire(tx, nowNs, limit);
        for (const r of expired) {
          await auditor.record(
            tx,
            "reservation_expired",
            {
              session_id: r.session_id,
              call_number: r.call_number,
              reservation_id: r.reservation_id,
              released_usd: r.amount_usd,
            },
            nowNs,
          );
        }
        return expired.length;
      });
    },

    async rotateKey(next, operatorId) {
      if (typeof operatorId !== "string" || operatorId === "") {
        throw new LeashError("INVALID_ARGUMENT", "an operator id is required to rotate the signing key");
      }
      await transaction(async (tx) => {
        await auditor.record(
          tx,
          "key_rotation",
          { ...keyRotationData(next), operator_id: operatorId },
          clock.nowNs(),
        );
      });
      auditor.signer = next; // only once the rotation entry is committed
    },

    get publicKeyHex() {
      return auditor.signer.publicKeyHex;
    },
  };
}
