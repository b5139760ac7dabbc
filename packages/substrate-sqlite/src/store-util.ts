// What every SQLite store shares: its not-found error and its limit on listed rows. No SQL lives here.

import { SubstrateError } from "@leash/core";
import { checkedInteger } from "./codec.js";

export function notFound(what: string, id: string): SubstrateError {
  return new SubstrateError("not_found", `${what} ${JSON.stringify(id)} does not exist`);
}

export function limitOf(limit: number | undefined): number {
  // SQLite reads a negative LIMIT as "no limit".
  return limit === undefined ? -1 : checkedInteger("limit", limit) < 0 ? 0 : limit;
}
