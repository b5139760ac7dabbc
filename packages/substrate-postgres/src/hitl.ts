// The HITL store on leash_hitl_requests: paused calls and the human decisions made on them.
// Nonces are kept as JSON text (as in nonces.ts) so a string nonce and a number nonce stay apart.
import type { HitlRequest, HitlRequestStatus, HitlStore, Reason } from "@leash/core";
import { SubstrateError } from "@leash/core";
import {
  decodeInt,
  decodeOptionalInt,
  decodeOptionalNonce,
  encodeInt,
  encodeOptionalInt,
  encodeOptionalNonce,
  encodeOptionalText,
  encodeText,
} from "./codec.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

interface HitlRow {
  request_id: string;
  session_id: string;
  call_number: unknown;
  tool_name: string;
  nonce_json: string | null;
  args_digest: string | null;
  reason: string;
  status: string;
  decision: string | null;
  operator_id: string | null;
  successor_nonce_json: string | null;
  successor_args_digest: string | null;
  created_ns: unknown;
  decided_ns: unknown;
}

function fromRow(row: HitlRow): HitlRequest {
  return {
    request_id: row.request_id,
    session_id: row.session_id,
    call_number: decodeInt(row.call_number, "call_number"),
    tool_name: row.tool_name,
    nonce: decodeOptionalNonce(row.nonce_json),
    args_digest: row.args_digest,
    reason: row.reason as Reason,
    status: row.status as HitlRequestStatus,
    decision: row.decision,
    operator_id: row.operator_id,
    successor_nonce: decodeOptionalNonce(row.successor_nonce_json),
    successor_args_digest: row.successor_args_digest,
    created_ns: decodeInt(row.created_ns, "created_ns"),
    decided_ns: decodeOptionalInt(row.decided_ns, "decided_ns"),
  };
}

function toParams(request: HitlRequest): unknown[] {
  return [
    encodeText(request.request_id, "request_id"),
    encodeText(request.session_id, "session_id"),
    encodeInt(request.call_number, "call_number"),
    encodeText(request.tool_name, "tool_name"),
    encodeOptionalNonce(request.nonce),
    encodeOptionalText(request.args_digest, "args_digest"),
    encodeText(request.reason, "reason"),
    encodeText(request.status, "status"),
    encodeOptionalText(request.decision, "decision"),
    encodeOptionalText(request.operator_id, "operator_id"),
    encodeOptionalNonce(request.successor_nonce),
    encodeOptionalText(request.successor_args_digest, "successor_args_digest"),
    encodeInt(request.created_ns, "created_ns"),
    encodeOptionalInt(request.decided_ns, "decided_ns"),
  ];
}

export class PostgresHitlStore implements HitlStore {
  /** Rows this transaction knows exist and has locked (read FOR UPDATE, or inserted) until it ends. */
  private readonly held = new Set<string>();
  /** Ids this transaction found absent under their key lock: an insert of one cannot conflict. */
  private readonly absent = new Set<string>();

  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["hitl"],
  ) {}

  async insert(request: HitlRequest): Promise<void> {
    const key = this.tx.rowKey("hitl", request.request_id);
    const params = [...toParams(request), key];
    const conflict = () =>
      new SubstrateError("conflict", `HITL request ${request.request_id} already exists`);
    if (this.absent.delete(request.request_id)) {
      this.held.add(request.request_id);
      return this.tx.defer(this.sql.insert, params, (r) => (r.rowCount === 0 ? conflict() : null));
    }
    const { rowCount } = await this.tx.query(this.sql.insert, params);
    if (rowCount === 0) throw conflict();
    this.held.add(request.request_id);
  }

  async get(requestId: string): Promise<HitlRequest | null> {
    const id = encodeText(requestId, "request_id");
    const row = await this.tx.lockedRow<HitlRow>(this.sql.get, id, "hitl");
    if (row === undefined) {
      this.absent.add(id);
      return null;
    }
    this.held.add(id);
    return fromRow(row);
  }

  async update(request: HitlRequest): Promise<void> {
    const params = toParams(request);
    const missing = () =>
      new SubstrateError("not_found", `HITL request ${request.request_id} does not exist`);
    if (this.held.has(request.request_id)) {
      return this.tx.defer(this.sql.update, params, (r) => (r.rowCount === 0 ? missing() : null));
    }
    const { rowCount } = await this.tx.query(this.sql.update, params);
    if (rowCount === 0) throw missing();
  }

  async list(filter: { sessionId?: string; status?: HitlRequestStatus }): Promise<HitlRequest[]> {
    const used: string[] = [];
    const values: unknown[] = [];
    if (filter.sessionId !== undefined) {
      used.push("session_id");
      values.push(encodeText(filter.sessionId, "sessionId"));
    }
    if (filter.status !== undefined) {
      used.push("status");
      values.push(encodeText(filter.status, "status"));
    }
    const { rows } = await this.tx.query<HitlRow>(this.sql.list(used), values);
    return rows.map(fromRow);
  }
}
