// Escrow against the store: escrow.ts's pure plans run on a shared account's row and its allotment rows,
// inside the caller's transaction (one short one per grant, return or reclaim). Opens no transactions.
//
// Locks, always in this order: the shard's allotment row, then the account row (BudgetStore.getAccount,
// FOR UPDATE on PostgreSQL). A charge, on a decision's path, takes the allotment row alone; a decision
// that tops up inline already holds it. With the shared account always locked last, no two of these
// wait on each other in a cycle. Granted amounts only change under the account row's lock, so the
// unlocked list of the other allotments that a grant sums is exact.
import type { AllotmentStore, BudgetAccount, BudgetAllotment, SubstrateTx } from "@leash/core";
import { BudgetGuardError } from "./errors.js";
import {
  type EscrowAccount,
  type EscrowAllotment,
  type EscrowRefusal,
  type GrantPolicy,
  planCharge,
  planGrant,
  planReclaim,
  planRelease,
  planReturn,
} from "./escrow.js";
import { Money, moneyString, readStoredMoney, toMoney } from "./money.js";
import { requireId, requireTimestamp } from "./validate.js";

/** The shard as the shards' lease table names it: fencing is by `epoch`. */
export interface ShardLease {
  readonly shard: string;
  readonly holder: string;
  readonly epoch: number;
}

export type AllotmentResult =
  | { ok: true; allotment: BudgetAllotment | null; amount: Money }
  | { ok: false; refusal: EscrowRefusal };

function allotmentsOf(tx: SubstrateTx): AllotmentStore {
  if (tx.allotments === undefined) {
    throw new BudgetGuardError("invalid_argument", "this store has no budget allotments (schema version 12)");
  }
  return tx.allotments;
}

const units = (text: string, what: string) => readStoredMoney(text, what).units;

function toEscrow(row: BudgetAllotment): EscrowAllotment {
  const what = `allotment ${row.account_id}/${row.shard}`;
  return {
    shard: row.shard,
    holder: row.holder,
    epoch: row.epoch,
    granted: units(row.granted_usd, `${what} granted_usd`),
    spent: units(row.spent_usd, `${what} spent_usd`),
    reserved: units(row.reserved_usd, `${what} reserved_usd`),
    leaseExpiresNs: row.lease_expires_ns,
  };
}

function accountOf(account: BudgetAccount, rows: readonly BudgetAllotment[]): EscrowAccount {
  const what = `account ${JSON.stringify(account.account_id)}`;
  return {
    limit: units(account.limit_usd, `${what} limit_usd`),
    spent: units(account.spent_usd, `${what} spent_usd`),
    reserved: units(account.reserved_usd, `${what} reserved_usd`),
    allotments: rows.map(toEscrow),
  };
}

const text = (u: bigint) => moneyString(Money.fromUnits(u));

/** The shard's allotment row, then the account, both locked, with every other allotment. */
async function load(tx: SubstrateTx, accountId: string, shard: string) {
  requireId(accountId, "account_id");
  requireId(shard, "shard");
  const store = allotmentsOf(tx);
  let own = await store.get(accountId, shard);
  const account = await tx.budgets.getAccount(accountId);
  if (account === null) {
    throw new BudgetGuardError(
      "account_not_found",
      `budget account ${JSON.stringify(accountId)} does not exist`,
    );
  }
  // No row, no lock: a first grant that committed while this one waited for the account is read now.
  if (own === null) own = await store.get(accountId, shard);
  const others = (await store.list(accountId)).filter((row) => row.shard !== shard);
  const rows = own === null ? others : [...others, own];
  return { account, own, store, escrow: accountOf(account, rows) };
}

/** Writes the shard's allotment as the plan left it (or deletes it), and the account when it moved. */
async function write(
  tx: SubstrateTx,
  loaded: Awaited<ReturnType<typeof load>>,
  next: EscrowAccount,
  shard: string,
  nowNs: number,
): Promise<BudgetAllotment | null> {
  const planned = next.allotments.find((a) => a.shard === shard);
  let row: BudgetAllotment | null = null;
  if (planned === undefined) {
    await loaded.store.delete(loaded.account.account_id, shard);
  } else {
    row = {
      account_id: loaded.account.account_id,
      shard,
      holder: planned.holder,
      epoch: planned.epoch,
      granted_usd: text(planned.granted),
      spent_usd: text(planned.spent),
      reserved_usd: text(planned.reserved),
      lease_expires_ns: planned.leaseExpiresNs,
      created_ns: loaded.own?.created_ns ?? nowNs,
      updated_ns: nowNs,
      at_seq: loaded.own?.at_seq ?? null,
    };
    await loaded.store.put(row);
  }
  if (next.spent !== loaded.escrow.spent) {
    await tx.budgets.updateAccount({ ...loaded.account, spent_usd: text(next.spent), updated_ns: nowNs });
  }
  return row;
}

export interface GrantInput extends ShardLease {
  readonly account_id: string;
  /** The headroom the shard would like to have. */
  readonly request_usd: number | string | Money;
  /** The least of any use (a call's estimate beyond the headroom); absent: any amount. */
  readonly need_usd?: number | string | Money;
  readonly active_shards: number;
  readonly lease_expires_ns: number;
  readonly nowNs: number;
  readonly policy: GrantPolicy;
}

/** Grants or tops up the shard's allotment (escrow.ts planGrant) in the caller's transaction. */
export async function grantAllotment(tx: SubstrateTx, input: GrantInput): Promise<AllotmentResult> {
  requireTimestamp(input.nowNs, "nowNs");
  const loaded = await load(tx, input.account_id, input.shard);
  const planned = planGrant(
    loaded.escrow,
    {
      shard: input.shard,
      holder: input.holder,
      epoch: input.epoch,
      request: toMoney(input.request_usd).units,
      ...(input.need_usd === undefined ? {} : { need: toMoney(input.need_usd).units }),
      activeShards: input.active_shards,
      leaseExpiresNs: input.lease_expires_ns,
    },
    input.policy,
  );
  if (!planned.ok) return planned;
  const allotment = await write(tx, loaded, planned.account, input.shard, input.nowNs);
  return { ok: true, allotment, amount: Money.fromUnits(planned.amount) };
}

/** Gives back the unused part of the shard's allotment beyond `keep_usd` (escrow.ts planReturn). */
export async function returnAllotment(
  tx: SubstrateTx,
  input: ShardLease & { account_id: string; keep_usd?: number | string | Money; nowNs: number },
): Promise<AllotmentResult> {
  const loaded = await load(tx, input.account_id, input.shard);
  const keep = input.keep_usd === undefined ? 0n : toMoney(input.keep_usd).units;
  const planned = planReturn(loaded.escrow, input.shard, input.epoch, keep);
  if (!planned.ok) return planned;
  const allotment = await write(tx, loaded, planned.account, input.shard, input.nowNs);
  return { ok: true, allotment, amount: Money.fromUnits(planned.amount) };
}

/** Ends the shard's allotment at a clean shutdown: its spending and holds are charged to the account. */
export async function releaseAllotment(
  tx: SubstrateTx,
  input: ShardLease & { account_id: string; nowNs: number },
): Promise<AllotmentResult> {
  const loaded = await load(tx, input.account_id, input.shard);
  const planned = planRelease(loaded.escrow, input.shard, input.epoch);
  if (!planned.ok) return planned;
  await write(tx, loaded, planned.account, input.shard, input.nowNs);
  return { ok: true, allotment: null, amount: Money.fromUnits(planned.amount) };
}

/**
 * A dead shard's allotment returns after its lease (or at once to the shard's next epoch), charged
 * with everything its chain recorded: `chain_recorded_usd` is spent plus open holds at their estimate.
 */
export async function reclaimAllotment(
  tx: SubstrateTx,
  input: {
    account_id: string;
    shard: string;
    chain_recorded_usd: number | string | Money;
    nowNs: number;
    by_epoch?: number;
  },
): Promise<AllotmentResult> {
  const loaded = await load(tx, input.account_id, input.shard);
  const planned = planReclaim(
    loaded.escrow,
    input.shard,
    toMoney(input.chain_recorded_usd).units,
    input.nowNs,
    input.by_epoch,
  );
  if (!planned.ok) return planned;
  await write(tx, loaded, planned.account, input.shard, input.nowNs);
  return { ok: true, allotment: null, amount: Money.fromUnits(planned.amount) };
}

/**
 * A decision's charge: what the shard now spends and holds within its allotment, written in the
 * decision's own transaction. Takes the allotment row alone, never the account's. Refused past the
 * allotment or under a fenced-off epoch (the caller fails the transaction: fail closed).
 */
export async function chargeAllotment(
  tx: SubstrateTx,
  input: ShardLease & {
    account_id: string;
    spent_usd: string;
    reserved_usd: string;
    at_seq: number | null;
    nowNs: number;
  },
): Promise<AllotmentResult> {
  const store = allotmentsOf(tx);
  const row = await store.get(input.account_id, input.shard);
  if (row === null) return { ok: false, refusal: "no_allotment" };
  const account: EscrowAccount = { limit: 0n, spent: 0n, reserved: 0n, allotments: [toEscrow(row)] };
  const planned = planCharge(
    account,
    input.shard,
    input.epoch,
    toMoney(input.spent_usd).units,
    toMoney(input.reserved_usd).units,
  );
  if (!planned.ok) return planned;
  const next: BudgetAllotment = {
    ...row,
    spent_usd: moneyString(toMoney(input.spent_usd)),
    reserved_usd: moneyString(toMoney(input.reserved_usd)),
    updated_ns: input.nowNs,
    at_seq: input.at_seq ?? row.at_seq,
  };
  await store.put(next);
  return { ok: true, allotment: next, amount: Money.fromUnits(0n) };
}

/** The escrow view of an account and its allotment rows, for checks (recovery) that read without plans. */
export function escrowOf(account: BudgetAccount, rows: readonly BudgetAllotment[]): EscrowAccount {
  return accountOf(account, rows);
}
