// withEscrow: a Substrate that serves a shared agent or organization budget to one shard's engine as
// that shard's allotment (limit = granted, spent/reserved = within it), topping up and returning in the
// background. Not the escrow arithmetic (@leash/budget-guard's escrow.ts) nor the shard leases.
//
// A decision then takes the shard's allotment row, never the shared account's: the account row is
// locked only by grants and returns (short transactions of their own, or once inline when a decision
// finds the allotment below `minChunk`). The store has the last word: a charge past the allotment or
// under a fenced-off epoch fails the decision's transaction (fail closed), and a call the allotment
// cannot cover is denied by the engine's own ledger (budget_exhausted) when no top-up can be granted.
import {
  chargeAllotment,
  type GrantPolicy,
  grantAllotment,
  headroom,
  type Money,
  moneyString,
  readStoredMoney,
  releaseAllotment,
  returnAllotment,
  toMoney,
} from "@leash/budget-guard";
import {
  type BudgetAccount,
  type BudgetAllotment,
  type BudgetStore,
  type Substrate,
  SubstrateError,
  type SubstrateTx,
  type WriteBatch,
} from "@leash/core";

export interface EscrowOptions {
  /** The shard this engine decides for, and its lease (from the shards' lease table): fencing is by epoch. */
  readonly shard: string | number;
  readonly holder: string;
  readonly epoch: number;
  /** When the shard's lease runs out (ns): an allotment is reclaimable after it. Called at each grant. */
  readonly leaseExpiresNs: () => number;
  /** How many shards are asking (grant sizes are a share of the remaining among them). Default 1. */
  readonly activeShards?: () => number;
  /** Which accounts are shared and held in escrow. Default: agent and organization scopes. */
  readonly escrowed?: (account: BudgetAccount) => boolean;
  /** Grant sizes, in dollars: at least minChunk (unless less is left), at most maxChunk. */
  readonly minChunk_usd?: number | string;
  readonly maxChunk_usd?: number | string;
  /** A shard's share: 1/(k · activeShards) of what is left. Default 2. */
  readonly k?: number;
  /** The background tops up when headroom falls below this (default maxChunk / 2). */
  readonly lowWater_usd?: number | string;
  /** Background period; 0 turns the background off (tests drive `tick`). Default 250 ms. */
  readonly intervalMs?: number;
  /** An allotment with no charge for this long is returned (kept: nothing). Default 5 s. */
  readonly idleMs?: number;
  readonly nowNs?: () => number;
}

export interface EscrowControl {
  readonly shard: string;
  /** One background round: top up what runs low, return what sat idle. */
  tick(): Promise<void>;
  /** Stops the background and ends every allotment (its spending charged to the account). */
  release(): Promise<void>;
  /** The accounts served from allotments so far. */
  readonly accounts: ReadonlySet<string>;
}

export type EscrowedSubstrate = Substrate & { readonly escrow: EscrowControl };

const defaultEscrowed = (account: BudgetAccount) =>
  account.scope === "agent" || account.scope === "organization";

export function withEscrow(substrate: Substrate, options: EscrowOptions): EscrowedSubstrate {
  const state = shardState(options);
  let stopped = false;
  const interval = options.intervalMs ?? 250;
  let running: Promise<void> | null = null;
  const tick = () => topUpAndReturn(state, substrate);
  const timer =
    interval > 0
      ? setInterval(() => {
          if (running !== null || stopped) return;
          running = tick()
            .catch(() => undefined) // a failed round changes nothing; the next one tries again
            .finally(() => {
              running = null;
            });
        }, interval)
      : null;
  timer?.unref();

  const control: EscrowControl = {
    shard: state.shard,
    tick,
    accounts: state.escrowedIds,
    async release() {
      stopped = true;
      if (timer !== null) clearInterval(timer);
      await running;
      for (const accountId of state.escrowedIds) {
        await substrate.transaction((tx) =>
          releaseAllotment(tx, { ...state.lease, account_id: accountId, nowNs: state.nowNs() }),
        );
      }
    },
  };

  return {
    specificationVersion: substrate.specificationVersion,
    kind: substrate.kind,
    capabilities: substrate.capabilities,
    migrate: () => substrate.migrate(),
    transaction: (fn) => substrate.transaction((tx) => fn(wrap(state, tx))),
    close: async () => {
      stopped = true;
      if (timer !== null) clearInterval(timer);
      await running;
      await substrate.close();
    },
    escrow: control,
  };
}

/** One shard's escrow: its lease, its settings, and what it has learnt of the accounts it serves. */
interface ShardState {
  readonly options: EscrowOptions;
  readonly shard: string;
  readonly lease: { readonly shard: string; readonly holder: string; readonly epoch: number };
  readonly nowNs: () => number;
  readonly minChunk: Money;
  readonly maxChunk: Money;
  readonly lowWater: Money;
  readonly policy: GrantPolicy;
  readonly isEscrowed: (account: BudgetAccount) => boolean;
  readonly idleNs: number;
  /** Account definitions (scope, parent, limit never change: ensureAccount refuses another). */
  readonly definitions: Map<string, BudgetAccount>;
  readonly escrowedIds: Set<string>;
  readonly lastCharge: Map<string, number>;
}

function shardState(options: EscrowOptions): ShardState {
  const shard = String(options.shard);
  const minChunk = toMoney(options.minChunk_usd ?? "0.01");
  const maxChunk = toMoney(options.maxChunk_usd ?? "1");
  return {
    options,
    shard,
    lease: { shard, holder: options.holder, epoch: options.epoch },
    nowNs: options.nowNs ?? (() => Date.now() * 1e6),
    minChunk,
    maxChunk,
    lowWater: options.lowWater_usd === undefined ? maxChunk.div(2) : toMoney(options.lowWater_usd),
    policy: { minChunk: minChunk.units, maxChunk: maxChunk.units, k: options.k ?? 2 },
    isEscrowed: options.escrowed ?? defaultEscrowed,
    idleNs: (options.idleMs ?? 5_000) * 1e6,
    definitions: new Map(),
    escrowedIds: new Set(),
    lastCharge: new Map(),
  };
}

function grant(state: ShardState, tx: SubstrateTx, accountId: string, request: Money) {
  return grantAllotment(tx, {
    ...state.lease,
    account_id: accountId,
    request_usd: request,
    active_shards: state.options.activeShards?.() ?? 1,
    lease_expires_ns: state.options.leaseExpiresNs(),
    nowNs: state.nowNs(),
    policy: state.policy,
  });
}

/**
 * The shared account as this shard sees it: its own limit (so ensureAccount still recognizes it)
 * with everything outside the shard's allotment counted as spent, so what it allows is the
 * allotment's headroom exactly. `offset` (limit − granted) is what the write-back takes off again.
 */
function present(state: ShardState, definition: BudgetAccount, own: BudgetAllotment | null) {
  const mine = own !== null && own.epoch === state.lease.epoch ? own : null;
  const limit = toMoney(definition.limit_usd);
  const granted = mine === null ? toMoney(0) : toMoney(mine.granted_usd);
  const offset = limit.gte(granted) ? limit.minus(granted) : toMoney(0);
  const account: BudgetAccount = {
    ...definition,
    spent_usd: moneyString(offset.plus(mine?.spent_usd ?? "0")),
    reserved_usd: mine?.reserved_usd ?? "0",
    at_seq: mine?.at_seq ?? null,
  };
  return { account, offset };
}

function headroomOf(state: ShardState, own: BudgetAllotment | null) {
  return own === null
    ? 0n
    : headroom({
        shard: state.shard,
        holder: own.holder,
        epoch: own.epoch,
        granted: readStoredMoney(own.granted_usd, "granted_usd").units,
        spent: readStoredMoney(own.spent_usd, "spent_usd").units,
        reserved: readStoredMoney(own.reserved_usd, "reserved_usd").units,
        leaseExpiresNs: own.lease_expires_ns,
      });
}

async function allotmentRow(
  state: ShardState,
  tx: SubstrateTx,
  accountId: string,
): Promise<BudgetAllotment | null> {
  if (tx.allotments === undefined) {
    throw new SubstrateError("corrupt", "escrow needs a store with budget allotments (schema version 12)");
  }
  return tx.allotments.get(accountId, state.shard);
}

async function getAccount(
  state: ShardState,
  tx: SubstrateTx,
  offsets: Map<string, Money>,
  accountId: string,
): Promise<BudgetAccount | null> {
  let definition = state.definitions.get(accountId);
  if (definition === undefined) {
    // Once per account and process: the shared row itself (locked for this one transaction).
    const row = await tx.budgets.getAccount(accountId);
    if (row === null || !state.isEscrowed(row)) return row;
    definition = { ...row, spent_usd: "0", reserved_usd: "0" };
    state.definitions.set(accountId, definition);
    state.escrowedIds.add(accountId);
  }
  let own = await allotmentRow(state, tx, accountId);
  // The last resort before a DENY: below the smallest grant, top up in this very transaction.
  if (headroomOf(state, own) < state.minChunk.units && (own === null || own.epoch === state.lease.epoch)) {
    const topped = await grant(state, tx, accountId, state.maxChunk);
    if (topped.ok) own = topped.allotment;
  }
  const { account, offset } = present(state, definition, own);
  offsets.set(accountId, offset);
  return account;
}

async function charge(
  state: ShardState,
  tx: SubstrateTx,
  offsets: Map<string, Money>,
  account: BudgetAccount,
): Promise<void> {
  const { lease, options, nowNs } = state;
  const offset = offsets.get(account.account_id);
  const presented = toMoney(account.spent_usd);
  if (offset === undefined || presented.lt(offset)) {
    throw new SubstrateError(
      "conflict",
      `escrow: ${account.account_id} was written without being read from this shard's allotment`,
    );
  }
  const spent = moneyString(presented.minus(offset));
  const input = {
    ...lease,
    account_id: account.account_id,
    spent_usd: spent,
    reserved_usd: account.reserved_usd,
    at_seq: account.at_seq,
    nowNs: nowNs(),
  };
  let charged = await chargeAllotment(tx, input);
  if (!charged.ok && charged.refusal === "over_allotment") {
    // A settlement above its estimate (real money was spent) or a view older than a return: top up
    // by what is missing, whole, in this transaction, and charge again.
    const own = await allotmentRow(state, tx, account.account_id);
    const used = toMoney(spent).plus(account.reserved_usd);
    const missing = own === null ? used : used.minus(own.granted_usd);
    const topped = await grantAllotment(tx, {
      ...lease,
      account_id: account.account_id,
      request_usd: missing,
      need_usd: missing,
      active_shards: options.activeShards?.() ?? 1,
      lease_expires_ns: options.leaseExpiresNs(),
      nowNs: nowNs(),
      policy: state.policy,
    });
    if (topped.ok) charged = await chargeAllotment(tx, input);
  }
  if (!charged.ok) {
    // The engine judged on a stale view (a return, or a newer epoch): the store refuses, fail closed.
    throw new SubstrateError(
      "conflict",
      `escrow: shard ${state.shard} cannot charge ${account.account_id} (${charged.refusal})`,
    );
  }
  state.lastCharge.set(account.account_id, nowNs());
}

/** A transaction's stores with the shared accounts served from this shard's allotments. */
function wrap(state: ShardState, tx: SubstrateTx): SubstrateTx {
  const { escrowedIds } = state;
  const offsets = new Map<string, Money>();
  const budgets: BudgetStore = {
    ...bind(tx.budgets),
    getAccount: (id) => getAccount(state, tx, offsets, id),
    insertAccount: async (account) => {
      await tx.budgets.insertAccount(account);
      // Served from allotments from the next transaction on (the engine reads volatile ids afresh).
      if (state.isEscrowed(account)) {
        state.definitions.set(account.account_id, { ...account, spent_usd: "0", reserved_usd: "0" });
        escrowedIds.add(account.account_id);
      }
    },
    updateAccount: (account) =>
      escrowedIds.has(account.account_id)
        ? charge(state, tx, offsets, account)
        : tx.budgets.updateAccount(account),
  };
  return {
    sessions: tx.sessions,
    nonces: tx.nonces,
    budgets,
    hitl: tx.hitl,
    chain: tx.chain,
    outbox: tx.outbox,
    messages: tx.messages,
    ...(tx.allotments === undefined ? {} : { allotments: tx.allotments }),
    volatileAccounts: escrowedIds,
    async writeBatch(batch: WriteBatch) {
      const shared = batch.accounts.filter((a) => escrowedIds.has(a.account_id));
      if (shared.length === 0) return tx.writeBatch(batch);
      await tx.writeBatch({
        ...batch,
        accounts: batch.accounts.filter((a) => !escrowedIds.has(a.account_id)),
      });
      for (const account of shared) await charge(state, tx, offsets, account);
    },
  };
}

/** One background round (EscrowControl.tick): top up what runs low, return what sat idle. */
async function topUpAndReturn(state: ShardState, substrate: Substrate): Promise<void> {
  const { lease, nowNs } = state;
  for (const accountId of state.escrowedIds) {
    await substrate.transaction(async (tx) => {
      const own = await allotmentRow(state, tx, accountId);
      if (own !== null && own.epoch !== lease.epoch) return; // someone else's: recovery reclaims it
      const idle = nowNs() - (state.lastCharge.get(accountId) ?? 0) > state.idleNs;
      if (own !== null && idle && headroomOf(state, own) > 0n) {
        await returnAllotment(tx, { ...lease, account_id: accountId, nowNs: nowNs() });
      } else if (!idle && headroomOf(state, own) < state.lowWater.units) {
        await grant(state, tx, accountId, state.maxChunk);
      }
    });
  }
}

function bind(store: BudgetStore): BudgetStore {
  return {
    getAccount: (id) => store.getAccount(id),
    insertAccount: (account) => store.insertAccount(account),
    updateAccount: (account) => store.updateAccount(account),
    insertReservation: (r) => store.insertReservation(r),
    getReservation: (id) => store.getReservation(id),
    updateReservation: (r) => store.updateReservation(r),
    listExpired: (nowNs, limit) => store.listExpired(nowNs, limit),
    listReservations: (filter) => store.listReservations(filter),
  };
}
