// The snapshot check: the store's state tables (sessions, budget accounts, holds) and the chain's nonce
// column against the projection a replay gives, and the repair that rewrites tables from it. Of the chain
// it reads the head (stamps must not be beyond it) and the nonce column; it replays nothing.

import { Money } from "@leash/budget-guard";
import { appendEntry, ROW_DIGESTS_FIELD, type Signer } from "@leash/chain";
import {
  type HitlRequest,
  type Nonce,
  type Reservation,
  type SessionRecord,
  type Substrate,
  SubstrateError,
  type SubstrateTx,
} from "@leash/core";
import { enqueueEntry } from "@leash/outbox";
import { withAllotments } from "./escrow-check.js";
import { type Projection, type ReplayResult, recordedForm } from "./replay/replay.js";
import { digestMismatches, repairDigests, type StampedRow } from "./row-digests.js";

/** "chain": an entry's indexed nonce column (id: its seq); "nonces": what NonceStore answers. */
export type SnapshotTable =
  | "sessions"
  | "nonces"
  | "chain"
  | "budget_accounts"
  | "reservations"
  | "hitl_requests";

/** One snapshot value that is not what the chain gives. */
export interface SnapshotDifference {
  table: SnapshotTable;
  /** The row: session id, account id, reservation id, entry seq, or for a missing nonce `["<session>", <nonce>]`. */
  id: string;
  field: string;
  /** As stored (null: the row is missing). */
  snapshot: unknown;
  /** As the replayed chain gives it (null: the chain has no such row; for `at_seq`, the chain's head seq). */
  replayed: unknown;
  /** False when the port cannot undo it (a row the chain never wrote cannot be deleted through it). */
  repairable: boolean;
}

const same = (a: unknown, b: unknown): boolean =>
  JSON.stringify(sorted(recordedForm(a))) === JSON.stringify(sorted(recordedForm(b)));

/** Keys in one order, so two states compare by content. */
function sorted(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sorted);
  if (value === null || typeof value !== "object") return value;
  const out: Record<string, unknown> = {};
  for (const k of Object.keys(value).sort()) out[k] = sorted((value as Record<string, unknown>)[k]);
  return out;
}

/** 7 and "7" are different nonces. */
const sameNonce = (a: Nonce, b: Nonce): boolean => typeof a === typeof b && a === b;

const sameMoney = (a: string | null, b: string | null): boolean =>
  a === null || b === null ? a === b : a === b || sameAmount(a, b);

/** Equal as amounts ("1.0" is "1"); text that is no amount (a tampered row) equals nothing. */
function sameAmount(a: string, b: string): boolean {
  try {
    return new Money(a).eq(b);
  } catch {
    return false;
  }
}

const SESSION_FIELDS = ["agent_id", "organization_id", "status", "call_count", "config", "state"] as const;
const RESERVATION_FIELDS = [
  "session_id",
  "call_number",
  "account_ids",
  "status",
  "expires_ns",
  "resolved_ns",
  "created_ns",
] as const;

/** Entries read per range() call while the nonce column is compared. */
const CHAIN_PAGE = 1_000;

/**
 * Compares every snapshot row the projection names (and every session and hold the store lists), and
 * the nonce column of every entry the projection folded with the nonce its decision spent.
 * A session or account stamped with a chain position beyond the chain's head (`at_seq`, read in the
 * same transaction) reflects entries the chain no longer has (restored from an older backup, entries
 * lost): a difference, whatever its other fields say. Every stamped row (HITL requests too) is
 * compared with the digest its stamping entry signed (`row_digests`): field `row_digest`, which
 * also catches an edit of a field the replay does not derive.
 */
export async function compareSnapshots(
  substrate: Substrate,
  projection: Projection,
): Promise<SnapshotDifference[]> {
  const out: SnapshotDifference[] = [];
  const diff: Diff = (table, id, field, snapshot, replayed, repairable = true) =>
    out.push({
      table,
      id,
      field,
      snapshot: recordedForm(snapshot),
      replayed: recordedForm(replayed),
      repairable,
    });
  await substrate.transaction(async (tx) => {
    // Rows the replay can rebuild, checked against their digests last.
    const stamped: StampedRow[] = [];
    const headSeq = (await tx.chain.head())?.seq ?? null;
    const beyondHead = (atSeq: number | null | undefined): boolean =>
      atSeq !== null && atSeq !== undefined && (headSeq === null || atSeq > headSeq);
    const step: CompareStep = { tx, projection, diff, stamped, headSeq, beyondHead };
    await compareSessions(step);
    await compareNonceColumn(step);
    await compareNonceStore(step);
    await compareAccounts(step);
    await compareReservations(step);
    for (const row of await tx.hitl.list({})) {
      const replayed = projection.hitl.has(row.request_id);
      if (replayed) stamped.push({ table: "hitl_requests", id: row.request_id, row });
    }
    for (const m of await digestMismatches(tx, stamped)) {
      diff(m.table, m.id, "row_digest", m.stored, m.signed);
    }
  });
  return out;
}

/** Records one difference (repairable unless told). */
type Diff = (
  table: SnapshotTable,
  id: string,
  field: string,
  snapshot: unknown,
  replayed: unknown,
  repairable?: boolean,
) => void;

/** What each step of the comparison reads and adds to, inside the one transaction. */
interface CompareStep {
  tx: SubstrateTx;
  projection: Projection;
  diff: Diff;
  /** Rows the replay can rebuild; each step adds the ones it compared. */
  stamped: StampedRow[];
  headSeq: number | null;
  /** A stamp beyond the chain's head (entries the chain no longer has). */
  beyondHead: (atSeq: number | null | undefined) => boolean;
}

async function compareSessions({ tx, projection, diff, stamped, headSeq, beyondHead }: CompareStep) {
  const stored = new Map((await tx.sessions.list()).map((s) => [s.session_id, s]));
  for (const [id, row] of stored) {
    if (beyondHead(row.at_seq)) {
      diff("sessions", id, "at_seq", row.at_seq, headSeq, projection.sessions.has(id));
    }
  }
  for (const [id, replayed] of projection.sessions) {
    const row = stored.get(id);
    if (row === undefined) {
      diff("sessions", id, "row", null, "present");
      continue;
    }
    stamped.push({ table: "sessions", id, row });
    for (const field of SESSION_FIELDS) {
      if (field === "state") {
        // Field by field, so the report names the edited one (circuit_tripped, total_calls, …).
        const keys = new Set([...Object.keys(row.state), ...Object.keys(replayed.state)]);
        for (const key of keys) {
          const a = (row.state as Record<string, unknown>)[key];
          const b = (replayed.state as Record<string, unknown>)[key];
          if (!same(a ?? null, b ?? null)) diff("sessions", id, `state.${key}`, a ?? null, b ?? null);
        }
      } else if (!same(row[field], replayed[field])) {
        diff("sessions", id, field, row[field], replayed[field]);
      }
    }
  }
  for (const id of stored.keys()) {
    if (!projection.sessions.has(id)) diff("sessions", id, "row", "present", null, false);
  }
}

/**
 * The nonce column is the entries' own: the port cannot rewrite it, so a difference there (an
 * edited or cleared column) is reported and left to the operator, never repaired.
 */
async function compareNonceColumn({ tx, projection, diff }: CompareStep) {
  for (let from = 0; from < projection.folded; ) {
    const page = await tx.chain.range(from, Math.min(CHAIN_PAGE, projection.folded - from));
    for (const entry of page) {
      const stored = entry.nonce ?? null;
      const replayed = projection.spent.get(entry.seq) ?? null;
      if (stored === null ? replayed !== null : replayed === null || !sameNonce(stored, replayed)) {
        diff("chain", String(entry.seq), "nonce", stored, replayed, false);
      }
    }
    if (page.length === 0) break;
    from = page[page.length - 1]!.seq + 1;
  }
}

/** What NonceStore answers against the nonces the replay spent: reported, never repaired. */
async function compareNonceStore({ tx, projection, diff }: CompareStep) {
  for (const [sessionId, nonces] of projection.nonces) {
    for (const nonce of nonces.values()) {
      if (!(await tx.nonces.has(sessionId, nonce))) {
        diff("nonces", JSON.stringify([sessionId, nonce]), "row", null, "present", false);
      }
    }
    const count = await tx.nonces.count(sessionId);
    if (count > nonces.size) diff("nonces", sessionId, "count", count, nonces.size, false);
  }
  for (const id of projection.sessions.keys()) {
    if (!projection.nonces.has(id)) {
      const count = await tx.nonces.count(id);
      if (count > 0) diff("nonces", id, "count", count, 0, false);
    }
  }
}

async function compareAccounts({ tx, projection, diff, stamped, headSeq, beyondHead }: CompareStep) {
  for (const [id, replayed] of projection.ledger.accounts) {
    const accountRow = await tx.budgets.getAccount(id);
    if (accountRow === null) {
      diff("budget_accounts", id, "row", null, "present");
      continue;
    }
    // A shared account in escrow: its spending is split between its row and its shards' allotments.
    const shares = (await tx.allotments?.list(id)) ?? [];
    const row = withAllotments(accountRow, shares);
    // Not repaired in place: the row holds only part of the spending (report it, fail closed).
    const repairable = shares.length === 0;
    if (repairable) stamped.push({ table: "budget_accounts", id, row: accountRow });
    if (beyondHead(row.at_seq)) diff("budget_accounts", id, "at_seq", row.at_seq, headSeq);
    for (const field of ["spent_usd", "reserved_usd", "limit_usd"] as const) {
      if (!sameMoney(row[field], replayed[field]))
        diff("budget_accounts", id, field, row[field], replayed[field], repairable);
    }
    if (row.parent_id !== replayed.parent_id)
      diff("budget_accounts", id, "parent_id", row.parent_id, replayed.parent_id);
    if (row.scope !== replayed.scope) diff("budget_accounts", id, "scope", row.scope, replayed.scope);
  }
}

async function compareReservations({ tx, projection, diff, stamped }: CompareStep) {
  const holds = new Map((await tx.budgets.listReservations({})).map((r) => [r.reservation_id, r]));
  for (const [id, replayed] of projection.ledger.reservations) {
    const row = holds.get(id);
    if (row === undefined) {
      diff("reservations", id, "row", null, "present");
      continue;
    }
    stamped.push({ table: "reservations", id, row });
    for (const field of RESERVATION_FIELDS) {
      if (!same(row[field], replayed[field])) diff("reservations", id, field, row[field], replayed[field]);
    }
    for (const field of ["amount_usd", "actual_usd"] as const) {
      if (!sameMoney(row[field], replayed[field]))
        diff("reservations", id, field, row[field], replayed[field]);
    }
  }
  for (const id of holds.keys()) {
    if (!projection.ledger.reservations.has(id)) diff("reservations", id, "row", "present", null, false);
  }
}

/** One line for a report: the first difference, and how many more. */
export function describeDifferences(differences: readonly SnapshotDifference[]): string {
  const first = differences[0];
  if (first === undefined) return "the snapshot tables agree with the replayed chain";
  const more = differences.length > 1 ? ` (and ${differences.length - 1} more)` : "";
  return `${first.table} ${first.id} ${first.field} is ${JSON.stringify(first.snapshot)} in the store, but the chain gives ${JSON.stringify(first.replayed)}${more}`;
}

/**
 * Rewrites the differing snapshot rows from the projection and appends a signed "snapshot_repaired"
 * entry naming them, in one transaction (the outbox item with it). Rows the port cannot delete stay,
 * and are left in the returned list. The caller has checked that `signer` is the key in force.
 * Every row rewritten is stamped with that entry (`at_seq`), which names its digest (`row_digests`):
 * what the engine then checks it against.
 */
export async function repairSnapshots(
  substrate: Substrate,
  replay: ReplayResult,
  differences: readonly SnapshotDifference[],
  signer: Signer,
  nowNs: number,
): Promise<{ repaired: SnapshotDifference[]; left: SnapshotDifference[]; entry_seq: number }> {
  const { projection } = replay;
  const repaired = differences.filter((d) => d.repairable);
  const left = differences.filter((d) => !d.repairable);
  const seq = await substrate.transaction(async (tx) => {
    const head = await tx.chain.head();
    if (head?.entry_hash !== replay.head?.entry_hash) {
      // Another writer appended since the replay: the projection is no longer the chain's.
      throw new SubstrateError(
        "conflict",
        "the chain moved while its snapshots were being checked; run recovery again",
      );
    }
    // The seq the repair entry takes: every rewritten row names it, and it names their digests.
    const atSeq = replay.head === null ? 0 : replay.head.seq + 1;
    const ids = (table: SnapshotTable) => new Set(repaired.filter((d) => d.table === table).map((d) => d.id));
    const rewritten: StampedRow[] = [
      ...(await rewriteSessions(tx, projection, ids("sessions"), atSeq)),
      ...(await rewriteAccounts(tx, projection, ids("budget_accounts"), atSeq, nowNs)),
      ...(await rewriteReservations(tx, projection, ids("reservations"), atSeq)),
      ...(await rewriteHitl(tx, projection, ids("hitl_requests"), atSeq)),
    ];
    const entry = await appendEntry(tx, {
      kind: "snapshot_repaired",
      data: {
        chain_count: replay.count,
        chain_head_hash: replay.head?.entry_hash ?? null,
        repaired: repaired.map((d) => `${d.table} ${d.id} ${d.field}`),
        left: left.map((d) => `${d.table} ${d.id} ${d.field}`),
        [ROW_DIGESTS_FIELD]: repairDigests(rewritten),
      },
      signer,
      nowNs,
    });
    await enqueueEntry(tx, entry);
    return entry.seq;
  });
  return { repaired, left, entry_seq: seq };
}

async function rewriteSessions(
  tx: SubstrateTx,
  projection: Projection,
  ids: ReadonlySet<string>,
  atSeq: number,
): Promise<StampedRow[]> {
  const rewritten: StampedRow[] = [];
  for (const id of ids) {
    const replayed = projection.sessions.get(id)!;
    const row = await tx.sessions.get(id);
    const next: SessionRecord =
      row === null
        ? { ...replayed, at_seq: atSeq }
        : {
            ...row,
            status: replayed.status,
            config: replayed.config,
            state: replayed.state,
            call_count: replayed.call_count,
            at_seq: atSeq,
          };
    if (row === null) await tx.sessions.insert(next);
    else await tx.sessions.update(next);
    rewritten.push({ table: "sessions", id, row: next });
  }
  return rewritten;
}

async function rewriteAccounts(
  tx: SubstrateTx,
  projection: Projection,
  ids: ReadonlySet<string>,
  atSeq: number,
  nowNs: number,
): Promise<StampedRow[]> {
  const rewritten: StampedRow[] = [];
  for (const id of ids) {
    const replayed = projection.ledger.accounts.get(id)!;
    const row = await tx.budgets.getAccount(id);
    const { limit_usd, spent_usd, reserved_usd, parent_id, scope } = replayed;
    const next =
      row === null
        ? { ...replayed, at_seq: atSeq }
        : {
            ...row,
            limit_usd,
            spent_usd,
            reserved_usd,
            parent_id,
            scope,
            updated_ns: Math.max(row.updated_ns, nowNs),
            at_seq: atSeq,
          };
    if (row === null) await tx.budgets.insertAccount(next);
    else await tx.budgets.updateAccount(next);
    rewritten.push({ table: "budget_accounts", id, row: next });
  }
  return rewritten;
}

async function rewriteReservations(
  tx: SubstrateTx,
  projection: Projection,
  ids: ReadonlySet<string>,
  atSeq: number,
): Promise<StampedRow[]> {
  const rewritten: StampedRow[] = [];
  for (const id of ids) {
    const replayed: Reservation = { ...projection.ledger.reservations.get(id)!, at_seq: atSeq };
    const row = await tx.budgets.getReservation(id);
    if (row === null) await tx.budgets.insertReservation(replayed);
    else await tx.budgets.updateReservation(replayed);
    rewritten.push({ table: "reservations", id, row: replayed });
  }
  return rewritten;
}

/** A request the store no longer has is not recreated (the operator's view is not chain state). */
async function rewriteHitl(
  tx: SubstrateTx,
  projection: Projection,
  ids: ReadonlySet<string>,
  atSeq: number,
): Promise<StampedRow[]> {
  const rewritten: StampedRow[] = [];
  for (const id of ids) {
    const row = await tx.hitl.get(id);
    if (row === null) continue;
    const next = { ...row, ...hitlAnswer(projection.hitl.get(id)!), at_seq: atSeq };
    await tx.hitl.update(next);
    rewritten.push({ table: "hitl_requests", id, row: next });
  }
  return rewritten;
}

/**
 * What the replay derives of a HITL request (its call and its answer); the operator's view (params,
 * budget, policy, comment) is not chain state and stays as stored.
 */
function hitlAnswer(replayed: HitlRequest): Partial<HitlRequest> {
  const { session_id, call_number, tool_name, nonce, args_digest, status, decision, operator_id } = replayed;
  const { successor_nonce, successor_args_digest } = replayed;
  return {
    session_id,
    call_number,
    tool_name,
    nonce,
    args_digest,
    status,
    decision,
    operator_id,
    successor_nonce,
    successor_args_digest,
  };
}
