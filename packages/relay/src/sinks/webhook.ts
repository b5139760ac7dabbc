// The HTTP webhook sink: POSTs entries as JSON, HMAC-signed, with an Idempotency-Key the receiver dedupes on.
// It follows no redirects and keeps no state: exactly-once effect is the receiver's dedupe by key or entry_id.

import { createHash, createHmac, timingSafeEqual } from "node:crypto";
import type { ChainEntryRecord } from "@leash/core";
import { describeError, RelayError } from "../errors.js";
import { entryJson } from "../ndjson.js";
import {
  DELIVERED,
  type DeliveryOutcome,
  type DeliveryResult,
  permanent,
  retryable,
  SINK_SPECIFICATION_VERSION,
  type Sink,
  unsent,
} from "../sink.js";

export interface WebhookSinkOptions {
  /** http:// or https:// endpoint. */
  url: string;
  /** Shared secret of the HMAC-SHA256 in X-Leash-Signature. */
  secret: string | Uint8Array;
  /** Per request, response body included (default 10,000 ms); a timeout is retryable. */
  timeoutMs?: number;
  /**
   * "entry" (default): one request per entry, `Idempotency-Key: <entry_id>`, and an outcome per entry
   * (a 4xx kills only the entry it answered). A 5xx or 408 holds up only the session of the entry it
   * answered: the rest of that session is left unsent, the other sessions' entries are still sent.
   * No answer at all (refused, reset, timeout) or a 429 ends the round: the rest is left unsent. "batch": one request per delivery round,
   * `Idempotency-Key: batch-<first 32 hex of SHA-256 over the entry ids, newline-joined>`; the
   * outcome is the whole batch's. A retried batch may hold other entries than before (some delivered
   * meanwhile by another relay), so the receiver MUST dedupe by each entry's entry_id either way.
   */
  batching?: "entry" | "batch";
  /** Extra request headers (an Authorization header for a gateway, say). */
  headers?: Record<string, string>;
  name?: string;
}

export const SIGNATURE_HEADER = "x-leash-signature";
const BODY_SNIPPET_CHARS = 200;

/** The X-Leash-Signature value for a raw request body: `sha256=<lowercase hex HMAC-SHA256>`. */
export function signWebhookBody(body: string | Uint8Array, secret: string | Uint8Array): string {
  return `sha256=${createHmac("sha256", secret).update(body).digest("hex")}`;
}

/**
 * For receivers: whether `header` is the signature of the raw body bytes (as received, before any JSON
 * parsing) under `secret`. Compared in constant time.
 */
export function verifyWebhookSignature(
  body: string | Uint8Array,
  header: string | undefined | null,
  secret: string | Uint8Array,
): boolean {
  if (typeof header !== "string") return false;
  const expected = Buffer.from(signWebhookBody(body, secret));
  const given = Buffer.from(header.trim());
  return given.length === expected.length && timingSafeEqual(given, expected);
}

/** 2xx delivered; 408, 429 and 5xx retryable; anything else (4xx, an unfollowed 3xx) permanent. */
function outcomeOf(status: number, statusText: string, body: string): DeliveryOutcome {
  if (status >= 200 && status < 300) return DELIVERED;
  const snippet = body.length > BODY_SNIPPET_CHARS ? `${body.slice(0, BODY_SNIPPET_CHARS)}…` : body;
  const text = `HTTP ${status}${statusText ? ` ${statusText}` : ""}${snippet ? `: ${snippet}` : ""}`;
  return status === 408 || status === 429 || status >= 500 ? retryable(text) : permanent(text);
}

/** The options, checked, with their defaults: where to post, how, and under which name. */
interface WebhookTarget {
  url: URL;
  secret: string | Uint8Array;
  timeoutMs: number;
  batching: "entry" | "batch";
  extraHeaders: Readonly<Record<string, string>>;
  name: string;
}

function webhookTarget(options: WebhookSinkOptions): WebhookTarget {
  let url: URL;
  try {
    url = new URL(options.url);
  } catch (error) {
    throw new RelayError("invalid_argument", `webhook url is not a URL: ${JSON.stringify(options.url)}`, {
      cause: error,
    });
  }
  if (url.protocol !== "http:" && url.protocol !== "https:") {
    throw new RelayError("invalid_argument", `webhook url must be http(s), got ${url.protocol}`);
  }
  const secret = options.secret;
  if (secret === undefined || secret.length === 0) {
    throw new RelayError("invalid_argument", "the webhook sink needs a non-empty secret");
  }
  const timeoutMs = options.timeoutMs ?? 10_000;
  if (!Number.isFinite(timeoutMs) || timeoutMs <= 0) {
    throw new RelayError("invalid_argument", `timeoutMs must be a positive number, got ${String(timeoutMs)}`);
  }
  const batching = options.batching ?? "entry";
  if (batching !== "entry" && batching !== "batch") {
    throw new RelayError(
      "invalid_argument",
      `batching must be "entry" or "batch", got ${JSON.stringify(batching)}`,
    );
  }
  const extraHeaders = options.headers ?? {};
  // Never the query string or credentials in the name: it ends up in logs and last_error.
  const name = options.name ?? `webhook:${url.origin}${url.pathname}`;
  return { url, secret, timeoutMs, batching, extraHeaders, name };
}

/** One POST. The outcome, and whether the endpoint as a whole failed (no answer, or 429: slow down). */
async function post(
  target: WebhookTarget,
  entries: readonly ChainEntryRecord[],
  idempotencyKey: string,
): Promise<{ outcome: DeliveryOutcome; endpointDown: boolean }> {
  const { url, secret, timeoutMs, extraHeaders } = target;
  const body = Buffer.from(`{"entries":[${entries.map(entryJson).join(",")}]}`, "utf8");
  try {
    const response = await fetch(url, {
      method: "POST",
      headers: {
        ...extraHeaders,
        "content-type": "application/json",
        "idempotency-key": idempotencyKey,
        [SIGNATURE_HEADER]: signWebhookBody(body, secret),
        "user-agent": "leash-relay",
      },
      body,
      // A redirected POST may turn into a GET elsewhere: a wrong URL is the operator's to fix.
      redirect: "manual",
      signal: AbortSignal.timeout(timeoutMs),
    });
    // Read (and bound) the body: it names the reason for a refusal, and reading frees the connection.
    const text = await response.text();
    const outcome = outcomeOf(response.status, response.statusText, text);
    return { outcome, endpointDown: response.status === 429 };
  } catch (error) {
    const kind = (error as { name?: unknown }).name;
    const timedOut = kind === "TimeoutError" || kind === "AbortError";
    const outcome = retryable(timedOut ? `timeout after ${timeoutMs} ms` : describeError(error));
    return { outcome, endpointDown: true };
  }
}

/** The whole batch in one POST, keyed by its entry ids: one outcome for all. */
async function deliverAsOne(
  target: WebhookTarget,
  batch: readonly ChainEntryRecord[],
): Promise<DeliveryResult> {
  const key = createHash("sha256")
    .update(batch.map((e) => e.entry_id).join("\n"))
    .digest("hex")
    .slice(0, 32);
  const { outcome } = await post(target, batch, `batch-${key}`);
  return { outcomes: batch.map(() => outcome) };
}

/** One POST per entry, in order; a failure holds up its session's later entries, or all if the endpoint is down. */
async function deliverEach(
  target: WebhookTarget,
  batch: readonly ChainEntryRecord[],
): Promise<DeliveryResult> {
  const outcomes: DeliveryOutcome[] = [];
  // Sessions with an entry that did not get through: their later entries must not land first.
  const heldUp = new Map<string | null, string>();
  let stopped: string | null = null;
  for (const entry of batch) {
    const why = stopped ?? heldUp.get(entry.session_id);
    if (why !== undefined) {
      outcomes.push(unsent(why));
      continue;
    }
    const { outcome, endpointDown } = await post(target, [entry], entry.entry_id);
    outcomes.push(outcome);
    if (outcome.status === "delivered") continue;
    const reason = outcome.error;
    // An endpoint that does not answer usually answers nobody: stop rather than wait out a
    // timeout per entry. An HTTP error is about this request: only its session waits.
    if (endpointDown) stopped = `not sent: an earlier request failed (${reason})`;
    else heldUp.set(entry.session_id, `not sent: seq ${entry.seq} of its session failed (${reason})`);
  }
  return { outcomes };
}

export function createWebhookSink(options: WebhookSinkOptions): Sink {
  const target = webhookTarget(options);
  return {
    specificationVersion: SINK_SPECIFICATION_VERSION,
    name: target.name,
    async deliver(batch: readonly ChainEntryRecord[]): Promise<DeliveryResult> {
      if (batch.length === 0) return { outcomes: [] };
      return target.batching === "batch" ? deliverAsOne(target, batch) : deliverEach(target, batch);
    },
  };
}
