// The escrow simulation: 64 shards on a few daemons share one budget through a store, over a network
// that loses, duplicates and reorders messages, with leases that run out and daemons that die.
// Asserts escrow.ts's invariants after every step and zero overspend at the end (runs: LEASH_ESCROW_RUNS).
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  allotmentOf,
  checkEscrow,
  type EscrowAccount,
  type GrantPolicy,
  headroom,
  planCharge,
  planGrant,
  planReclaim,
  planRelease,
  planReturn,
  unallotted,
} from "./escrow.js";

const SHARDS = 64;
const DAEMONS = 6;
const LEASE_NS = 1_000;
const U = 10n ** 12n; // one micro-dollar in units of 10^-18
const LIMIT = 5_000_000n * U; // $5
const POLICY: GrantPolicy = { minChunk: 1_000n * U, maxChunk: 500_000n * U, k: 2 };
const RUNS = Number(process.env.LEASH_ESCROW_RUNS ?? 40);
const STEPS = Number(process.env.LEASH_ESCROW_STEPS ?? 1_000);

/** A message between a shard's daemon and the store; replies carry the store's figures. */
type Message =
  | { to: "store"; kind: "grant"; shard: number; epoch: number; want: bigint; need: bigint }
  | { to: "store"; kind: "return"; shard: number; epoch: number; keep: bigint }
  | { to: "shard"; kind: "granted"; shard: number; epoch: number; granted: bigint };

/** What a daemon believes about a shard it holds: its epoch and the allotment it last heard of. */
interface Held {
  epoch: number;
  granted: bigint;
  /** Holds placed and not yet settled: amounts, in order. */
  holds: bigint[];
}

interface World {
  now: number;
  store: EscrowAccount;
  /** The store's lease table: per shard, holder daemon, epoch and expiry. */
  leases: Array<{ holder: number; epoch: number; expires: number } | null>;
  /** Per shard: what its chain recorded under each epoch (spent + open holds), the store's durable truth. */
  chain: Array<Map<number, { spent: bigint; reserved: bigint }>>;
  /** Per daemon: the shards it believes it holds; a dead daemon holds nothing and does nothing. */
  daemons: Array<{ alive: boolean; held: Map<number, Held> }>;
  network: Message[];
  /** Every dollar any chain ever recorded as spent, summed: what overspend is measured on. */
  spentEver: bigint;
}

type Step =
  | { op: "decide"; daemon: number; shard: number; cost: number }
  | { op: "settle"; daemon: number; shard: number; fraction: number }
  | { op: "topup"; daemon: number; shard: number; want: number }
  | { op: "return"; daemon: number; shard: number; keep: number }
  | { op: "deliver"; pick: number; duplicate: boolean }
  | { op: "lose"; pick: number }
  | { op: "tick"; ns: number }
  | { op: "renew"; daemon: number }
  | { op: "acquire"; daemon: number; shard: number }
  | { op: "die"; daemon: number }
  | { op: "revive"; daemon: number };

function fresh(): World {
  return {
    now: 0,
    store: { limit: LIMIT, spent: 0n, reserved: 0n, allotments: [] },
    leases: Array.from({ length: SHARDS }, () => null),
    chain: Array.from({ length: SHARDS }, () => new Map()),
    daemons: Array.from({ length: DAEMONS }, () => ({ alive: true, held: new Map() })),
    network: [],
    spentEver: 0n,
  };
}

const key = (shard: number) => `s${shard}`;

function leaseValid(w: World, daemon: number, shard: number, epoch: number): boolean {
  const lease = w.leases[shard];
  return lease !== null && lease!.holder === daemon && lease!.epoch === epoch && lease!.expires > w.now;
}

function activeShards(w: World): number {
  return Math.max(1, w.leases.filter((l) => l !== null && l.expires > w.now).length);
}

/** The store's side: each transaction fenced by the lease table's epoch, as the SQL port is. */
function storeReceives(w: World, m: Message & { to: "store" }): void {
  const lease = w.leases[m.shard];
  if (lease === null || lease.epoch !== m.epoch) return; // fenced: an old epoch's message does nothing
  if (m.kind === "grant") {
    const planned = planGrant(
      w.store,
      {
        shard: key(m.shard),
        holder: `d${lease.holder}`,
        epoch: m.epoch,
        request: m.want,
        need: m.need,
        activeShards: activeShards(w),
        leaseExpiresNs: lease.expires,
      },
      POLICY,
    );
    if (!planned.ok) return;
    w.store = planned.account;
    const granted = allotmentOf(w.store, key(m.shard))!.granted;
    w.network.push({ to: "shard", kind: "granted", shard: m.shard, epoch: m.epoch, granted });
  } else {
    const planned = planReturn(w.store, key(m.shard), m.epoch, m.keep);
    if (!planned.ok) return;
    w.store = planned.account;
    const granted = allotmentOf(w.store, key(m.shard))!.granted;
    w.network.push({ to: "shard", kind: "granted", shard: m.shard, epoch: m.epoch, granted });
  }
}

function shardReceives(w: World, m: Message & { to: "shard" }): void {
  for (const d of w.daemons) {
    const held = d.alive ? d.held.get(m.shard) : undefined;
    // A reordered reply may be older than one already read: the daemon's view is then stale, which is
    // safe because the store bounds every commit by the allotment it really holds.
    if (held !== undefined && held.epoch === m.epoch) held.granted = m.granted;
  }
}

/** A decision: the daemon judges on its view, the store commits it (with its chain entry) or refuses. */
function decide(w: World, daemon: number, shard: number, cost: bigint): void {
  const d = w.daemons[daemon]!;
  const held = d.alive ? d.held.get(shard) : undefined;
  if (held === undefined) return;
  const used = held.holds.reduce((a, b) => a + b, 0n) + chainOf(w, shard, held.epoch).spent;
  if (used + cost > held.granted) {
    // DENY on the local view. The crumb left is given back (kept, it strands: no call of this size fits)
    // and what the call needs is asked for; the store grants it whole or not at all.
    w.network.push({ to: "store", kind: "return", shard, epoch: held.epoch, keep: 0n });
    w.network.push({ to: "store", kind: "grant", shard, epoch: held.epoch, want: cost * 4n, need: cost });
    return;
  }
  // The commit: one transaction with the chain entry, fenced by the lease epoch, bounded by the allotment.
  if (!leaseValid(w, daemon, shard, held.epoch)) return;
  const chain = chainOf(w, shard, held.epoch);
  const charged = planCharge(w.store, key(shard), held.epoch, chain.spent, chain.reserved + cost);
  if (!charged.ok) return; // DENY: the store's allotment is smaller than the daemon believed
  w.store = charged.account;
  chain.reserved += cost;
  held.holds.push(cost);
}

function settle(w: World, daemon: number, shard: number, fraction: number): void {
  const d = w.daemons[daemon]!;
  const held = d.alive ? d.held.get(shard) : undefined;
  if (held === undefined || held.holds.length === 0) return;
  if (!leaseValid(w, daemon, shard, held.epoch)) return;
  const estimate = held.holds[0]!;
  const actual = (estimate * BigInt(fraction)) / 100n; // never more than the estimate here
  const chain = chainOf(w, shard, held.epoch);
  const charged = planCharge(
    w.store,
    key(shard),
    held.epoch,
    chain.spent + actual,
    chain.reserved - estimate,
  );
  expect(charged.ok).toBe(true);
  if (!charged.ok) return;
  w.store = charged.account;
  chain.spent += actual;
  chain.reserved -= estimate;
  w.spentEver += actual;
  held.holds.shift();
}

function chainOf(w: World, shard: number, epoch: number) {
  let c = w.chain[shard]!.get(epoch);
  if (c === undefined) {
    c = { spent: 0n, reserved: 0n };
    w.chain[shard]!.set(epoch, c);
  }
  return c;
}

/** A daemon takes a shard whose lease ran out (or was never held): epoch + 1, then reclaims the old allotment. */
function acquire(w: World, daemon: number, shard: number): void {
  const d = w.daemons[daemon]!;
  const lease = w.leases[shard];
  if (!d.alive || (lease !== null && lease.expires > w.now)) return;
  const epoch = (lease?.epoch ?? 0) + 1;
  w.leases[shard] = { holder: daemon, epoch, expires: w.now + LEASE_NS };
  const old = allotmentOf(w.store, key(shard));
  if (old !== undefined) {
    const recorded = chainOf(w, shard, old.epoch);
    const reclaimed = planReclaim(w.store, key(shard), recorded.spent + recorded.reserved, w.now, epoch);
    expect(reclaimed.ok).toBe(true);
    if (reclaimed.ok) w.store = reclaimed.account;
    // Open holds of the dead epoch stay spent at their estimate (money never comes back on silence).
    w.spentEver += recorded.reserved;
    recorded.spent += recorded.reserved;
    recorded.reserved = 0n;
  }
  d.held.set(shard, { epoch, granted: 0n, holds: [] });
}

/** -1: the last daemon (alive) that believes it holds the shard; the store may know better. */
function resolve(w: World, step: Step): Step {
  if (!("daemon" in step) || step.daemon !== -1 || !("shard" in step)) return step;
  let found = 0;
  w.daemons.forEach((d, i) => {
    if (d.alive && d.held.has(step.shard)) found = i;
  });
  return { ...step, daemon: found };
}

function apply(w: World, original: Step): void {
  const step = resolve(w, original);
  switch (step.op) {
    case "decide":
      decide(w, step.daemon, step.shard, BigInt(step.cost) * U);
      return;
    case "settle":
      settle(w, step.daemon, step.shard, step.fraction);
      return;
    case "topup": {
      const held = w.daemons[step.daemon]!.alive ? w.daemons[step.daemon]!.held.get(step.shard) : undefined;
      if (held !== undefined) {
        w.network.push({
          to: "store",
          kind: "grant",
          shard: step.shard,
          epoch: held.epoch,
          want: BigInt(step.want) * U,
          need: 0n,
        });
      }
      return;
    }
    case "return": {
      const held = w.daemons[step.daemon]!.alive ? w.daemons[step.daemon]!.held.get(step.shard) : undefined;
      if (held !== undefined) {
        w.network.push({
          to: "store",
          kind: "return",
          shard: step.shard,
          epoch: held.epoch,
          keep: BigInt(step.keep) * U,
        });
      }
      return;
    }
    case "deliver": {
      if (w.network.length === 0) return;
      const at = step.pick % w.network.length; // any message, not the oldest: reordering
      const m = w.network[at]!;
      if (!step.duplicate) w.network.splice(at, 1);
      if (m.to === "store") storeReceives(w, m);
      else shardReceives(w, m);
      return;
    }
    case "lose":
      if (w.network.length > 0) w.network.splice(step.pick % w.network.length, 1);
      return;
    case "tick":
      w.now += step.ns;
      return;
    case "renew": {
      const d = w.daemons[step.daemon]!;
      if (!d.alive) return;
      for (const [shard, held] of d.held) {
        if (leaseValid(w, step.daemon, shard, held.epoch)) w.leases[shard]!.expires = w.now + LEASE_NS;
        else d.held.delete(shard); // a lost lease: the daemon learns it and stops deciding on the shard
      }
      return;
    }
    case "acquire":
      acquire(w, step.daemon, step.shard);
      return;
    case "die":
      w.daemons[step.daemon] = { alive: false, held: new Map() };
      return;
    case "revive":
      w.daemons[step.daemon]!.alive = true;
  }
}

/** After every step: the store's invariants, and every chain within the allotment it was granted. */
function assertInvariants(w: World): void {
  const violations = checkEscrow(w.store);
  if (violations.length > 0) expect(violations).toEqual([]);
  let recorded = 0n;
  for (const chains of w.chain) for (const c of chains.values()) recorded += c.spent + c.reserved;
  if (recorded > LIMIT) expect(recorded).toBeLessThanOrEqual(LIMIT);
  for (const a of w.store.allotments) {
    const c = w.chain[Number(a.shard.slice(1))]!.get(a.epoch) ?? { spent: 0n, reserved: 0n };
    if (a.spent !== c.spent || a.reserved !== c.reserved) expect({ ...a }).toMatchObject(c);
  }
}

const shard = fc.integer({ min: 0, max: SHARDS - 1 });
const daemon = fc.integer({ min: 0, max: DAEMONS - 1 });
/** Mostly a daemon that believes it holds the shard (-1), sometimes any daemon (a stale or no holder). */
const actor = fc.oneof({ weight: 4, arbitrary: fc.constant(-1) }, { weight: 1, arbitrary: daemon });
const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 30,
    arbitrary: fc.record({
      op: fc.constant("decide" as const),
      daemon: actor,
      shard,
      cost: fc.integer({ min: 1, max: 60_000 }),
    }),
  },
  {
    weight: 15,
    arbitrary: fc.record({
      op: fc.constant("settle" as const),
      daemon: actor,
      shard,
      fraction: fc.integer({ min: 0, max: 100 }),
    }),
  },
  {
    weight: 8,
    arbitrary: fc.record({
      op: fc.constant("topup" as const),
      daemon: actor,
      shard,
      want: fc.integer({ min: 1, max: 400_000 }),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      op: fc.constant("return" as const),
      daemon: actor,
      shard,
      keep: fc.integer({ min: 0, max: 20_000 }),
    }),
  },
  {
    weight: 25,
    arbitrary: fc.record({ op: fc.constant("deliver" as const), pick: fc.nat(), duplicate: fc.boolean() }),
  },
  { weight: 5, arbitrary: fc.record({ op: fc.constant("lose" as const), pick: fc.nat() }) },
  {
    weight: 4,
    arbitrary: fc.record({ op: fc.constant("tick" as const), ns: fc.integer({ min: 1, max: 600 }) }),
  },
  { weight: 4, arbitrary: fc.record({ op: fc.constant("renew" as const), daemon }) },
  { weight: 8, arbitrary: fc.record({ op: fc.constant("acquire" as const), daemon, shard }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("die" as const), daemon }) },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("revive" as const), daemon }) },
);

/** The end: every lease runs out and every allotment is reclaimed with its chain; nothing is stranded. */
function drain(w: World): void {
  // Live holders shut down cleanly (release); the dead ones' allotments wait for their lease (reclaim).
  w.daemons.forEach((d, i) => {
    for (const [shard, held] of d.held) {
      if (!d.alive || !leaseValid(w, i, shard, held.epoch)) continue;
      const released = planRelease(w.store, key(shard), held.epoch);
      if (!released.ok) continue; // its allotment was never granted
      w.store = released.account;
      const c = chainOf(w, shard, held.epoch);
      w.spentEver += c.reserved;
      c.spent += c.reserved;
      c.reserved = 0n;
    }
  });
  w.now += 10 * LEASE_NS;
  for (const a of [...w.store.allotments]) {
    const c = w.chain[Number(a.shard.slice(1))]!.get(a.epoch) ?? { spent: 0n, reserved: 0n };
    const reclaimed = planReclaim(w.store, a.shard, c.spent + c.reserved, w.now);
    expect(reclaimed.ok).toBe(true);
    if (reclaimed.ok) w.store = reclaimed.account;
    w.spentEver += c.reserved;
  }
  expect(w.store.allotments).toEqual([]);
  expect(w.store.spent).toBe(w.spentEver);
  expect(w.spentEver <= LIMIT).toBe(true); // zero overspend
  expect(unallotted(w.store)).toBe(LIMIT - w.spentEver); // none stranded
}

describe("escrow simulation (64 shards, lost/duplicated/reordered messages, lease loss, dying daemons)", () => {
  it(`keeps every invariant after every step and never overspends (${RUNS} runs × ${STEPS} steps)`, () => {
    let spentInAll = 0n;
    let reclaims = 0;
    fc.assert(
      fc.property(fc.array(stepArb, { minLength: STEPS, maxLength: STEPS }), (steps) => {
        const w = fresh();
        for (const step of steps) {
          const before = w.store.allotments.length;
          apply(w, step);
          if (step.op === "acquire" && w.store.allotments.length < before) reclaims++;
          assertInvariants(w);
        }
        drain(w);
        spentInAll += w.spentEver;
      }),
      { numRuns: RUNS },
    );
    // The runs did spend, and dead shards' allotments were reclaimed: the invariants were exercised.
    expect(spentInAll).toBeGreaterThan(0n);
    expect(reclaims).toBeGreaterThan(0);
  });

  it("a budget drained through 64 shards is usable to the last micro-dollar", () => {
    const w = fresh();
    for (let s = 0; s < SHARDS; s++) acquire(w, s % DAEMONS, s);
    let allowed = 0n;
    // Every shard asks, decides $0.001 at a time, settles at the estimate, and asks again when denied.
    for (let round = 0; round < 100_000 && allowed < LIMIT; round++) {
      const s = round % SHARDS;
      const d = s % DAEMONS;
      const held = w.daemons[d]!.held.get(s)!;
      const before = w.chain[s]!.get(held.epoch)?.reserved ?? 0n;
      decide(w, d, s, 1_000n * U);
      const placed = (w.chain[s]!.get(held.epoch)?.reserved ?? 0n) > before;
      if (placed) {
        settle(w, d, s, 100);
        allowed += 1_000n * U;
      }
      while (w.network.length > 0) {
        const m = w.network.shift()!;
        if (m.to === "store") storeReceives(w, m);
        else shardReceives(w, m);
      }
      if (round % SHARDS === 0) {
        for (let x = 0; x < DAEMONS; x++) apply(w, { op: "renew", daemon: x });
        assertInvariants(w);
      }
    }
    expect(allowed).toBe(LIMIT); // 5,000 calls of $0.001 from $5, exactly
    expect(headroom(allotmentOf(w.store, key(0)))).toBe(0n);
    drain(w);
  });
});
