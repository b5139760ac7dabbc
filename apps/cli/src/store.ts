// Store URLs (`sqlite:PATH`, `postgres://…?schema=NAME`, `memory:`): parsing, redaction, opening and migrating.
// It holds no engine logic and picks no store on its own: resolveStoreUrl applies flag > env > config > default.
import { existsSync, rmSync } from "node:fs";
import { type Substrate, SubstrateError } from "@leash/core";
import { openStore as openEngineStore, redactStoreUrl, storeKindOf } from "@leash/engine";
import { LATEST_SCHEMA_VERSION, parsePostgresUrl } from "@leash/substrate-postgres";
import { parseSqliteUrl, SCHEMA_VERSION, type SqliteSubstrateOptions } from "@leash/substrate-sqlite";
import Database from "better-sqlite3";
import pg from "pg";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine } from "./io.js";

/** Where state lives when neither a flag, LEASH_STORE nor a config file says otherwise. */
export const DEFAULT_STORE = "sqlite:./leash.db";

export type StoreKind = "sqlite" | "postgres" | "memory";

export type StoreTarget =
  | {
      readonly kind: "sqlite";
      readonly url: string;
      readonly label: string;
      readonly options: SqliteSubstrateOptions;
    }
  | {
      readonly kind: "postgres";
      readonly url: string;
      readonly label: string;
      /** The URL without Leash's own parameters (`schema`, `group_commit`), as pg should see it. */
      readonly connection: string;
      readonly schema: string | undefined;
      /** `group_commit=off`: every transaction gets its own BEGIN … COMMIT. */
      readonly groupCommit: boolean;
    }
  | {
      readonly kind: "memory";
      readonly url: string;
      readonly label: string;
      readonly shared: string | undefined;
    };

const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;

export { redactStoreUrl };

/** The password as written and as decoded, so it can be scrubbed from driver messages too. */
function secretsOf(url: string): string[] {
  const secrets: string[] = [];
  const schemeEnd = url.indexOf("://");
  if (schemeEnd >= 0) {
    const rest = url.slice(schemeEnd + 3);
    const at = rest.lastIndexOf("@");
    const colon = at < 0 ? -1 : rest.slice(0, at).indexOf(":");
    if (colon >= 0) secrets.push(rest.slice(colon + 1, at));
  }
  for (const match of url.matchAll(/[?&]password=([^&#]*)/gi)) secrets.push(match[1]!);
  const all = secrets.flatMap((s) => {
    try {
      return [s, decodeURIComponent(s)];
    } catch {
      return [s];
    }
  });
  // Scrubbing a one- or two-letter password would garble every message that contains those letters.
  return [...new Set(all)].filter((s) => s.length >= 3);
}

/** A message that may quote the URL or the password, made safe to print. */
export function scrubSecrets(message: string, url: string): string {
  let out = message.split(url).join(redactStoreUrl(url));
  for (const secret of secretsOf(url)) out = out.split(secret).join("***");
  return out;
}

/** Reads a store URL; an unknown scheme or a malformed URL is a CliError (exit 2) naming the redacted URL. */
export function parseStoreUrl(url: string): StoreTarget {
  const label = redactStoreUrl(url);
  let kind: StoreKind;
  try {
    kind = storeKindOf(url); // the engine's scheme rules, so the CLI and openStore agree
  } catch (err) {
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  try {
    if (kind === "sqlite") return { kind, url, label, options: parseSqliteUrl(url) };
    if (kind === "postgres") {
      const { connection, schema, groupCommit } = parsePostgresUrl(url);
      return { kind, url, label, connection, schema, groupCommit: groupCommit ?? true };
    }
  } catch (err) {
    // The parsers' messages name the URL (a postgres one with its password redacted).
    throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
  }
  const name = url.slice("memory:".length);
  return { kind, url, label, shared: name === "" ? undefined : name };
}

function cannotOpen(target: StoreTarget, err: unknown): CliError {
  return new CliError(
    `cannot open store ${target.label}: ${scrubSecrets(firstLine(err), target.url)}`,
    EXIT_BAD_INPUT,
    {
      cause: err,
    },
  );
}

/** Opens the store without migrating it (through @leash/engine's openStore); every failure is one line naming the (redacted) URL. */
export async function connectStore(target: StoreTarget): Promise<Substrate> {
  try {
    return await openEngineStore(target.url, { migrate: false });
  } catch (err) {
    throw cannotOpen(target, err);
  }
}

/** Brings the schema up to date; a failure closes the store and names it. */
export async function migrateStore(target: StoreTarget, substrate: Substrate): Promise<void> {
  try {
    await substrate.migrate();
  } catch (err) {
    await substrate.close().catch(() => undefined);
    throw cannotOpen(target, err);
  }
}

/** Opens the store a URL names and brings its schema up to date (migrate is idempotent and cheap when current). */
export async function openStore(url: string): Promise<Substrate> {
  const target = parseStoreUrl(url);
  const substrate = await connectStore(target);
  await migrateStore(target, substrate);
  return substrate;
}

/**
 * Opens a store only to read it (verify, export): nothing is created or migrated. A SQLite file that
 * does not exist, or a store without the current schema, is an exit-2 error that says what to run.
 */
export async function openExistingStore(target: StoreTarget): Promise<Substrate> {
  if (target.kind === "memory") {
    const substrate = await connectStore(target);
    await migrateStore(target, substrate);
    return substrate;
  }
  if (target.kind === "sqlite" && !existsSync(target.options.path)) {
    throw new CliError(`no store at ${target.label}: the file does not exist`, EXIT_BAD_INPUT);
  }
  const version = await readSchemaVersion(target);
  const latest = latestSchemaVersion(target.kind);
  if (version === 0) {
    throw new CliError(`${target.label} holds no Leash store (no schema); nothing to read`, EXIT_BAD_INPUT);
  }
  if (version !== null && latest !== null && version < latest) {
    throw new CliError(
      `${target.label} is at schema version ${version}, this build reads ${latest}: run \`leash migrate\` first`,
      EXIT_BAD_INPUT,
    );
  }
  return connectStore(target);
}

/** The schema version the running build writes, or null for the memory store (which has none). */
export function latestSchemaVersion(kind: StoreKind): number | null {
  if (kind === "sqlite") return SCHEMA_VERSION;
  if (kind === "postgres") return LATEST_SCHEMA_VERSION;
  return null;
}

/**
 * The schema version a store is at (0 when Leash never migrated it). Read over a connection of its
 * own because Substrate.migrate() reports nothing; this knows the substrates' version-table names.
 */
export async function readSchemaVersion(target: StoreTarget): Promise<number | null> {
  try {
    if (target.kind === "sqlite") {
      if (!existsSync(target.options.path)) return 0;
      const db = new Database(target.options.path, { fileMustExist: true, timeout: 5000 });
      try {
        const table = db
          .prepare("SELECT 1 FROM sqlite_schema WHERE type = 'table' AND name = 'leash_schema_version'")
          .get();
        if (table === undefined) return 0;
        const row = db.prepare("SELECT MAX(version) AS version FROM leash_schema_version").get() as {
          version: number | null;
        };
        return row.version ?? 0;
      } finally {
        db.close();
      }
    }
    if (target.kind === "postgres") {
      const table =
        target.schema === undefined ? "leash_schema_version" : `"${target.schema}".leash_schema_version`;
      const client = new pg.Client({ connectionString: target.connection });
      client.on("error", () => undefined);
      await client.connect();
      try {
        const found = await client.query<{ t: string | null }>("SELECT to_regclass($1)::text AS t", [table]);
        if (found.rows[0]?.t == null) return 0;
        const { rows } = await client.query<{ v: number }>(
          `SELECT coalesce(max(version), 0)::integer AS v FROM ${table}`,
        );
        return rows[0]?.v ?? 0;
      } finally {
        await client.end().catch(() => undefined);
      }
    }
    return null;
  } catch (err) {
    throw cannotOpen(target, err);
  }
}

/** Removes a SQLite database with its WAL and shared-memory files (for `bench engine --fresh`). */
export function removeSqliteFiles(path: string): void {
  for (const suffix of ["", "-wal", "-shm", "-journal"]) rmSync(`${path}${suffix}`, { force: true });
}

/** Drops a postgres schema and everything in it (for `bench engine --fresh`). */
export async function dropPostgresSchema(connection: string, schema: string): Promise<void> {
  if (!IDENTIFIER.test(schema)) throw new TypeError(`not a plain schema name: ${JSON.stringify(schema)}`);
  const client = new pg.Client({ connectionString: connection });
  client.on("error", () => undefined);
  await client.connect();
  try {
    await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  } finally {
    await client.end().catch(() => undefined);
  }
}

/** Precedence: `--store` flag, then LEASH_STORE, then the config file's `store`, then sqlite:./leash.db. */
export function resolveStoreUrl(
  flag: string | undefined,
  env: Readonly<Record<string, string | undefined>>,
  fileStore: string | undefined,
): string {
  const fromEnv = env.LEASH_STORE;
  return (
    flag ?? (fromEnv !== undefined && fromEnv !== "" ? fromEnv : undefined) ?? fileStore ?? DEFAULT_STORE
  );
}

/** Storage failures after opening (busy, io, corrupt) as one line; the URL's password never shows. */
export function storeFailure(err: unknown, url: string): CliError | undefined {
  if (!SubstrateError.isInstance(err)) return undefined;
  return new CliError(`store error (${err.code}): ${scrubSecrets(firstLine(err), url)}`, EXIT_REFUSED, {
    cause: err,
  });
}
