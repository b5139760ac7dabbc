// Whose sessions a request may touch, and the settlements each session still has in flight: the two
// pieces of state the daemon's request handler keeps across requests. Not the RPCs themselves.
import type { Engine, SessionView } from "@leash/engine";
import { ErrorCode } from "@leash/wire";
import { type DaemonConfig, keyMayActAs } from "./config.js";
import type { AuthContext } from "./handler-types.js";
import { Refusal, requireSessionId } from "./handler-wire.js";

/** Whom a session belongs to: the organization and agent that registered it. */
export interface SessionOwner {
  readonly org: string;
  readonly agent: string;
}

const SESSIONS_REMEMBERED = 100_000;

/**
 * session id → its organization and agent: a request may only name a session of its own
 * organization whose agent its key may act as.
 */
export class SessionAccess {
  readonly #owners = new Map<string, SessionOwner>();
  readonly #engine: Engine;
  readonly #config: DaemonConfig;

  constructor(engine: Engine, config: DaemonConfig) {
    this.#engine = engine;
    this.#config = config;
  }

  ownerOf(sessionId: string): SessionOwner | undefined {
    return this.#owners.get(sessionId);
  }

  remember(sessionId: string, owner: SessionOwner): void {
    if (this.#owners.size >= SESSIONS_REMEMBERED) this.#owners.clear();
    this.#owners.set(sessionId, owner);
  }

  #mayTouch(owner: SessionOwner, auth: AuthContext): boolean {
    return (
      owner.org === auth.organizationId &&
      keyMayActAs(this.#config.organizations.get(owner.org), auth.keyId, owner.agent)
    );
  }

  /**
   * Refuses a session of another organization, or of an agent the request's key may not act as,
   * exactly as an unknown one (SESSION_NOT_FOUND), so no caller can learn or touch another's sessions.
   * Resolves with the session's view when it had to read it (null when the owner was already known).
   */
  async check(sessionId: string, auth: AuthContext): Promise<SessionView | null> {
    requireSessionId(sessionId);
    const known = this.#owners.get(sessionId);
    if (known !== undefined && this.#mayTouch(known, auth)) return null;
    const notFound = new Refusal(
      ErrorCode.SESSION_NOT_FOUND,
      "session_not_found",
      `unknown session ${JSON.stringify(sessionId.slice(0, 100))}`,
    );
    if (known !== undefined) throw notFound;
    const view = await this.#engine.getSession(sessionId);
    const owner = { org: view.organization_id, agent: view.agent_id };
    if (!this.#mayTouch(owner, auth)) throw notFound;
    this.remember(sessionId, owner);
    return view;
  }
}

/**
 * The settlements of each session still being written. A PreExec of that session waits for them, so
 * a settlement that arrived first is durable before the next decision reads the budget (the socket's
 * PostExec is fire-and-forget: without this, on PostgreSQL the two could commit in either order).
 */
export class Settlements {
  readonly #settling = new Map<string, Set<Promise<unknown>>>();

  /**
   * What a PreExec of the session must wait for: call it before the PreExec's first await, so only
   * settlements that arrived before the request count. Undefined when there are none.
   */
  before(sessionId: string): Promise<unknown> | undefined {
    const pending = this.#settling.get(sessionId);
    return pending === undefined ? undefined : Promise.allSettled([...pending]);
  }

  /** Tracks `settlement` until it settles; call it before the first await of the PostExec. */
  async track<T>(sessionId: string, settlement: Promise<T>): Promise<T> {
    const mine = this.#settling.get(sessionId) ?? new Set<Promise<unknown>>();
    this.#settling.set(sessionId, mine);
    mine.add(settlement);
    try {
      return await settlement;
    } finally {
      mine.delete(settlement);
      if (mine.size === 0 && this.#settling.get(sessionId) === mine) this.#settling.delete(sessionId);
    }
  }
}
