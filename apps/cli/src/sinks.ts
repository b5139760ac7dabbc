// `--sink` specs for `leash relay`: file:PATH, http(s)://…, postgres://…[?schema=S&table=T], stdout.
// It parses and opens sinks and turns their failures into one-line CliErrors; delivery is @leash/relay's.
import { Writable } from "node:stream";
import { fileURLToPath } from "node:url";
import { createStdoutSink, createWebhookSink, openFileSink, RelayError, type Sink } from "@leash/relay";
import { openPostgresSink } from "@leash/relay/postgres";
import { CliError, EXIT_BAD_INPUT, firstLine, type Io } from "./io.js";
import { redactStoreUrl, scrubSecrets } from "./store.js";

/** The environment variable that holds the webhook's HMAC secret unless --webhook-secret-env names another. */
export const WEBHOOK_SECRET_ENV = "LEASH_WEBHOOK_SECRET";

export type SinkSpec =
  | { readonly kind: "file"; readonly path: string }
  | { readonly kind: "webhook"; readonly url: string }
  | {
      readonly kind: "postgres";
      /** The URL as given (for scrubbing messages). */
      readonly url: string;
      /** The URL without `schema=` and `table=`, as pg should see it. */
      readonly connection: string;
      readonly schema: string | undefined;
      readonly table: string | undefined;
    }
  | { readonly kind: "stdout" };

export const SINK_FORMS =
  "file:PATH, http(s)://URL (a webhook), postgres://USER@HOST/DB[?schema=S&table=T] or stdout";

const POSTGRES = /^postgres(ql)?:\/\//i;
const IDENTIFIER = /^[A-Za-z_][A-Za-z0-9_$]*$/;

function badSink(spec: string, problem: string): CliError {
  return new CliError(`bad --sink ${redactStoreUrl(spec)}: ${problem}`, EXIT_BAD_INPUT);
}

/** Takes `schema=` and `table=` off a postgres URL's query; every other parameter stays for pg, byte for byte. */
function splitPostgres(spec: string): SinkSpec & { kind: "postgres" } {
  const queryAt = spec.indexOf("?");
  const found: { schema?: string; table?: string } = {};
  let connection = spec;
  if (queryAt >= 0) {
    const hashAt = spec.indexOf("#", queryAt);
    const kept: string[] = [];
    for (const part of spec.slice(queryAt + 1, hashAt < 0 ? undefined : hashAt).split("&")) {
      const [name, value] = new URLSearchParams(part).entries().next().value ?? ["", ""];
      if (name === "schema" || name === "table") {
        if (found[name] !== undefined) throw badSink(spec, `\`${name}\` is given twice`);
        if (!IDENTIFIER.test(value) || value.length > 63) {
          throw badSink(
            spec,
            `${name} must be a plain identifier of at most 63 characters, got ${JSON.stringify(value)}`,
          );
        }
        found[name] = value;
      } else if (part !== "") kept.push(part);
    }
    connection = `${spec.slice(0, queryAt)}${kept.length > 0 ? `?${kept.join("&")}` : ""}`;
  }
  try {
    new URL(connection);
  } catch {
    throw badSink(spec, "not a valid URL (percent-encode special characters in the password)");
  }
  return { kind: "postgres", url: spec, connection, schema: found.schema, table: found.table };
}

/** Reads a --sink value; anything that is none of the four forms is a CliError (exit 2). */
export function parseSinkSpec(spec: string): SinkSpec {
  if (spec === "stdout") return { kind: "stdout" };
  if (/^file:/i.test(spec)) {
    let path = spec.slice("file:".length);
    if (path.startsWith("//")) {
      try {
        path = fileURLToPath(spec);
      } catch (err) {
        throw badSink(spec, firstLine(err));
      }
    }
    if (path === "") throw badSink(spec, "give the NDJSON file's path, as in file:./audit.ndjson");
    return { kind: "file", path };
  }
  if (/^https?:\/\//i.test(spec)) {
    let url: URL;
    try {
      url = new URL(spec);
    } catch {
      throw badSink(spec, "not a valid URL");
    }
    // fetch refuses such URLs on every request, which would look like an endpoint that is always down.
    if (url.username !== "" || url.password !== "") {
      throw badSink(
        spec,
        "a webhook URL cannot carry credentials (user:password@); the HMAC signature authenticates the relay",
      );
    }
    return { kind: "webhook", url: spec };
  }
  if (POSTGRES.test(spec)) return splitPostgres(spec);
  throw badSink(spec, `expected ${SINK_FORMS}`);
}

/** The webhook's HMAC secret from the environment; the webhook sink refuses to run without one. */
export function webhookSecret(io: Io, envName: string | undefined): string {
  const name = envName ?? WEBHOOK_SECRET_ENV;
  const secret = io.env[name];
  if (secret === undefined || secret === "") {
    const other = envName === undefined ? " (or name another variable with --webhook-secret-env)" : "";
    throw new CliError(
      `the webhook sink signs every request with an HMAC secret: set ${name}${other}`,
      EXIT_BAD_INPUT,
    );
  }
  return secret;
}

/** A Writable over io.stdout, so the stdout sink writes where the rest of the CLI does (and tests can read it). */
function ioStdout(io: Io): Writable {
  return new Writable({
    decodeStrings: false,
    write(chunk: string | Buffer, _encoding, done) {
      try {
        io.stdout(typeof chunk === "string" ? chunk : chunk.toString("utf8"));
        done();
      } catch (err) {
        done(err as Error);
      }
    },
  });
}

function cannotOpen(name: string, err: unknown, url?: string): CliError {
  const text = firstLine(err);
  return new CliError(
    `cannot open sink ${name}: ${url === undefined ? text : scrubSecrets(text, url)}`,
    EXIT_BAD_INPUT,
    {
      cause: err,
    },
  );
}

const FS_PROBLEMS: Record<string, string> = {
  ENOENT: "no such directory",
  EACCES: "permission denied",
  EPERM: "permission denied",
  EISDIR: "is a directory",
  ENOTDIR: "a path component is not a directory",
};

/**
 * Opens the sink a spec names: the file is scanned for the entry ids it holds, the postgres table is
 * created when absent. Every failure is a one-line CliError (exit 2) naming the sink, never its secrets.
 */
export async function openSink(spec: SinkSpec, io: Io, secret: string | undefined): Promise<Sink> {
  switch (spec.kind) {
    case "stdout":
      return createStdoutSink({ stream: ioStdout(io) });
    case "file":
      try {
        return await openFileSink({ path: spec.path });
      } catch (err) {
        const code = (err as { code?: unknown }).code;
        if (typeof code === "string" && FS_PROBLEMS[code] !== undefined) {
          throw new CliError(`cannot open sink file:${spec.path}: ${FS_PROBLEMS[code]}`, EXIT_BAD_INPUT, {
            cause: err,
          });
        }
        throw cannotOpen(`file:${spec.path}`, err);
      }
    case "webhook":
      try {
        return createWebhookSink({ url: spec.url, secret: secret ?? "" });
      } catch (err) {
        if (RelayError.isInstance(err)) throw badSink(spec.url, firstLine(err));
        throw err;
      }
    case "postgres":
      try {
        return await openPostgresSink({ url: spec.connection, schema: spec.schema, table: spec.table });
      } catch (err) {
        throw cannotOpen(redactStoreUrl(spec.connection), err, spec.url);
      }
  }
}
