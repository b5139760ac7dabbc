// The session store on leash_sessions: config and state as JSONB, counters and times as BIGINT.
// Seen nonces are not here (nonces.ts); `get` locks the row until the transaction ends.
import type { Config, SessionRecord, SessionStatus, SessionStore, State } from "@leash/core";
import { SubstrateError } from "@leash/core";
import {
  decodeInt,
  decodeOptionalInt,
  encodeInt,
  encodeJson,
  encodeLimit,
  encodeOptionalInt,
  encodeText,
} from "./codec.js";
import type { Statements } from "./sql.js";
import type { TxContext } from "./tx.js";

interface SessionRow {
  session_id: string;
  agent_id: string;
  organization_id: string;
  status: string;
  config: Config;
  state: State;
  call_count: unknown;
  created_ns: unknown;
  updated_ns: unknown;
  last_heartbeat_ns: unknown;
}

function fromRow(row: SessionRow): SessionRecord {
  return {
    session_id: row.session_id,
    agent_id: row.agent_id,
    organization_id: row.organization_id,
    status: row.status as SessionStatus,
    config: row.config,
    state: row.state,
    call_count: decodeInt(row.call_count, "call_count"),
    created_ns: decodeInt(row.created_ns, "created_ns"),
    updated_ns: decodeInt(row.updated_ns, "updated_ns"),
    last_heartbeat_ns: decodeOptionalInt(row.last_heartbeat_ns, "last_heartbeat_ns"),
  };
}

function toParams(record: SessionRecord): unknown[] {
  return [
    encodeText(record.session_id, "session_id"),
    encodeText(record.agent_id, "agent_id"),
    encodeText(record.organization_id, "organization_id"),
    encodeText(record.status, "status"),
    encodeJson(record.config, "config"),
    encodeJson(record.state, "state"),
    encodeInt(record.call_count, "call_count"),
    encodeInt(record.created_ns, "created_ns"),
    encodeInt(record.updated_ns, "updated_ns"),
    encodeOptionalInt(record.last_heartbeat_ns, "last_heartbeat_ns"),
  ];
}

export class PostgresSessionStore implements SessionStore {
  /** Rows this transaction knows exist and has locked (read FOR UPDATE, or inserted) until it ends. */
  private readonly held = new Set<string>();
  /** Ids this transaction found absent under their key lock: an insert of one cannot conflict. */
  private readonly absent = new Set<string>();

  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["sessions"],
  ) {}

  async get(sessionId: string): Promise<SessionRecord | null> {
    const id = encodeText(sessionId, "session_id");
    const row = await this.tx.lockedRow<SessionRow>(this.sql.get, id, "sessions");
    if (row === undefined) {
      this.absent.add(id);
      return null;
    }
    this.held.add(id);
    return fromRow(row);
  }

  async insert(record: SessionRecord): Promise<void> {
    const key = this.tx.rowKey("sessions", record.session_id);
    const params = [...toParams(record), key];
    const conflict = () => new SubstrateError("conflict", `session ${record.session_id} already exists`);
    if (this.absent.delete(record.session_id)) {
      this.held.add(record.session_id);
      return this.tx.defer(this.sql.insert, params, (r) => (r.rowCount === 0 ? conflict() : null));
    }
    const { rowCount } = await this.tx.query(this.sql.insert, params);
    if (rowCount === 0) throw conflict();
    this.held.add(record.session_id);
  }

  async update(record: SessionRecord): Promise<void> {
    const params = toParams(record);
    const missing = () => new SubstrateError("not_found", `session ${record.session_id} does not exist`);
    if (this.held.has(record.session_id)) {
      return this.tx.defer(this.sql.update, params, (r) => (r.rowCount === 0 ? missing() : null));
    }
    const { rowCount } = await this.tx.query(this.sql.update, params);
    if (rowCount === 0) throw missing();
  }

  async list(filter: { status?: SessionStatus; limit?: number } = {}): Promise<SessionRecord[]> {
    const limit = encodeLimit(filter.limit);
    const { rows } =
      filter.status === undefined
        ? await this.tx.query<SessionRow>(this.sql.list, [limit])
        : await this.tx.query<SessionRow>(this.sql.listByStatus, [
            encodeText(filter.status, "status"),
            limit,
          ]);
    return rows.map(fromRow);
  }
}
