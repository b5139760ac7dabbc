// The replay's state as the state machine reads it (a synchronous StateView over the fold) and the
// events of each entry applied to it. It decides nothing: the transitions are @leash/machine's.
import { ensureAccount } from "@leash/budget-guard";
import type { BudgetAccount, HitlRequest, HitlRequestStatus, Nonce, SessionRecord } from "@leash/core";
import type { MachineEvent, StateView } from "@leash/machine";
import type { ReplayLedger } from "./budget-ledger.js";
import { Mismatch, nonceKey } from "./diff.js";

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

/** The machine's view of the fold: every row is at hand, so nothing is ever reported missing. */
export class FoldView implements StateView {
  constructor(readonly projection: Projection) {}

  session(sessionId: string): SessionRecord | null {
    return this.projection.sessions.get(sessionId) ?? null;
  }
  nonceSeen(sessionId: string, nonce: Nonce): boolean {
    return this.projection.nonces.get(sessionId)?.has(nonceKey(nonce)) === true;
  }
  accounts(accountId: string): readonly BudgetAccount[] {
    const chain: BudgetAccount[] = [];
    const accounts = this.projection.ledger.accounts;
    for (let id: string | null = accountId; id !== null; ) {
      const account = accounts.get(id);
      if (account === undefined || chain.includes(account)) {
        throw new Mismatch("account_id", "a created account", id, `budget account ${id} was never created`);
      }
      chain.push(account);
      id = account.parent_id;
    }
    return chain;
  }
  hitl(requestId: string): HitlRequest | null {
    return this.projection.hitl.get(requestId) ?? null;
  }
  hitlOf(sessionId: string, status: HitlRequestStatus): HitlRequest[] {
    return [...this.projection.hitl.values()].filter(
      (r) => r.session_id === sessionId && r.status === status,
    );
  }

  /** The session's seen nonces, created on first use. */
  seen(sessionId: string): Map<string, Nonce> {
    let seen = this.projection.nonces.get(sessionId);
    if (seen === undefined) {
      seen = new Map();
      this.projection.nonces.set(sessionId, seen);
    }
    return seen;
  }

  /** Applies one entry's events (at stream position `index`) to the fold. */
  async apply(index: number, events: readonly MachineEvent[]): Promise<void> {
    const { projection } = this;
    for (const event of events) {
      switch (event.type) {
        case "session":
          projection.sessions.set(event.row.session_id, event.row);
          break;
        case "account":
          projection.ledger.accounts.set(event.row.account_id, event.row);
          break;
        case "ensure_account":
          await ensureAccount(projection.ledger, event.input);
          break;
        case "hold":
          projection.ledger.reservations.set(event.row.reservation_id, event.row);
          break;
        case "hitl":
          projection.hitl.set(event.row.request_id, event.row);
          break;
        case "entry":
          if (event.spends !== undefined) {
            const sessionId = event.data.session_id as string;
            this.seen(sessionId).set(nonceKey(event.spends.nonce), event.spends.nonce);
            projection.spent.set(index, event.spends.nonce);
          }
          break;
        case "touch":
          break; // liveness is not in the chain
      }
    }
  }
}
