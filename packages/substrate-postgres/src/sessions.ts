// The session store on leash_sessions: config and state as JSONB, counters and times as BIGINT.
// Seen nonces are not here (nonces.ts); `get` locks the row until the transaction ends, or answers from
// what its group-commit batch already holds locked (left by the batch's earlier transactions).
import type { Config, SessionRecord, SessionStatus, SessionStore, State } from "@leash/core";
import { SubstrateError } from "@leash/core";
import type { BatchMemory, SessionEntry } from "./batch-memory.js";
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
  at_seq: unknown;
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
    at_seq: decodeOptionalInt(row.at_seq, "at_seq"),
  };
}

function entryOf(record: SessionRecord, config: string, state: string): SessionEntry {
  return {
    fields: {
      session_id: record.session_id,
      agent_id: record.agent_id,
      organization_id: record.organization_id,
      status: record.status,
      call_count: record.call_count,
      created_ns: record.created_ns,
      updated_ns: record.updated_ns,
      // As the column gives it back: a record written without one reads back null.
      last_heartbeat_ns: record.last_heartbeat_ns ?? null,
      at_seq: record.at_seq ?? null,
    },
    config,
    state,
  };
}

function recordOf(entry: SessionEntry): SessionRecord {
  return {
    ...entry.fields,
    config: JSON.parse(entry.config) as Config,
    state: JSON.parse(entry.state) as State,
  };
}

/** The update statement's parameters: every column but last_heartbeat_ns, which only touch writes. */
function updateParams(record: SessionRecord): unknown[] {
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
    encodeOptionalInt(record.at_seq, "at_seq"),
  ];
}

/** The insert statement's parameters, in SESSION_COLUMNS order (sql.ts). */
function insertParams(record: SessionRecord): unknown[] {
  const params = updateParams(record);
  params.splice(9, 0, encodeOptionalInt(record.last_heartbeat_ns, "last_heartbeat_ns"));
  return params;
}

export class PostgresSessionStore implements SessionStore {
  /** Rows this transaction knows exist and has locked (read FOR UPDATE, or inserted) until it ends. */
  private readonly held = new Set<string>();
  /** Ids this transaction found absent under their key lock: an insert of one cannot conflict. */
  private readonly absent = new Set<string>();

  /** In a batch: rows this transaction read or wrote, as they now stand, handed on by rememberIn. */
  private readonly local = new Map<string, SessionEntry>();

  constructor(
    private readonly tx: TxContext,
    private readonly sql: Statements["sessions"],
    private readonly memory?: BatchMemory,
  ) {}

  async get(sessionId: string): Promise<SessionRecord | null> {
    const id = encodeText(sessionId, "session_id");
    const known = this.local.get(id) ?? this.memory?.sessions.get(id);
    if (known !== undefined) {
      // Locked by this batch's transaction since it was read: nobody else can have changed it.
      await this.tx.usable(this.sql.get.op);
      this.held.add(id);
      return recordOf(known);
    }
    const row = await this.tx.lockedRow<SessionRow>(this.sql.get, id, "sessions");
    if (row === undefined) {
      this.absent.add(id);
      return null;
    }
    this.held.add(id);
    const record = fromRow(row);
    if (this.memory !== undefined) {
      this.local.set(id, entryOf(record, JSON.stringify(row.config), JSON.stringify(row.state)));
    }
    return record;
  }

  /** Hands the rows this transaction holds to the batch's next transactions (once its savepoint is released). */
  rememberIn(memory: BatchMemory): void {
    for (const [id, entry] of this.local) memory.sessions.set(id, entry);
  }

  private keep(record: SessionRecord, params: readonly unknown[]): void {
    if (this.memory === undefined) return;
    this.local.set(record.session_id, entryOf(record, params[4] as string, params[5] as string));
  }

  async insert(record: SessionRecord): Promise<void> {
    const key = this.tx.rowKey("sessions", record.session_id);
    const params = [...insertParams(record), key];
    const conflict = () => new SubstrateError("conflict", `session ${record.session_id} already exists`);
    if (this.absent.delete(record.session_id)) {
      this.held.add(record.session_id);
      this.keep(record, params);
      return this.tx.defer(this.sql.insert, params, (r) => (r.rowCount === 0 ? conflict() : null));
    }
    const { rowCount } = await this.tx.query(this.sql.insert, params);
    if (rowCount === 0) throw conflict();
    this.held.add(record.session_id);
    this.keep(record, params);
  }

  async update(record: SessionRecord): Promise<void> {
    const params = updateParams(record);
    const id = record.session_id;
    const missing = () => new SubstrateError("not_found", `session ${id} does not exist`);
    // What the batch remembers is the row as stored, whose heartbeat the update leaves alone.
    const heartbeat = (this.local.get(id) ?? this.memory?.sessions.get(id))?.fields.last_heartbeat_ns;
    if (this.held.has(id)) {
      this.keepUpdated(record, params, heartbeat);
      return this.tx.defer(this.sql.update, params, (r) => (r.rowCount === 0 ? missing() : null));
    }
    const { rowCount } = await this.tx.query(this.sql.update, params);
    if (rowCount === 0) throw missing();
    // The UPDATE has locked the row.
    this.held.add(id);
    this.keepUpdated(record, params, heartbeat);
  }

  /**
   * Updates without waiting for the answer, whatever this transaction knows of the row: a row of
   * SubstrateTx.writeBatch, which waits for every answer before it resolves. A missing row, checked
   * in the answer, fails the transaction; the UPDATE locks the row.
   */
  updateHeld(record: SessionRecord): Promise<void> {
    const params = updateParams(record);
    const id = record.session_id;
    const missing = () => new SubstrateError("not_found", `session ${id} does not exist`);
    const heartbeat = (this.local.get(id) ?? this.memory?.sessions.get(id))?.fields.last_heartbeat_ns;
    this.held.add(id);
    this.keepUpdated(record, params, heartbeat);
    return this.tx.defer(this.sql.update, params, (r) => (r.rowCount === 0 ? missing() : null));
  }

  /** Remembers an updated row with the stored heartbeat; a row whose heartbeat is unknown is not remembered. */
  private keepUpdated(
    record: SessionRecord,
    params: readonly unknown[],
    heartbeat: number | null | undefined,
  ) {
    if (heartbeat === undefined) {
      this.local.delete(record.session_id);
      return;
    }
    this.keep({ ...record, last_heartbeat_ns: heartbeat }, params);
  }

  async touch(sessionId: string, atNs: number): Promise<void> {
    const id = encodeText(sessionId, "session_id");
    const params = [id, encodeInt(atNs, "atNs")];
    const missing = () => new SubstrateError("not_found", `session ${id} does not exist`);
    const known = this.local.get(id) ?? this.memory?.sessions.get(id);
    if (known !== undefined) {
      this.local.set(id, { ...known, fields: { ...known.fields, last_heartbeat_ns: atNs } });
    }
    if (this.held.has(id)) {
      return this.tx.defer(this.sql.touch, params, (r) => (r.rowCount === 0 ? missing() : null));
    }
    const { rowCount } = await this.tx.query(this.sql.touch, params);
    if (rowCount === 0) throw missing();
    this.held.add(id);
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
