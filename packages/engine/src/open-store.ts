// openStore(url): a migrated Substrate for `sqlite:PATH`, `postgres://…[?schema=NAME]` or `memory:[NAME]`.
// It loads only the substrate package the URL names (an optional peer dependency); it holds no engine logic.
import { redactUrlPassword, type Substrate } from "@leash/core";
import { LeashError } from "./errors.js";

export interface OpenStoreOptions {
  /** Bring the schema up to date before returning (default true; migrate is idempotent and cheap when current). */
  readonly migrate?: boolean;
}

/** The store kinds a URL can name, and what each needs installed beside @leash/engine. */
const DRIVERS = {
  sqlite: { substrate: "@leash/substrate-sqlite", driver: "better-sqlite3" },
  postgres: { substrate: "@leash/substrate-postgres", driver: "pg" },
  memory: { substrate: "@leash/substrate-memory", driver: undefined },
} as const;

export type StoreKind = keyof typeof DRIVERS;

/** The kind of store a URL names, or a LeashError (invalid_argument) for any other scheme. */
export function storeKindOf(url: string): StoreKind {
  if (/^sqlite:/i.test(url)) return "sqlite";
  if (/^postgres(ql)?:\/\//i.test(url)) return "postgres";
  if (/^memory:/i.test(url)) return "memory";
  throw new LeashError(
    "invalid_argument",
    `unknown store URL scheme in ${redactStoreUrl(url)}: expected sqlite:PATH, postgres://… (or postgresql://…) or memory:`,
  );
}

/** The URL with any password replaced by `***`, for messages and logs. */
export const redactStoreUrl: (url: string) => string = redactUrlPassword;

/**
 * Imports a store's package on demand. A missing substrate or driver is one line that says what to
 * install, instead of Node's resolution error from deep inside.
 */
async function load<T>(kind: StoreKind, importer: () => Promise<T>): Promise<T> {
  try {
    return await importer();
  } catch (error) {
    const { substrate, driver } = DRIVERS[kind];
    const code = (error as { code?: unknown } | null)?.code;
    const message = error instanceof Error ? error.message : "";
    const missing = [substrate, driver].find(
      (name) =>
        name !== undefined &&
        (code === "ERR_MODULE_NOT_FOUND" || code === "MODULE_NOT_FOUND") &&
        message.includes(`'${name}'`),
    );
    if (missing === undefined) throw error;
    const install = [substrate, driver].filter((name) => name !== undefined).join(" ");
    throw new LeashError(
      "missing_dependency",
      `${kind} stores need ${missing}, which is not installed: npm install ${install}`,
      { cause: error },
    );
  }
}

function badUrl(url: string, error: unknown): LeashError {
  const why = error instanceof Error ? error.message : String(error);
  // The substrates' URL parsers already name the (redacted) URL; keep their words.
  return new LeashError(
    "invalid_argument",
    why.includes("URL") ? why : `bad store URL ${redactStoreUrl(url)}: ${why}`,
    {
      cause: error,
    },
  );
}

/**
 * Opens the store a URL names and, unless `migrate: false`, brings its schema up to date. The same
 * URL parameters work here as on the CLI's `--store` (sqlite: busy_timeout, synchronous, group_commit,
 * mmap_size, background_checkpoints, checkpoint_restart_frames; postgres: schema, group_commit and pg's
 * own); an unknown parameter is an error, never ignored. The caller closes the store.
 */
export async function openStore(url: string, options: OpenStoreOptions = {}): Promise<Substrate> {
  const kind = storeKindOf(url);
  let substrate: Substrate;
  if (kind === "sqlite") {
    const sqlite = await load(kind, () => import("@leash/substrate-sqlite"));
    let parsed: ReturnType<typeof sqlite.parseSqliteUrl>;
    try {
      parsed = sqlite.parseSqliteUrl(url);
    } catch (error) {
      throw badUrl(url, error);
    }
    substrate = await sqlite.openSqliteSubstrate(parsed);
  } else if (kind === "postgres") {
    const postgres = await load(kind, () => import("@leash/substrate-postgres"));
    try {
      postgres.parsePostgresUrl(url);
    } catch (error) {
      throw badUrl(url, error);
    }
    substrate = await postgres.openPostgresSubstrate({ url });
  } else {
    const memory = await load(kind, () => import("@leash/substrate-memory"));
    const name = url.slice("memory:".length);
    substrate = memory.createMemorySubstrate(name === "" ? {} : { shared: name });
  }
  if (options.migrate !== false) {
    try {
      await substrate.migrate();
    } catch (error) {
      await substrate.close().catch(() => undefined);
      throw error;
    }
  }
  return substrate;
}
