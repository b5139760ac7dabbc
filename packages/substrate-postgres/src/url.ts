// Reads `postgres://` store URLs: Leash's own parameters (`schema`, `group_commit`) come off, pg's stay.
// It connects to nothing; openPostgresSubstrate applies what it returns. Passwords never reach an error.
import { redactUrlPassword } from "@leash/core";

/** What a store URL says beyond pg's own connection string. */
export interface PostgresUrlOptions {
  /** The URL without Leash's parameters, byte for byte otherwise, as pg should see it. */
  readonly connection: string;
  readonly schema: string | undefined;
  /** `group_commit=off` in the URL; undefined when the URL does not say. */
  readonly groupCommit: boolean | undefined;
}

const SCHEME = /^postgres(ql)?:\/\//i;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;

/**
 * The query parameters pg (pg-connection-string and pg's ConnectionParameters) reads. Anything
 * else would be dropped silently by pg, so a typo (`?shema=`) would write into `public`: refuse it.
 */
const PG_PARAMETERS = new Set([
  "host",
  "port",
  "user",
  "password",
  "db",
  "database",
  "encoding",
  "client_encoding",
  "application_name",
  "fallback_application_name",
  "options",
  "ssl",
  "sslmode",
  "sslcert",
  "sslkey",
  "sslrootcert",
  "sslnegotiation",
  "uselibpqcompat",
  "connect_timeout",
  "keepalives",
  "keepalives_idle",
  "statement_timeout",
  "query_timeout",
  "lock_timeout",
  "idle_in_transaction_session_timeout",
  "replication",
  "target_session_attrs",
]);

function invalid(url: string, why: string): TypeError {
  return new TypeError(`Invalid PostgreSQL store URL ${redactUrlPassword(url)}: ${why}`);
}

/**
 * Splits a `postgres://` or `postgresql://` URL into pg's connection string and Leash's options:
 * `schema=NAME` (a plain identifier of at most 63 characters) and `group_commit=on|off`.
 * @throws TypeError for another scheme, a malformed URL, a bad value, a parameter given twice, or a
 *   parameter neither Leash nor pg knows.
 */
export function parsePostgresUrl(url: string): PostgresUrlOptions {
  if (!SCHEME.test(url)) throw invalid(url, "expected the postgres:// or postgresql:// scheme");
  const queryAt = url.indexOf("?");
  const hashAt = url.indexOf("#", Math.max(queryAt, 0));
  const base = url.slice(0, queryAt < 0 ? (hashAt < 0 ? undefined : hashAt) : queryAt);
  const query = queryAt < 0 ? "" : url.slice(queryAt + 1, hashAt < 0 ? undefined : hashAt);
  let schema: string | undefined;
  let groupCommit: boolean | undefined;
  const kept: string[] = [];
  for (const part of query.split("&")) {
    if (part === "") continue;
    const [name, value] = new URLSearchParams(part).entries().next().value ?? ["", ""];
    if (name === "schema") {
      if (schema !== undefined) throw invalid(url, "`schema` is given twice");
      if (!IDENTIFIER.test(value) || value.length > 63) {
        throw invalid(
          url,
          `schema must be a plain identifier of at most 63 characters, got ${JSON.stringify(value)}`,
        );
      }
      schema = value;
    } else if (name === "group_commit") {
      if (groupCommit !== undefined) throw invalid(url, "`group_commit` is given twice");
      if (value !== "on" && value !== "off") {
        throw invalid(url, `group_commit must be on or off, got ${JSON.stringify(value)}`);
      }
      groupCommit = value === "on";
    } else if (PG_PARAMETERS.has(name)) {
      kept.push(part);
    } else {
      throw invalid(url, `unknown parameter ${JSON.stringify(name)} (Leash reads schema and group_commit)`);
    }
  }
  const connection = kept.length > 0 ? `${base}?${kept.join("&")}` : base;
  try {
    new URL(connection);
  } catch {
    throw invalid(url, "not a valid URL (percent-encode special characters in the password)");
  }
  return { connection, schema, groupCommit };
}
