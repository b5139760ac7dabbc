// Admits one authenticated request of an organization against its rate and in-flight quotas, for a
// transport without envelopes (gRPC): the same book, detail strings and metrics as the socket's.
import { create } from "@bufbuild/protobuf";
import { ErrorCode, type Error as ErrorMessage, ErrorSchema } from "@leash/wire";
import type { DaemonMetrics } from "./metrics.js";
import type { OrganizationQuotaBook } from "./org-quotas.js";

export type Admission = { ok: true; release: () => void } | { ok: false; refusal: ErrorMessage };

/** A RATE_LIMITED refusal named by its limit, counted as the socket counts its own. */
function refusal(metrics: DaemonMetrics, limit: string, message: string, retryAfterMs: number): ErrorMessage {
  metrics.limitRefusals.inc({ limit });
  metrics.rateLimited.inc();
  return create(ErrorSchema, {
    code: ErrorCode.RATE_LIMITED,
    detail: limit,
    message,
    retryAfterMs: BigInt(retryAfterMs),
  });
}

/**
 * Takes a token of `org`'s rate and (unless a long poll, which holds no in-flight slot) one of its
 * in-flight slots; `release` gives the slot back once the request is answered (calling it twice is harmless).
 */
export function admitOrganizationRequest(
  quotas: OrganizationQuotaBook,
  metrics: DaemonMetrics,
  org: string,
  longPoll: boolean,
): Admission {
  const rate = quotas.takeRate(org);
  if (!rate.ok) {
    const why = `organization ${org} is over its ${quotas.quotas.ratePerS} requests per second`;
    return { ok: false, refusal: refusal(metrics, "org_rate_limited", why, rate.retryAfterMs) };
  }
  if (longPoll) return { ok: true, release: () => {} };
  if (!quotas.takeInFlight(org)) {
    const why = `organization ${org} has ${quotas.quotas.inFlight} requests in flight`;
    return { ok: false, refusal: refusal(metrics, "org_in_flight_limit", why, 10) };
  }
  let held = true;
  return {
    ok: true,
    release: () => {
      if (!held) return;
      held = false;
      quotas.releaseInFlight(org);
    },
  };
}
