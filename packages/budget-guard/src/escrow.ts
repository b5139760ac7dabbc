// Budget escrow, pure: a shared account's limit split into per-shard allotments that each shard spends
// alone; grants, top-ups, returns, a dead shard's reclaim, and the invariant checker. No storage, no clock.
//
// Amounts are bigint units of 10^-18 dollars (Money's units): the model is exact and cheap enough for a
// simulation of thousands of steps. escrow-store.ts runs the same functions against the store's rows.

/** One shard's allotment. `spent + reserved <= granted` always (a shard decides within it). */
export interface EscrowAllotment {
  readonly shard: string;
  readonly holder: string;
  /** The shard lease's epoch under which it was granted: a lower epoch is a dead holder's. */
  readonly epoch: number;
  readonly granted: bigint;
  readonly spent: bigint;
  readonly reserved: bigint;
  /** When the shard's lease (as last renewed with a grant) runs out; after it, the allotment may be reclaimed. */
  readonly leaseExpiresNs: number;
}

/** A shared account under escrow: its limit, what is charged to it directly, and its allotments. */
export interface EscrowAccount {
  readonly limit: bigint;
  /**
   * Charged to the account itself: released and reclaimed allotments' spending (their holds
   * included, as money never comes back on silence), plus whatever was spent without escrow.
   */
  readonly spent: bigint;
  /** Holds on the account itself (outside escrow). */
  readonly reserved: bigint;
  readonly allotments: readonly EscrowAllotment[];
}

/** How big a grant is: a share of what is not allotted, never below a floor, never beyond a cap. */
export interface GrantPolicy {
  /** The smallest grant worth a round trip (unless less than that is left). */
  readonly minChunk: bigint;
  /** The largest one allotment may be. */
  readonly maxChunk: bigint;
  /** A shard gets at most 1/(k · activeShards) of the unallotted remaining (k ≥ 1). */
  readonly k: number;
}

export type EscrowRefusal =
  /** A newer lease holds the shard: the caller's epoch is fenced off. */
  | "stale_epoch"
  /** An older epoch's allotment is still there: it must be reclaimed (charged with its chain) first. */
  | "reclaim_first"
  /** Nothing is left to grant. */
  | "exhausted"
  /** The shard has no allotment. */
  | "no_allotment"
  /** The lease has not run out: the allotment is not a dead shard's. */
  | "lease_live"
  /** What the shard would hold exceeds its allotment. */
  | "over_allotment";

export type EscrowResult<T = EscrowAccount> =
  | { ok: true; account: T; amount: bigint }
  | { ok: false; refusal: EscrowRefusal };

const refuse = (refusal: EscrowRefusal): { ok: false; refusal: EscrowRefusal } => ({ ok: false, refusal });

/** Σ granted over the allotments. */
export function allotted(account: EscrowAccount): bigint {
  let sum = 0n;
  for (const a of account.allotments) sum += a.granted;
  return sum;
}

/** What no allotment holds and the account has not spent or held: what grants come from. */
export function unallotted(account: EscrowAccount): bigint {
  const left = account.limit - account.spent - account.reserved - allotted(account);
  return left > 0n ? left : 0n;
}

/** What the shard may still hold within its allotment (0 without one). */
export function headroom(allotment: EscrowAllotment | undefined): bigint {
  if (allotment === undefined) return 0n;
  const left = allotment.granted - allotment.spent - allotment.reserved;
  return left > 0n ? left : 0n;
}

export function allotmentOf(account: EscrowAccount, shard: string): EscrowAllotment | undefined {
  return account.allotments.find((a) => a.shard === shard);
}

function withAllotment(account: EscrowAccount, next: EscrowAllotment | null, shard: string): EscrowAccount {
  const others = account.allotments.filter((a) => a.shard !== shard);
  return { ...account, allotments: next === null ? others : [...others, next] };
}

/**
 * The size of a grant: min(request, maxChunk, unallotted, max(minChunk, unallotted / (k · active))).
 * Near exhaustion the share shrinks towards minChunk and then to what is left, so an idle shard never
 * sits on much of a budget others could use; `active` counts the shards asking (the asking one included).
 */
export function grantSize(free: bigint, request: bigint, activeShards: number, policy: GrantPolicy): bigint {
  if (free <= 0n || request <= 0n) return 0n;
  const parts = BigInt(Math.max(1, Math.ceil(policy.k)) * Math.max(1, Math.trunc(activeShards)));
  let size = free / parts;
  if (size < policy.minChunk) size = policy.minChunk;
  if (size > policy.maxChunk) size = policy.maxChunk;
  if (size > request) size = request;
  if (size > free) size = free;
  return size;
}

export interface GrantRequest {
  readonly shard: string;
  readonly holder: string;
  readonly epoch: number;
  /** What the shard would like to have in all (headroom wanted), not only what it lacks. */
  readonly request: bigint;
  /**
   * The least that is of any use (a call's estimate beyond the headroom): a grant below it is refused
   * as `exhausted` instead of made, so the last dollars collect where a call can spend them rather
   * than being handed out in crumbs no call fits in. Absent: one unit.
   */
  readonly need?: bigint;
  readonly activeShards: number;
  readonly leaseExpiresNs: number;
}

/**
 * Grants (or tops up) the shard's allotment by `grantSize` of the unallotted remaining, renewing its
 * lease expiry. Fenced: a request under an older epoch than the allotment's is refused (`stale_epoch`),
 * one under a newer epoch while an older allotment stands is refused (`reclaim_first`) — the new holder
 * owns the shard's chain and reclaims the old allotment with what it recorded. `amount` is what was added.
 */
export function planGrant(account: EscrowAccount, req: GrantRequest, policy: GrantPolicy): EscrowResult {
  const current = allotmentOf(account, req.shard);
  if (current !== undefined && current.epoch > req.epoch) return refuse("stale_epoch");
  if (current !== undefined && current.epoch < req.epoch) return refuse("reclaim_first");
  const free = unallotted(account);
  const need = req.need !== undefined && req.need > 0n ? req.need : 0n;
  if (need > free) return refuse("exhausted");
  let amount = grantSize(free, req.request - headroom(current), req.activeShards, policy);
  if (amount < need) amount = need;
  if (amount === 0n && headroom(current) === 0n) return refuse("exhausted");
  const next: EscrowAllotment = {
    shard: req.shard,
    holder: req.holder,
    epoch: req.epoch,
    granted: (current?.granted ?? 0n) + amount,
    spent: current?.spent ?? 0n,
    reserved: current?.reserved ?? 0n,
    leaseExpiresNs: Math.max(current?.leaseExpiresNs ?? 0, req.leaseExpiresNs),
  };
  return { ok: true, account: withAllotment(account, next, req.shard), amount };
}

/**
 * Records what the shard now spends and holds within its allotment (its chain's figures). Refused
 * past the allotment (`over_allotment`, the shard must deny instead) and under a fenced-off epoch.
 */
export function planCharge(
  account: EscrowAccount,
  shard: string,
  epoch: number,
  spent: bigint,
  reserved: bigint,
): EscrowResult {
  const current = allotmentOf(account, shard);
  if (current === undefined) return refuse("no_allotment");
  if (current.epoch !== epoch) return refuse("stale_epoch");
  if (spent < 0n || reserved < 0n || spent + reserved > current.granted) return refuse("over_allotment");
  const next = { ...current, spent, reserved };
  return { ok: true, account: withAllotment(account, next, shard), amount: 0n };
}

/**
 * Gives back the unused part of the allotment beyond `keep` (idle shards and shrinking near exhaustion):
 * granted becomes spent + reserved + keep. `amount` is what went back to the unallotted remaining.
 */
export function planReturn(account: EscrowAccount, shard: string, epoch: number, keep = 0n): EscrowResult {
  const current = allotmentOf(account, shard);
  if (current === undefined) return refuse("no_allotment");
  if (current.epoch !== epoch) return refuse("stale_epoch");
  const kept = keep < headroom(current) ? (keep > 0n ? keep : 0n) : headroom(current);
  const amount = headroom(current) - kept;
  const next = { ...current, granted: current.granted - amount };
  return { ok: true, account: withAllotment(account, next, shard), amount };
}

/**
 * Ends the allotment at a clean shutdown (or lease hand-off): its spending and holds are charged to
 * the account, the rest goes back. `amount` is what went back.
 */
export function planRelease(account: EscrowAccount, shard: string, epoch: number): EscrowResult {
  const current = allotmentOf(account, shard);
  if (current === undefined) return refuse("no_allotment");
  if (current.epoch !== epoch) return refuse("stale_epoch");
  return close(account, current, current.spent + current.reserved);
}

/**
 * A dead shard's allotment, after its lease ran out (or once a newer epoch holds the shard): charged
 * with everything its chain recorded (spent plus holds at their estimate), never less than its row
 * says; the rest goes back. `amount` is what went back (0 when the chain recorded more than granted:
 * an overspend that checkEscrow reports, and that the account then carries in full).
 */
export function planReclaim(
  account: EscrowAccount,
  shard: string,
  chainRecorded: bigint,
  nowNs: number,
  byEpoch?: number,
): EscrowResult {
  const current = allotmentOf(account, shard);
  if (current === undefined) return refuse("no_allotment");
  const superseded = byEpoch !== undefined && byEpoch > current.epoch;
  if (!superseded && nowNs < current.leaseExpiresNs) return refuse("lease_live");
  const row = current.spent + current.reserved;
  return close(account, current, chainRecorded > row ? chainRecorded : row);
}

function close(account: EscrowAccount, current: EscrowAllotment, charged: bigint): EscrowResult {
  const back = current.granted - charged;
  const next = withAllotment(account, null, current.shard);
  return { ok: true, account: { ...next, spent: account.spent + charged }, amount: back > 0n ? back : 0n };
}

/** A broken invariant, in words, or nothing. */
export type EscrowViolation =
  | { kind: "over_limit"; committed: bigint; limit: bigint }
  | { kind: "over_allotment"; shard: string; used: bigint; granted: bigint }
  | { kind: "negative"; shard: string | null };

/**
 * The escrow invariants: (1) spent + reserved + Σ granted ≤ limit (the allotments never hand out more
 * than the budget); (2) in every allotment spent + reserved ≤ granted (no shard spends past its share);
 * (3) no amount is negative. Together: total spending never exceeds the limit.
 */
export function checkEscrow(account: EscrowAccount): EscrowViolation[] {
  const violations: EscrowViolation[] = [];
  if (account.spent < 0n || account.reserved < 0n) violations.push({ kind: "negative", shard: null });
  for (const a of account.allotments) {
    if (a.granted < 0n || a.spent < 0n || a.reserved < 0n)
      violations.push({ kind: "negative", shard: a.shard });
    if (a.spent + a.reserved > a.granted) {
      violations.push({
        kind: "over_allotment",
        shard: a.shard,
        used: a.spent + a.reserved,
        granted: a.granted,
      });
    }
  }
  const committed = account.spent + account.reserved + allotted(account);
  if (committed > account.limit) violations.push({ kind: "over_limit", committed, limit: account.limit });
  return violations;
}
