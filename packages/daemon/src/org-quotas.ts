// Per-organization quotas shared by every connection: requests in flight, a request rate, tails, and an own
// replay window each. It counts and refuses; it never reads a payload (the transport and handler ask it).
import type { Clock } from "@leash/core";
import { ReplayWindow } from "@leash/wire";
import type { OrganizationQuotas } from "./limits.js";

/** A token bucket: `ratePerS` tokens a second, at most `burst` saved. */
class Bucket {
  #tokens: number;
  #at: number;
  constructor(
    readonly ratePerS: number,
    readonly burst: number,
    now: number,
  ) {
    this.#tokens = burst;
    this.#at = now;
  }

  /** Takes one token; false (and nothing taken) when the bucket is empty. */
  take(now: number): boolean {
    this.#tokens = Math.min(this.burst, this.#tokens + ((now - this.#at) / 1000) * this.ratePerS);
    this.#at = now;
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }

  /** Milliseconds until a token is due. */
  waitMs(): number {
    return Math.max(1, Math.ceil(((1 - this.#tokens) / this.ratePerS) * 1000));
  }
}

interface Account {
  inFlight: number;
  tails: number;
  readonly replay: ReplayWindow;
  readonly bucket: Bucket | null;
}

/** One book for the daemon: an account per organization, made on its first authenticated request. */
export class OrganizationQuotaBook {
  readonly #accounts = new Map<string, Account>();

  constructor(
    readonly quotas: OrganizationQuotas,
    private readonly clock: Clock,
    private readonly nowMs: () => number = () => performance.now(),
  ) {}

  #account(org: string): Account {
    let account = this.#accounts.get(org);
    if (account === undefined) {
      account = {
        inFlight: 0,
        tails: 0,
        replay: new ReplayWindow({ clock: this.clock, capacity: this.quotas.replayIds }),
        bucket:
          this.quotas.ratePerS > 0 ? new Bucket(this.quotas.ratePerS, this.quotas.burst, this.nowMs()) : null,
      };
      this.#accounts.set(org, account);
    }
    return account;
  }

  /** The organization's own replay window (an id of one organization never takes another's slot). */
  replayOf(org: string): ReplayWindow {
    return this.#account(org).replay;
  }

  /** Takes one request from the organization's rate; the milliseconds to wait when it has none left. */
  takeRate(org: string): { ok: true } | { ok: false; retryAfterMs: number } {
    const bucket = this.#account(org).bucket;
    if (bucket === null || bucket.take(this.nowMs())) return { ok: true };
    return { ok: false, retryAfterMs: bucket.waitMs() };
  }

  /** Takes an in-flight slot of the organization; false at its quota. Give it back with releaseInFlight. */
  takeInFlight(org: string): boolean {
    const account = this.#account(org);
    if (account.inFlight >= this.quotas.inFlight) return false;
    account.inFlight++;
    return true;
  }

  releaseInFlight(org: string): void {
    this.#account(org).inFlight--;
  }

  /** Takes a tail slot of the organization; false at its quota. Give it back with releaseTail. */
  takeTail(org: string): boolean {
    const account = this.#account(org);
    if (account.tails >= this.quotas.tails) return false;
    account.tails++;
    return true;
  }

  releaseTail(org: string): void {
    this.#account(org).tails--;
  }
}
