// The session calls: register, read, an operator's reset, heartbeats and going stale. Each is one
// machine command (@leash/machine) in a write transaction; this module judges nothing itself.
import { available } from "@leash/budget-guard";
import type { SessionRecord, SubstrateTx } from "@leash/core";
import { validateConfig } from "@leash/core/schema";
import { budgetEnabled, type MarkStaleCommand, type RegisterCommand, sessionAccountId } from "@leash/machine";
import { LeashError } from "../errors.js";
import type { RegisterRequest, SessionView } from "../types.js";
import type { EngineContext } from "./context.js";
import { checkSessionId } from "./evaluate-call.js";
import { runCommand } from "./run.js";

/** markStale's options (Engine.markStale). */
export interface StaleOptions {
  staleAfterNs: number;
  heartbeatIntervalMs?: number;
  missedHeartbeats?: number;
}

export async function loadSession(tx: SubstrateTx, sessionId: string): Promise<SessionRecord> {
  checkSessionId(sessionId);
  const session = await tx.sessions.get(sessionId);
  if (session === null)
    throw new LeashError("session_not_found", `unknown session ${JSON.stringify(sessionId)}`);
  return session;
}

async function remainingOf(tx: SubstrateTx, session: SessionRecord): Promise<string | null> {
  if (!budgetEnabled(session.config)) return null;
  return (await available(tx, sessionAccountId(session.config, session))).toFixed();
}

/** The session as the API returns it, with what its budget has left. */
export async function sessionView(tx: SubstrateTx, session: SessionRecord): Promise<SessionView> {
  return {
    session_id: session.session_id,
    agent_id: session.agent_id,
    organization_id: session.organization_id,
    status: session.status,
    config: session.config,
    state: session.state,
    call_count: session.call_count,
    budget_remaining_usd: await remainingOf(tx, session),
  };
}

export async function register(ctx: EngineContext, request: RegisterRequest): Promise<SessionView> {
  const { clock, auditor } = ctx;
  const config = validateConfig(request.config);
  if (!config.ok) throw new LeashError("config_invalid", `invalid guard config: ${config.errors.join("; ")}`);
  if (typeof request.agent_id !== "string" || request.agent_id === "") {
    throw new LeashError("invalid_argument", "agent_id must be a non-empty string");
  }
  return ctx.transaction(async (tx) => {
    const command: RegisterCommand = {
      kind: "register",
      sessionId: request.session_id ?? null,
      agentId: request.agent_id,
      organizationId: request.organization_id ?? "default",
      config: config.value,
    };
    const { reply } = await runCommand<{ session: SessionRecord }>(
      tx,
      auditor,
      command,
      ctx.envAt(clock.nowNs()),
    );
    return sessionView(tx, reply.session);
  });
}

export function getSession(ctx: EngineContext, sessionId: string): Promise<SessionView> {
  const { substrate } = ctx;
  // A read: it decides and appends nothing, so it needs no verified chain (read-only tools use it
  // without any trusted key); what it returns is the snapshot, which `leash verify --replay` checks.
  return substrate.transaction(async (tx) => sessionView(tx, await loadSession(tx, sessionId)));
}

export function reset(ctx: EngineContext, sessionId: string, operatorId: string): Promise<SessionView> {
  const { clock, auditor } = ctx;
  if (typeof operatorId !== "string" || operatorId === "") {
    return Promise.reject(
      new LeashError("invalid_argument", "an operator id is required to reset a circuit"),
    );
  }
  return ctx.transaction(async (tx) => {
    checkSessionId(sessionId);
    const command = { kind: "reset", sessionId, operatorId } as const;
    const { reply } = await runCommand<SessionRecord>(tx, auditor, command, ctx.envAt(clock.nowNs()));
    return sessionView(tx, reply);
  });
}

export function heartbeat(ctx: EngineContext, sessionId: string): Promise<void> {
  const { clock, auditor } = ctx;
  return ctx.transaction(async (tx) => {
    checkSessionId(sessionId);
    await runCommand(tx, auditor, { kind: "heartbeat", sessionId }, ctx.envAt(clock.nowNs()));
  });
}

export function markStale(
  ctx: EngineContext,
  sessionId: string,
  options: StaleOptions,
): Promise<{ entry_seq: number; entry_hash: string } | null> {
  const { clock, auditor } = ctx;
  return ctx.transaction(async (tx) => {
    checkSessionId(sessionId);
    const command: MarkStaleCommand = {
      kind: "mark_stale",
      sessionId,
      staleAfterNs: options.staleAfterNs,
      heartbeatIntervalMs: options.heartbeatIntervalMs ?? null,
      missedHeartbeats: options.missedHeartbeats ?? null,
    };
    const { entries } = await runCommand(tx, auditor, command, ctx.envAt(clock.nowNs()));
    const entry = entries[0];
    return entry === undefined ? null : { entry_seq: entry.seq, entry_hash: entry.entry_hash };
  });
}
