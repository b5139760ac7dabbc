// The console's signed-in browsers: a random id in an HttpOnly cookie maps to a token's operator, and a
// request is whoever its bearer token or cookie names. Not the tokens file, nor the HTTP routes.
import { randomBytes } from "node:crypto";
import type { IncomingMessage } from "node:http";
import { type ConsoleToken, type Operator, operatorOf } from "./tokens.js";

export const COOKIE = "leash_console";
export const LOGIN_TTL_MS = 12 * 3600_000;
/** Browser sessions one token may hold; its oldest is signed out past that (never another token's). */
export const LOGINS_PER_TOKEN = 16;

function cookieOf(request: IncomingMessage): string | undefined {
  for (const part of (request.headers.cookie ?? "").split(";")) {
    const [name, ...rest] = part.trim().split("=");
    if (name === COOKIE) return rest.join("=");
  }
  return undefined;
}

function bearerOf(request: IncomingMessage): string | undefined {
  const header = request.headers.authorization;
  return header?.startsWith("Bearer ") ? header.slice(7).trim() : undefined;
}

export class ConsoleLogins {
  /** Signed-in browsers: a random id in an HttpOnly cookie → the token's operator (the raw token is not kept). */
  readonly #logins = new Map<string, { operator: Operator; until: number }>();
  /** Each token's signed-in session ids, oldest first: a token's sign-ins evict only its own. */
  readonly #loginsOf = new Map<string, string[]>();
  readonly #tokens: readonly ConsoleToken[];

  constructor(tokens: readonly ConsoleToken[]) {
    this.#tokens = tokens;
  }

  /** Signs the operator in: the id its cookie carries. */
  add(operator: Operator): string {
    const logins = this.#logins;
    const now = Date.now();
    const mine = (this.#loginsOf.get(operator.token) ?? []).filter((id) => {
      const login = logins.get(id);
      if (login !== undefined && login.until >= now) return true;
      logins.delete(id);
      return false;
    });
    while (mine.length >= LOGINS_PER_TOKEN) logins.delete(mine.shift()!);
    const id = randomBytes(32).toString("base64url");
    logins.set(id, { operator, until: now + LOGIN_TTL_MS });
    mine.push(id);
    this.#loginsOf.set(operator.token, mine);
    return id;
  }

  /** The operator a request speaks for (its bearer token, else its sign-in cookie), or null. */
  operatorFor(request: IncomingMessage): Operator | null {
    const bearer = bearerOf(request);
    if (bearer !== undefined) return operatorOf(this.#tokens, bearer);
    const id = cookieOf(request);
    const login = id === undefined ? undefined : this.#logins.get(id);
    if (login === undefined) return null;
    if (login.until < Date.now()) {
      this.#logins.delete(id!);
      return null;
    }
    return login.operator;
  }
}
