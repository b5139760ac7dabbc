// The SQLite substrate's escrow allotment rows (AllotmentStore, table leash_budget_allotments, version 12).
// Rows only; the escrow arithmetic is @leash/budget-guard's. SQLite's one writer is what serializes grants.
import type { AllotmentStore, BudgetAllotment } from "@leash/core";
import { checkedInteger, text } from "./codec.js";
import type { SqliteTx } from "./stores.js";

interface AllotmentRow {
  account_id: string;
  shard: string;
  holder: string;
  epoch: number | bigint;
  granted_usd: string;
  spent_usd: string;
  reserved_usd: string;
  lease_expires_ns: number | bigint;
  created_ns: number | bigint;
  updated_ns: number | bigint;
  at_seq: number | bigint | null;
}

const num = (value: number | bigint) => Number(value);

function fromRow(row: AllotmentRow): BudgetAllotment {
  return {
    account_id: row.account_id,
    shard: row.shard,
    holder: row.holder,
    epoch: num(row.epoch),
    granted_usd: row.granted_usd,
    spent_usd: row.spent_usd,
    reserved_usd: row.reserved_usd,
    lease_expires_ns: num(row.lease_expires_ns),
    created_ns: num(row.created_ns),
    updated_ns: num(row.updated_ns),
    at_seq: row.at_seq === null ? null : num(row.at_seq),
  };
}

function toRow(a: BudgetAllotment): Record<string, unknown> {
  return {
    account_id: text("account_id", a.account_id),
    shard: text("shard", a.shard),
    holder: text("holder", a.holder),
    epoch: checkedInteger("epoch", a.epoch),
    granted_usd: text("granted_usd", a.granted_usd),
    spent_usd: text("spent_usd", a.spent_usd),
    reserved_usd: text("reserved_usd", a.reserved_usd),
    lease_expires_ns: checkedInteger("lease_expires_ns", a.lease_expires_ns),
    created_ns: checkedInteger("created_ns", a.created_ns),
    updated_ns: checkedInteger("updated_ns", a.updated_ns),
    at_seq: a.at_seq === null ? null : checkedInteger("at_seq", a.at_seq),
  };
}

export class SqliteAllotments implements AllotmentStore {
  constructor(readonly tx: SqliteTx) {}

  async get(accountId: string, shard: string): Promise<BudgetAllotment | null> {
    const row = this.tx.exec("allotments.get", (st) =>
      st("SELECT * FROM leash_budget_allotments WHERE account_id = ? AND shard = ?").get(accountId, shard),
    ) as AllotmentRow | undefined;
    return row === undefined ? null : fromRow(row);
  }

  async list(accountId: string): Promise<BudgetAllotment[]> {
    const rows = this.tx.exec("allotments.list", (st) =>
      st("SELECT * FROM leash_budget_allotments WHERE account_id = ? ORDER BY shard").all(accountId),
    ) as AllotmentRow[];
    return rows.map(fromRow);
  }

  async listAll(): Promise<BudgetAllotment[]> {
    const rows = this.tx.exec("allotments.listAll", (st) =>
      st("SELECT * FROM leash_budget_allotments ORDER BY account_id, shard").all(),
    ) as AllotmentRow[];
    return rows.map(fromRow);
  }

  async put(allotment: BudgetAllotment): Promise<void> {
    const row = toRow(allotment);
    this.tx.exec("allotments.put", (st) =>
      st(
        `INSERT INTO leash_budget_allotments (account_id, shard, holder, epoch, granted_usd, spent_usd,
           reserved_usd, lease_expires_ns, created_ns, updated_ns, at_seq)
         VALUES (@account_id, @shard, @holder, @epoch, @granted_usd, @spent_usd, @reserved_usd,
           @lease_expires_ns, @created_ns, @updated_ns, @at_seq)
         ON CONFLICT (account_id, shard) DO UPDATE SET holder = excluded.holder, epoch = excluded.epoch,
           granted_usd = excluded.granted_usd, spent_usd = excluded.spent_usd,
           reserved_usd = excluded.reserved_usd, lease_expires_ns = excluded.lease_expires_ns,
           updated_ns = excluded.updated_ns, at_seq = excluded.at_seq`,
      ).run(row),
    );
  }

  async delete(accountId: string, shard: string): Promise<void> {
    this.tx.exec("allotments.delete", (st) =>
      st("DELETE FROM leash_budget_allotments WHERE account_id = ? AND shard = ?").run(accountId, shard),
    );
  }
}
