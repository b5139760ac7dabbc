// Waiting for a human: resolves once a request is answered or expired (recording the expiry when its
// time is up), at once on this engine's own events, else at the next poll. It decides nothing.

import { LeashError } from "../errors.js";
import type { HitlRequestView, WaitForHitlOptions } from "../types.js";
import type { EngineContext } from "./context.js";
import { expireRows, getHitl, readRequest } from "./hitl.js";

export async function waitForHitl(
  ctx: EngineContext,
  requestId: string,
  waitOptions: WaitForHitlOptions = {},
): Promise<HitlRequestView> {
  const { clock, pollMs, events } = ctx;
  const { signal, timeoutMs } = waitOptions;
  if (timeoutMs !== undefined && (typeof timeoutMs !== "number" || !(timeoutMs >= 0))) {
    throw new LeashError(
      "invalid_argument",
      `timeoutMs must be a number of milliseconds, got ${String(timeoutMs)}`,
    );
  }
  signal?.throwIfAborted();
  const first = await getHitl(ctx, requestId);
  if (first.status !== "pending") return first;
  return new Promise<HitlRequestView>((resolve, reject) => {
    let latest = first;
    let done = false;
    let poller: ReturnType<typeof setTimeout> | undefined;
    let deadline: ReturnType<typeof setTimeout> | undefined;
    const finish = (settle: () => void) => {
      if (done) return;
      done = true;
      clearTimeout(poller);
      clearTimeout(deadline);
      off();
      signal?.removeEventListener("abort", onAbort);
      settle();
    };
    // An answer or expiry through this engine resolves the wait at once.
    const off = events.on((event) => {
      if (event.type !== "hitl_request" && event.request.request_id === requestId) {
        finish(() => resolve(event.request));
      }
    });
    const onAbort = () => finish(() => reject(signal?.reason));
    signal?.addEventListener("abort", onAbort, { once: true });
    if (signal?.aborted) onAbort(); // aborted while the first read was under way
    if (timeoutMs !== undefined) deadline = setTimeout(() => finish(() => resolve(latest)), timeoutMs);
    // The next poll comes at the poll interval, or sooner when the request expires before it.
    const delayFor = (request: HitlRequestView) =>
      request.expires_ns === null
        ? pollMs
        : Math.min(pollMs, Math.max(1, Math.ceil((request.expires_ns - clock.nowNs()) / 1e6)));
    const poll = async () => {
      try {
        let current = await getHitl(ctx, requestId);
        if (
          current.status === "pending" &&
          current.expires_ns !== null &&
          clock.nowNs() >= current.expires_ns
        ) {
          await expireRows(ctx, [await readRequest(ctx, requestId)]);
          current = await getHitl(ctx, requestId);
        }
        latest = current;
        if (current.status !== "pending") finish(() => resolve(current));
        else if (!done) poller = setTimeout(poll, delayFor(current));
      } catch (error) {
        finish(() => reject(error));
      }
    };
    poller = setTimeout(poll, delayFor(first));
  });
}
