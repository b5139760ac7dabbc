// Runs the state machine (@leash/machine) in a write transaction: a synchronous view over the
// projection, fetching what decide reports missing and calling it again, then applying its events.
// It decides nothing itself: the transitions are the machine's; signing is the Auditor's.
import { accountChain, ensureAccount } from "@leash/budget-guard";
import type {
  BudgetAccount,
  ChainEntryRecord,
  HitlRequest,
  HitlRequestStatus,
  Nonce,
  SessionRecord,
  SubstrateTx,
} from "@leash/core";
import type { Command, Env, Key, MachineError, MachineEvent, Outcome, StateView } from "@leash/machine";
import { decide } from "@leash/machine";
import type { Auditor, ChainHead } from "../audit.js";
import { LeashAlreadyDecided, LeashError, LeashHitlExpired } from "../errors.js";
import type { ProjectionTx } from "../projection.js";
import { runSteps, type Steps } from "../steps.js";

/** An Env for one command: the clock read once, the rng drawn and the id named at most once. */
export function envOf(nowNs: number, rng: () => number, newId: () => string, holdTtlNs: number): Env {
  let drawn: number | undefined;
  let named: string | undefined;
  return {
    nowNs,
    holdTtlNs,
    rng: () => (drawn ??= rng()),
    newId: () => (named ??= newId()),
  };
}

const nonceKeyOf = (sessionId: string, nonce: Nonce) =>
  `${sessionId}\u0000${typeof nonce === "number" ? `n:${nonce}` : `s:${nonce}`}`;

/**
 * The machine's view of one transaction: the projection's rows in memory (when `tx` is the projection),
 * then what this command fetched. Fetched rows are the transaction's: they serve this command only.
 */
export class TxView implements StateView {
  // What this command fetched, by key (only a cold path fetches: created on the first fetch).
  #fetched: Map<string, unknown> | null = null;
  readonly #ptx: ProjectionTx | null;

  constructor(readonly tx: SubstrateTx) {
    this.#ptx = "sessionRows" in tx ? (tx as ProjectionTx) : null;
  }

  session(sessionId: string): SessionRecord | null | undefined {
    return this.#ptx?.sessionRows.peek(sessionId) ?? this.#get(`s\u0000${sessionId}`);
  }
  nonceSeen(sessionId: string, nonce: Nonce): boolean | undefined {
    return this.#ptx?.spentNow(sessionId, nonce) ?? this.#get(`n\u0000${nonceKeyOf(sessionId, nonce)}`);
  }
  accounts(accountId: string): readonly BudgetAccount[] | undefined {
    return (
      (this.#ptx === null ? undefined : accountsInMemory(this.#ptx, accountId)) ??
      this.#get(`a\u0000${accountId}`)
    );
  }
  hitl(requestId: string): HitlRequest | null | undefined {
    return this.#get(`h\u0000${requestId}`);
  }
  hitlOf(sessionId: string, status: HitlRequestStatus): readonly HitlRequest[] | undefined {
    return this.#get(`l\u0000${sessionId}\u0000${status}`);
  }

  #get<T>(key: string): T | undefined {
    return this.#fetched?.get(key) as T | undefined;
  }

  #set(key: string, value: unknown): void {
    this.#fetched ??= new Map();
    this.#fetched.set(key, value);
  }

  /** Reads the keys decide reported missing (together: a pipelining store sends them at once). */
  async fetch(keys: readonly Key[]): Promise<void> {
    const tx = this.tx;
    await Promise.all(
      keys.map(async (key) => {
        switch (key.kind) {
          case "session":
            this.#set(`s\u0000${key.sessionId}`, await tx.sessions.get(key.sessionId));
            return;
          case "nonce":
            this.#set(
              `n\u0000${nonceKeyOf(key.sessionId, key.nonce)}`,
              await tx.nonces.has(key.sessionId, key.nonce),
            );
            return;
          case "accounts":
            this.#set(`a\u0000${key.accountId}`, await accountChain(tx, key.accountId));
            return;
          case "hitl":
            this.#set(`h\u0000${key.requestId}`, await tx.hitl.get(key.requestId));
            return;
          case "hitl_of":
            this.#set(
              `l\u0000${key.sessionId}\u0000${key.status}`,
              await tx.hitl.list({ sessionId: key.sessionId, status: key.status }),
            );
            return;
        }
      }),
    );
  }
}

/** The account chain (the account, then its ancestors) when the projection holds all of it; else undefined. */
function accountsInMemory(tx: ProjectionTx, accountId: string): BudgetAccount[] | undefined {
  const chain: BudgetAccount[] = [];
  for (let id: string | null = accountId; id !== null; ) {
    const at = id;
    // A cycle is accountChain's to report.
    if (chain.some((account) => account.account_id === at)) return undefined;
    const account = tx.accountRows.peek(at);
    if (account === undefined) return undefined;
    chain.push(account);
    id = account.parent_id;
  }
  return chain;
}

/** The engine's error for a machine's refusal. */
export function refused(error: MachineError): Error {
  switch (error.code) {
    case "already_decided":
      return new LeashAlreadyDecided(error.request!);
    case "hitl_expired":
      return new LeashHitlExpired(error.request!);
    case "superseded":
      return new LeashError("invalid_argument", error.message);
    default:
      return new LeashError(error.code, error.message);
  }
}

/** decide until nothing is missing: a step function, synchronous while the view holds every row. */
export function* decided<R>(
  view: TxView,
  command: Command,
  env: Env,
): Steps<{ events: readonly MachineEvent[]; reply: R }> {
  for (;;) {
    const outcome = decide(view, command, env) as Outcome<R>;
    if ("events" in outcome) return outcome;
    if ("error" in outcome) throw refused(outcome.error);
    yield view.fetch(outcome.missing);
  }
}

/**
 * Applies the events in order: rows to the projection's held rows (`held`: evaluate's batch writes
 * them once) or through the store's API, entries signed after the head. Returns the entries appended.
 */
export function* applied(
  tx: SubstrateTx,
  auditor: Auditor,
  events: readonly MachineEvent[],
  nowNs: number,
  held: ProjectionTx | null = null,
): Steps<ChainEntryRecord[]> {
  const ptx = held;
  const entries: ChainEntryRecord[] = [];
  for (const event of events) {
    switch (event.type) {
      case "session":
        if (event.insert) yield tx.sessions.insert(event.row);
        else if (ptx !== null) ptx.sessionRows.update(event.row.session_id, event.row);
        else yield tx.sessions.update(event.row);
        break;
      case "touch":
        yield tx.sessions.touch(event.sessionId, event.nowNs);
        break;
      case "account":
        if (ptx !== null) ptx.accountRows.update(event.row.account_id, event.row);
        else yield tx.budgets.updateAccount(event.row);
        break;
      case "ensure_account":
        yield ensureAccount(tx, event.input);
        break;
      case "hold":
        if (ptx !== null) ptx.holdNow(event.row);
        else yield tx.budgets.insertReservation(event.row);
        break;
      case "hitl":
        yield event.insert ? tx.hitl.insert(event.row) : tx.hitl.update(event.row);
        break;
      case "entry": {
        const options = event.blob === undefined ? event.spends : { ...event.spends, params: event.blob };
        if (ptx === null) {
          entries.push(yield auditor.record(tx, event.kind, event.data, nowNs, undefined, options));
          break;
        }
        const last = entries.at(-1);
        const known = last !== undefined ? { seq: last.seq, entry_hash: last.entry_hash } : ptx.headNow();
        const head: ChainHead | null = known !== undefined ? known : yield tx.chain.head();
        entries.push(yield auditor.recordNow(ptx, event.kind, event.data, nowNs, head, options));
        break;
      }
    }
  }
  return entries;
}

/** One command in a write transaction other than evaluate's: decide, then its events through the store. */
export async function runCommand<R>(
  tx: SubstrateTx,
  auditor: Auditor,
  command: Command,
  env: Env,
): Promise<{ reply: R; entries: ChainEntryRecord[] }> {
  const { events, reply } = await runSteps(decided<R>(new TxView(tx), command, env));
  const entries = await runSteps(applied(tx, auditor, events, env.nowNs));
  return { reply, entries };
}
