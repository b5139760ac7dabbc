// Test fixtures for @leash/chain: deterministic chains of realistic decision entries, a seeded PRNG,
// and a minimal ChainStore over an array (no substrate implements ChainStore yet). Not shipped.

import type { ChainEntryRecord, ChainStore } from "@leash/core";
import { buildEntry, chainIdOf, type Json, keyRotationData, type Signer } from "../src/index.js";

/** mulberry32: small, fast, seeded; reproducible trials (print the seed on failure). */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export const intBelow = (rand: () => number, n: number): number => Math.floor(rand() * n);

export function seededBytes(rand: () => number): (size: number) => Uint8Array {
  return (size) => {
    const out = new Uint8Array(size);
    for (let i = 0; i < size; i++) out[i] = intBelow(rand, 256);
    return out;
  };
}

export const T0 = 1_700_000_000_123_456_789n;

const TOOLS = ["web_search", "read_file", "send_email", "café_lookup", "📈quote", "db.query"];
const VERDICTS = ["ALLOW", "DENY", "HITL"] as const;

export function decisionData(i: number, rand: () => number): Record<string, Json> {
  const verdict = VERDICTS[intBelow(rand, 3)]!;
  return {
    session_id: `s_${i % 7}`,
    agent_id: "research-bot",
    organization_id: "org_1",
    call_number: i + 1,
    tool_name: TOOLS[intBelow(rand, TOOLS.length)]!,
    params_hash: "ab".repeat(32),
    nonce: `n-${i}`,
    verdict,
    reason:
      verdict === "ALLOW" ? "within_thresholds" : verdict === "DENY" ? "max_repeat_exceeded" : "hitl_always",
    budget_before_usd: (0.5 - i * 0.001).toFixed(6),
    budget_after_usd: (0.5 - (i + 1) * 0.001).toFixed(6),
    rng: i % 5 === 0 ? Math.round(rand() * 1e6) / 1e6 : null,
    operator_id: null,
  };
}

export interface FixtureChain {
  entries: ChainEntryRecord[];
  chainId: string;
}

/**
 * `n` entries signed by signers[0], switching to the next signer after a key_rotation entry at
 * each seq in `rotateAt` (that entry itself is still signed by the outgoing key).
 */
export function makeChain(
  n: number,
  signers: readonly Signer[],
  options: { seed?: number; rotateAt?: readonly number[] } = {},
): FixtureChain {
  const rand = prng(options.seed ?? 1);
  const random = seededBytes(rand);
  const entries: ChainEntryRecord[] = [];
  let signerIndex = 0;
  let chainId: string | null = null;
  for (let i = 0; i < n; i++) {
    const prev = entries[i - 1];
    const rotating = options.rotateAt?.includes(i) === true;
    const next = signers[signerIndex + 1];
    if (rotating && next === undefined) throw new Error("rotateAt needs another signer");
    const entry = buildEntry({
      head: prev === undefined ? null : { seq: prev.seq, entry_hash: prev.entry_hash },
      chainId,
      kind: rotating ? "key_rotation" : "decision",
      data: rotating ? keyRotationData(next!) : decisionData(i, rand),
      signer: signers[signerIndex]!,
      nowNs: T0 + BigInt(i) * 1_000_123n,
      random,
    });
    if (i === 0) chainId = chainIdOf(entry);
    if (rotating) signerIndex++;
    entries.push(entry);
  }
  return { entries, chainId: chainId ?? "" };
}

/** A ChainStore over an array, honouring the port's contract (conflict on a taken seq). */
export class ArrayChainStore implements ChainStore {
  readonly rows: ChainEntryRecord[] = [];
  async head(): Promise<{ seq: number; entry_hash: string } | null> {
    const last = this.rows.at(-1);
    return last === undefined ? null : { seq: last.seq, entry_hash: last.entry_hash };
  }
  async append(entry: ChainEntryRecord): Promise<void> {
    if (this.rows.some((r) => r.seq === entry.seq)) throw new Error(`conflict: seq ${entry.seq} is taken`);
    this.rows.push(entry);
  }
  async range(fromSeq: number, limit: number): Promise<ChainEntryRecord[]> {
    return this.rows.filter((r) => r.seq >= fromSeq).slice(0, limit);
  }
  async count(): Promise<number> {
    return this.rows.length;
  }
}
