// The HITL store on leash_hitl_requests: paused calls and the human decisions made on them.
// Nonces are kept as JSON text (as in nonces.ts) so a string nonce and a number nonce stay apart.
import type { HitlRequest, HitlRequestStatus, HitlStore, Reason } from "@leash/core";
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
import { KeyedRows } from "./keyed-rows.js";
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
  params_json: string | null;
  budget_spent_usd: string | null;
  budget_limit_usd: string | null;
  budget_remaining_usd: string | null;
  policy_id: string | null;
  expires_ns: unknown;
  comment: string | null;
  successor_params_json: string | null;
  at_seq: unknown;
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
    params_json: row.params_json,
    budget_spent_usd: row.budget_spent_usd,
    budget_limit_usd: row.budget_limit_usd,
    budget_remaining_usd: row.budget_remaining_usd,
    policy_id: row.policy_id,
    expires_ns: decodeOptionalInt(row.expires_ns, "expires_ns"),
    comment: row.comment,
    successor_params_json: row.successor_params_json,
    ...(row.at_seq === null || row.at_seq === undefined ? {} : { at_seq: decodeInt(row.at_seq, "at_seq") }),
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
    encodeOptionalText(request.params_json, "params_json"),
    encodeOptionalText(request.budget_spent_usd, "budget_spent_usd"),
    encodeOptionalText(request.budget_limit_usd, "budget_limit_usd"),
    encodeOptionalText(request.budget_remaining_usd, "budget_remaining_usd"),
    encodeOptionalText(request.policy_id, "policy_id"),
    encodeOptionalInt(request.expires_ns, "expires_ns"),
    encodeOptionalText(request.comment, "comment"),
    encodeOptionalText(request.successor_params_json, "successor_params_json"),
    encodeOptionalInt(request.at_seq ?? null, "at_seq"),
  ];
}

export class PostgresHitlStore implements HitlStore {
  private readonly rows: KeyedRows<HitlRequest, HitlRow>;

  constructor(tx: TxContext, sql: Statements["hitl"]) {
    this.rows = new KeyedRows(tx, {
      table: "hitl",
      noun: "HITL request",
      idColumn: "request_id",
      idOf: (request) => request.request_id,
      params: toParams,
      fromRow,
      statements: sql,
    });
  }

  insert(request: HitlRequest): Promise<void> {
    return this.rows.insert(request);
  }

  get(requestId: string): Promise<HitlRequest | null> {
    return this.rows.get(requestId);
  }

  update(request: HitlRequest): Promise<void> {
    return this.rows.update(request);
  }

  list(filter: { sessionId?: string; status?: HitlRequestStatus }): Promise<HitlRequest[]> {
    return this.rows.list(filter);
  }
}
