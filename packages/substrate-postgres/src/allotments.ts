// The PostgreSQL AllotmentStore on leash_budget_allotments (migration 12): a shard's escrow allotments.
// Rows only; budget-guard's escrow-store.ts does the arithmetic, under the account row's lock for grants.
import type { AllotmentStore, BudgetAllotment } from "@leash/core";
import {
  decodeInt,
  decodeOptionalInt,
  encodeDecimal,
  encodeInt,
  encodeOptionalInt,
  encodeText,
  type TableNames,
} from "./codec.js";
import { statement } from "./sql.js";
import type { TxContext } from "./tx.js";

const COLUMNS =
  "account_id, shard, holder, epoch, granted_usd, spent_usd, reserved_usd, lease_expires_ns, created_ns, updated_ns, at_seq";

export type AllotmentStatements = ReturnType<typeof allotmentStatements>;

export function allotmentStatements(t: TableNames) {
  return {
    get: statement(
      "allotments.get",
      `SELECT ${COLUMNS} FROM ${t.allotments} WHERE account_id = $1 AND shard = $2 FOR UPDATE`,
    ),
    list: statement(
      "allotments.list",
      `SELECT ${COLUMNS} FROM ${t.allotments} WHERE account_id = $1 ORDER BY shard COLLATE "C"`,
    ),
    listAll: statement(
      "allotments.listAll",
      `SELECT ${COLUMNS} FROM ${t.allotments} ORDER BY account_id COLLATE "C", shard COLLATE "C"`,
    ),
    put: statement(
      "allotments.put",
      `INSERT INTO ${t.allotments} (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (account_id, shard) DO UPDATE SET holder = EXCLUDED.holder, epoch = EXCLUDED.epoch,
granted_usd = EXCLUDED.granted_usd, spent_usd = EXCLUDED.spent_usd, reserved_usd = EXCLUDED.reserved_usd,
lease_expires_ns = EXCLUDED.lease_expires_ns, updated_ns = EXCLUDED.updated_ns, at_seq = EXCLUDED.at_seq`,
    ),
    delete: statement(
      "allotments.delete",
      `DELETE FROM ${t.allotments} WHERE account_id = $1 AND shard = $2`,
    ),
  };
}

interface AllotmentRow {
  account_id: string;
  shard: string;
  holder: string;
  epoch: unknown;
  granted_usd: string;
  spent_usd: string;
  reserved_usd: string;
  lease_expires_ns: unknown;
  created_ns: unknown;
  updated_ns: unknown;
  at_seq: unknown;
}

function fromRow(row: AllotmentRow): BudgetAllotment {
  return {
    account_id: row.account_id,
    shard: row.shard,
    holder: row.holder,
    epoch: decodeInt(row.epoch, "epoch"),
    granted_usd: row.granted_usd,
    spent_usd: row.spent_usd,
    reserved_usd: row.reserved_usd,
    lease_expires_ns: decodeInt(row.lease_expires_ns, "lease_expires_ns"),
    created_ns: decodeInt(row.created_ns, "created_ns"),
    updated_ns: decodeInt(row.updated_ns, "updated_ns"),
    at_seq: decodeOptionalInt(row.at_seq, "at_seq"),
  };
}

export class PostgresAllotmentStore implements AllotmentStore {
  constructor(
    private readonly tx: TxContext,
    private readonly sql: AllotmentStatements,
  ) {}

  async get(accountId: string, shard: string): Promise<BudgetAllotment | null> {
    const { rows } = await this.tx.query<AllotmentRow>(this.sql.get, [
      encodeText(accountId, "account_id"),
      encodeText(shard, "shard"),
    ]);
    return rows.length === 0 ? null : fromRow(rows[0]!);
  }

  async list(accountId: string): Promise<BudgetAllotment[]> {
    const { rows } = await this.tx.query<AllotmentRow>(this.sql.list, [encodeText(accountId, "account_id")]);
    return rows.map(fromRow);
  }

  async listAll(): Promise<BudgetAllotment[]> {
    const { rows } = await this.tx.query<AllotmentRow>(this.sql.listAll, []);
    return rows.map(fromRow);
  }

  async put(a: BudgetAllotment): Promise<void> {
    await this.tx.query(this.sql.put, [
      encodeText(a.account_id, "account_id"),
      encodeText(a.shard, "shard"),
      encodeText(a.holder, "holder"),
      encodeInt(a.epoch, "epoch"),
      encodeDecimal(a.granted_usd, "granted_usd"),
      encodeDecimal(a.spent_usd, "spent_usd"),
      encodeDecimal(a.reserved_usd, "reserved_usd"),
      encodeInt(a.lease_expires_ns, "lease_expires_ns"),
      encodeInt(a.created_ns, "created_ns"),
      encodeInt(a.updated_ns, "updated_ns"),
      encodeOptionalInt(a.at_seq, "at_seq"),
    ]);
  }

  async delete(accountId: string, shard: string): Promise<void> {
    await this.tx.query(this.sql.delete, [encodeText(accountId, "account_id"), encodeText(shard, "shard")]);
  }
}
