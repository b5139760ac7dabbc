// decide(view, command, env): the state machine's one entry point, pure and synchronous. The engine runs
// it live (fetching what it reports missing, then calling again); the replay folds every entry through it.
import { evaluate } from "./evaluate.js";
import { answer, expireRequest } from "./hitl.js";
import { heartbeat, markStale, register, reset, sessionOf } from "./sessions.js";
import type { Command, Env, Outcome, StateView } from "./types.js";

/** The events and reply of one command, or the keys to fetch first, or a refusal. */
export function decide(view: StateView, command: Command, env: Env): Outcome<unknown> {
  switch (command.kind) {
    case "evaluate":
      return evaluate(view, command, env);
    case "expire": {
      const session = sessionOf(view, command.sessionId);
      if ("missing" in session || "error" in session) return session;
      return expireRequest(view, session, command.requestId, env.nowNs);
    }
    case "answer":
      return answer(view, command, env);
    case "register":
      return register(view, command, env);
    case "reset":
      return reset(view, command, env);
    case "mark_stale":
      return markStale(view, command, env);
    case "heartbeat":
      return heartbeat(view, command, env);
  }
}
