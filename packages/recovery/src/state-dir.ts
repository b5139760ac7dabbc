// Where a Leash process keeps, outside its store, the last head it signed: one checkpoint file per store
// in a state directory (default $XDG_STATE_HOME/leash). It reads no store and judges no chain.
import { createHash } from "node:crypto";
import { mkdirSync, realpathSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { type CheckpointStore, fileCheckpointStore } from "./checkpoint.js";
import { RecoveryError } from "./errors.js";

/** `$LEASH_STATE_DIR`, else `$XDG_STATE_HOME/leash`, else `~/.local/state/leash`. */
export function defaultStateDir(env: NodeJS.ProcessEnv = process.env): string {
  const own = env.LEASH_STATE_DIR;
  if (own !== undefined && own !== "") return resolve(own);
  const xdg = env.XDG_STATE_HOME;
  // The XDG spec ignores a relative XDG_STATE_HOME.
  if (xdg?.startsWith("/")) return join(xdg, "leash");
  return join(homedir(), ".local", "state", "leash");
}

/** An absolute path with the directory's symlinks resolved (the file itself may not exist yet). */
function canonicalPath(path: string): string {
  const absolute = resolve(path);
  try {
    return realpathSync(absolute);
  } catch {
    try {
      return join(realpathSync(dirname(absolute)), basename(absolute));
    } catch {
      return absolute;
    }
  }
}

/**
 * What names one store's data, whichever URL spelling reaches it: the SQLite file's real path, or
 * PostgreSQL's host, port, database and schema (not the user, the password or pg's options).
 * Null for `memory:` stores, which nothing can restore.
 */
export function storeIdentity(url: string): string | null {
  if (/^memory:/i.test(url)) return null;
  if (/^sqlite:/i.test(url)) {
    let rest = url.slice("sqlite:".length);
    const query = rest.indexOf("?");
    if (query >= 0) rest = rest.slice(0, query);
    if (rest.startsWith("//")) {
      const slash = rest.indexOf("/", 2);
      rest = slash < 0 ? "" : rest.slice(slash);
    }
    return `sqlite:${canonicalPath(decodeURIComponent(rest))}`;
  }
  if (/^postgres(ql)?:\/\//i.test(url)) {
    const parsed = new URL(url);
    const host = parsed.hostname.toLowerCase() || "localhost";
    const db = decodeURIComponent(parsed.pathname.replace(/^\//, "")) || "postgres";
    const schema = parsed.searchParams.get("schema") ?? "public";
    return `postgres://${host}:${parsed.port || "5432"}/${db}?schema=${schema}`;
  }
  throw new RecoveryError(
    "invalid_argument",
    `no state can be kept for store URL scheme of ${url.split(":")[0]}`,
  );
}

/**
 * The checkpoint file for the store `url` names, in `stateDir` (created, mode 0700, when missing):
 * `checkpoint-<first 16 hex of SHA-256 of the store's identity>.json`. Null for memory stores.
 */
export function stateCheckpointStore(stateDir: string, url: string): CheckpointStore | null {
  const identity = storeIdentity(url);
  if (identity === null) return null;
  const dir = resolve(stateDir);
  try {
    mkdirSync(dir, { recursive: true, mode: 0o700 });
  } catch (error) {
    throw new RecoveryError("invalid_argument", `cannot keep state in ${dir}: ${(error as Error).message}`, {
      cause: error,
    });
  }
  const id = createHash("sha256").update(identity).digest("hex").slice(0, 16);
  return fileCheckpointStore(join(dir, `checkpoint-${id}.json`));
}
