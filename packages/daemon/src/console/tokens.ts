// Console operator tokens: the tokens file (token → operator identity, stored as SHA-256), constant-time
// lookup, and minting a new token. It does not serve HTTP (console/server.ts) and never stores a raw token.
import { createHash, randomBytes, timingSafeEqual } from "node:crypto";
import { readFileSync, writeFileSync } from "node:fs";
import { LeashBaseError } from "@leash/core";
import { looseSecretProblem } from "../secret-file.js";

export type ConsoleConfigErrorCode =
  | "console_tokens_invalid"
  | "console_tokens_unreadable"
  /** The tokens file is open to group or others (chmod 600). */
  | "console_tokens_permissions"
  | "console_listen_invalid"
  | "console_insecure";

/** A console set-up the daemon refuses to start with (a flag or tokens-file problem). */
export class ConsoleConfigError extends LeashBaseError<ConsoleConfigErrorCode> {
  static override readonly marker = Symbol.for("leash.daemon.ConsoleConfigError");
  override name = "ConsoleConfigError";
}

export interface ConsoleToken {
  /** SHA-256 of the token's UTF-8 text, 64 lowercase hex. */
  readonly sha256: string;
  /** Who answers with this token: the operator id the chain records. */
  readonly operator: string;
  /** Sees the queue, cannot answer. */
  readonly readonly: boolean;
  /** The organizations whose requests this token lists, shows and answers; ["*"]: every one. */
  readonly organizations: readonly string[];
}

export interface Operator {
  readonly id: string;
  readonly readonly: boolean;
  readonly organizations: readonly string[];
  /** The token's SHA-256: whose browser sessions a sign-in counts against. */
  readonly token: string;
}

/** Every organization, for a token that names `*` (a single-tenant daemon's operators). */
export const ALL_ORGANIZATIONS = "*";

/** Whether `operator`'s token covers the organization `organizationId` (an unknown owner: only `*`). */
export function covers(operator: Pick<Operator, "organizations">, organizationId: string): boolean {
  if (operator.organizations.includes(ALL_ORGANIZATIONS)) return true;
  return organizationId !== "" && operator.organizations.includes(organizationId);
}

const HEX64 = /^[0-9a-f]{64}$/;
const OPERATOR = /^[A-Za-z0-9._@:+-]{1,128}$/;

/**
 * Parses a tokens file: `{"tokens":[{"sha256":"…","operator":"alice","readonly":false,"organizations":["acme"]}, …]}`.
 * Every token names its organizations (`["*"]` for all): a token that names none is refused, never
 * read as "every organization".
 */
export function parseConsoleTokens(text: string, source = "the tokens file"): ConsoleToken[] {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch (error) {
    throw new ConsoleConfigError(
      "console_tokens_invalid",
      `${source} is not JSON: ${(error as Error).message}`,
    );
  }
  const list = (value as { tokens?: unknown } | null)?.tokens;
  if (!Array.isArray(list))
    throw new ConsoleConfigError("console_tokens_invalid", `${source} needs a "tokens" array`);
  const seen = new Set<string>();
  return list.map((entry, i) => {
    const e = (entry ?? {}) as Record<string, unknown>;
    const at = `${source}: tokens[${i}]`;
    if (typeof e.sha256 !== "string" || !HEX64.test(e.sha256)) {
      throw new ConsoleConfigError(
        "console_tokens_invalid",
        `${at}.sha256 must be 64 lowercase hex (SHA-256 of the token)`,
      );
    }
    if (typeof e.operator !== "string" || !OPERATOR.test(e.operator)) {
      throw new ConsoleConfigError(
        "console_tokens_invalid",
        `${at}.operator must be 1–128 characters of letters, digits and ._@:+-`,
      );
    }
    if (e.readonly !== undefined && typeof e.readonly !== "boolean") {
      throw new ConsoleConfigError("console_tokens_invalid", `${at}.readonly must be true or false`);
    }
    const orgs = e.organizations;
    if (
      !Array.isArray(orgs) ||
      orgs.length === 0 ||
      !orgs.every((o) => typeof o === "string" && o.trim() !== "" && o.length <= 256)
    ) {
      throw new ConsoleConfigError(
        "console_tokens_invalid",
        `${at}.organizations must list the organizations the token may see and answer (e.g. ["acme"], or ["*"] for every one)`,
      );
    }
    if (seen.has(e.sha256)) throw new ConsoleConfigError("console_tokens_invalid", `${at} repeats a token`);
    seen.add(e.sha256);
    return {
      sha256: e.sha256,
      operator: e.operator,
      readonly: e.readonly === true,
      organizations: [...new Set(orgs as string[])],
    };
  });
}

export function loadConsoleTokens(path: string): ConsoleToken[] {
  let text: string;
  try {
    const loose = looseSecretProblem(path);
    if (loose !== null)
      throw new ConsoleConfigError("console_tokens_permissions", `the console tokens file ${loose}`);
    text = readFileSync(path, "utf8");
  } catch (error) {
    if (ConsoleConfigError.isInstance(error)) throw error;
    throw new ConsoleConfigError(
      "console_tokens_unreadable",
      `cannot read the console tokens file ${path}: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
    );
  }
  return parseConsoleTokens(text, path);
}

export const tokenHash = (token: string): string => createHash("sha256").update(token, "utf8").digest("hex");

/**
 * The operator a presented token names, or null. Every entry is compared, each in constant time, so
 * the time taken says nothing about which entry (or how much of one) matched.
 */
export function operatorOf(
  tokens: readonly ConsoleToken[],
  presented: string | undefined | null,
): Operator | null {
  if (typeof presented !== "string" || presented === "" || presented.length > 512) return null;
  const digest = Buffer.from(tokenHash(presented), "hex");
  let found: ConsoleToken | null = null;
  for (const t of tokens) {
    if (timingSafeEqual(digest, Buffer.from(t.sha256, "hex")) && found === null) found = t;
  }
  return found === null
    ? null
    : {
        id: found.operator,
        readonly: found.readonly,
        organizations: found.organizations,
        token: found.sha256,
      };
}

/** A fresh token (shown once; only its hash is kept). */
export const newConsoleToken = (): string => `lct_${randomBytes(32).toString("base64url")}`;

/**
 * Adds an operator to a tokens file (created when absent) and returns the new token. Refuses an
 * operator name the file cannot hold; an existing file that does not parse is left as it was.
 */
export function addConsoleToken(
  path: string,
  operator: string,
  readonly: boolean,
  organizations: readonly string[],
): string {
  let existing: ConsoleToken[] = [];
  try {
    existing = loadConsoleTokens(path);
  } catch (error) {
    if (!(ConsoleConfigError.isInstance(error) && error.code === "console_tokens_unreadable")) throw error;
  }
  const token = newConsoleToken();
  const next = [...existing, { sha256: tokenHash(token), operator, readonly, organizations }];
  parseConsoleTokens(JSON.stringify({ tokens: next }), path); // checks the new entry before writing
  writeFileSync(path, `${JSON.stringify({ tokens: next }, null, 2)}\n`, { mode: 0o600 });
  return token;
}
