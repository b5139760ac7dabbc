// The session transitions besides evaluate and HITL: registration, an operator's reset, going stale,
// coming back, and a settled call's post_exec record. Each written once for the engine and the replay.
import { type Config, resetCircuit, type SessionRecord } from "@leash/core";
import { budgetEnabled, sessionAccountInput } from "./accounts.js";
import type {
  Env,
  HeartbeatCommand,
  MachineError,
  MachineEvent,
  MarkStaleCommand,
  Outcome,
  RegisterCommand,
  ResetCommand,
  StateView,
} from "./types.js";

/** The session row the command names, or what to fetch, or session_not_found. */
export function sessionOf(
  view: StateView,
  sessionId: string,
): SessionRecord | { missing: [{ kind: "session"; sessionId: string }] } | { error: MachineError } {
  const session = view.session(sessionId);
  if (session === undefined) return { missing: [{ kind: "session", sessionId }] };
  if (session === null) {
    return { error: { code: "session_not_found", message: `unknown session ${JSON.stringify(sessionId)}` } };
  }
  return session;
}

/** A new session's row: ACTIVE, no calls, its budget's initial figure. */
function newSession(ids: RegisterIds, config: Config, nowNs: number): SessionRecord {
  return {
    ...ids,
    status: "ACTIVE",
    config,
    state: {
      circuit_tripped: false,
      total_calls: 0,
      session_started_ns: nowNs,
      ...(budgetEnabled(config) ? { budget_initial_usd: config.budget_usd } : {}),
    },
    call_count: 0,
    created_ns: nowNs,
    updated_ns: nowNs,
    last_heartbeat_ns: nowNs,
    at_seq: null,
  };
}

interface RegisterIds {
  session_id: string;
  agent_id: string;
  organization_id: string;
}

/** Registers a session (its account, its row, session_registered); an existing one of the agent resumes. */
export function register(
  view: StateView,
  command: RegisterCommand,
  env: Env,
): Outcome<{ session: SessionRecord; resumed: boolean }> {
  const ids = {
    session_id: command.sessionId ?? env.newId(),
    agent_id: command.agentId,
    organization_id: command.organizationId,
  };
  const existing = view.session(ids.session_id);
  if (existing === undefined) return { missing: [{ kind: "session", sessionId: ids.session_id }] };
  if (existing !== null) {
    if (existing.agent_id !== ids.agent_id) {
      return {
        error: { code: "session_exists", message: `session ${ids.session_id} belongs to another agent` },
      };
    }
    return { events: [], reply: { session: existing, resumed: true } }; // keeps its config and state
  }
  const row = newSession(ids, command.config, env.nowNs);
  const account = sessionAccountInput(command.config, ids, env.nowNs);
  const events: MachineEvent[] = [
    ...(account === null ? [] : [{ type: "ensure_account", input: account } as const]),
    { type: "session", row, insert: true },
    { type: "entry", kind: "session_registered", data: { ...ids, config: command.config } },
  ];
  return { events, reply: { session: row, resumed: false } };
}

/** An operator's reset of a tripped circuit. */
export function reset(view: StateView, command: ResetCommand, env: Env): Outcome<SessionRecord> {
  const session = sessionOf(view, command.sessionId);
  if ("missing" in session || "error" in session) return session;
  const state = resetCircuit(session.state);
  const next: SessionRecord = { ...session, status: state.status ?? "ACTIVE", state, updated_ns: env.nowNs };
  const data = {
    session_id: session.session_id,
    operator_id: command.operatorId,
    trip_reason: session.state.circuit_trip_reason ?? null,
  };
  return {
    events: [
      { type: "session", row: next },
      { type: "entry", kind: "circuit_reset", data },
    ],
    reply: next,
  };
}

/** An ACTIVE or PAUSED session whose last heartbeat is older than `staleAfterNs` goes STALE. */
export function markStale(
  view: StateView,
  command: MarkStaleCommand,
  env: Env,
): Outcome<SessionRecord | null> {
  const session = sessionOf(view, command.sessionId);
  if ("missing" in session || "error" in session) return session;
  if (session.status !== "ACTIVE" && session.status !== "PAUSED") return { events: [], reply: null };
  const nowNs = env.nowNs;
  const lastSeen = session.last_heartbeat_ns ?? session.created_ns;
  // A heartbeat landed meanwhile.
  if (command.staleAfterNs !== null && nowNs - lastSeen <= command.staleAfterNs)
    return { events: [], reply: null };
  const next: SessionRecord = { ...session, status: "STALE", updated_ns: nowNs };
  const data = {
    session_id: session.session_id,
    agent_id: session.agent_id,
    organization_id: session.organization_id,
    previous_status: session.status,
    last_heartbeat_ns: session.last_heartbeat_ns,
    last_seen_ns: lastSeen,
    heartbeat_interval_ms: command.heartbeatIntervalMs,
    missed_heartbeats: command.missedHeartbeats,
    now_ns: nowNs,
    reason: "heartbeat_timeout",
  };
  return {
    events: [
      { type: "session", row: next },
      { type: "entry", kind: "session_stale", data },
    ],
    reply: next,
  };
}

/**
 * Liveness: the heartbeat alone (no entry), so it never overwrites a row another writer holds. Coming
 * back from STALE is a state change, audited like going stale was (session_revived).
 */
export function heartbeat(view: StateView, command: HeartbeatCommand, env: Env): Outcome<SessionRecord> {
  const session = sessionOf(view, command.sessionId);
  if ("missing" in session || "error" in session) return session;
  const touch: MachineEvent = { type: "touch", sessionId: session.session_id, nowNs: env.nowNs };
  if (session.status !== "STALE") return { events: [touch], reply: session };
  const next: SessionRecord = { ...session, status: session.state.status === "PAUSED" ? "PAUSED" : "ACTIVE" };
  const entry: MachineEvent = {
    type: "entry",
    kind: "session_revived",
    data: { session_id: session.session_id },
  };
  return { events: [touch, { type: "session", row: next }, entry], reply: next };
}
