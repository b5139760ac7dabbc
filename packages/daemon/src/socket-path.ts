// Where the daemon listens and the client connects when neither is told: one rule for both sides.
// A path only; nothing is created here.
import { join } from "node:path";

/**
 * `$LEASH_SOCKET`, else `$XDG_RUNTIME_DIR/leash.sock` (a per-user directory only its owner can enter),
 * else `/tmp/leash-$UID.sock`.
 */
export function defaultSocketPath(env: NodeJS.ProcessEnv = process.env): string {
  if (env.LEASH_SOCKET) return env.LEASH_SOCKET;
  if (env.XDG_RUNTIME_DIR) return join(env.XDG_RUNTIME_DIR, "leash.sock");
  const uid = typeof process.getuid === "function" ? process.getuid() : "user";
  return `/tmp/leash-${uid}.sock`;
}
