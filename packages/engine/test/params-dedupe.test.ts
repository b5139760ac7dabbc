// Large params stored once by digest on every real store: a hundred circuit-open DENYs of one call with 600 KB
// params grow the store by about one copy of them, not a hundred; the entries commit to the digest alone.
import { createHash, randomBytes } from "node:crypto";
import { generateKeyPair, verifyChain } from "@leash/chain";
import { canonicalJson } from "@leash/core";
import { withPg } from "@leash/test-stores";
import Database from "better-sqlite3";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, PARAMS_INLINE_MAX } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
/** About 600 KB that no store compresses away (PostgreSQL's TOAST would shrink a repeated letter). */
const BIG = { blob: randomBytes(450_000).toString("base64") };
const TEXT = canonicalJson(BIG);
const HASH = createHash("sha256").update(TEXT).digest("hex");

/** The bytes the store's tables take now: SQLite's pages (WAL included), PostgreSQL's relations; null for memory. */
async function storeBytes(store: OpenedStore): Promise<number | null> {
  if (store.path !== null) {
    const db = new Database(store.path, { readonly: true });
    try {
      return (
        (db.pragma("page_count", { simple: true }) as number) *
        (db.pragma("page_size", { simple: true }) as number)
      );
    } finally {
      db.close();
    }
  }
  if (store.schema !== null) {
    const schema = store.schema;
    return withPg(async (client) => {
      const { rows } = await client.query<{ bytes: string }>(
        `SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)::text AS bytes
           FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
          WHERE n.nspname = $1 AND c.relkind = 'r'`,
        [schema],
      );
      return Number(rows[0]!.bytes);
    });
  }
  return null;
}

describe.each(KINDS)("params stored by digest on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("100 circuit-open DENYs with the same 600 KB params store them once", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await engine.register({
      agent_id: "a",
      session_id: "s",
      config: { max_repeat_calls: 1, max_params_bytes: 1024 * 1024 },
    });
    const before = await storeBytes(store);
    const reasons: string[] = [];
    for (let i = 0; i < 102; i++) {
      reasons.push((await engine.evaluate({ session_id: "s", tool_name: "upload", params: BIG })).reason);
    }
    expect(reasons.slice(2)).toEqual(Array(100).fill("circuit_open"));
    const after = await storeBytes(store);
    if (before !== null && after !== null) {
      // One copy, plus 102 small entries and their outbox items and indexes: well under two copies.
      expect(after - before).toBeGreaterThan(TEXT.length / 2);
      expect(after - before).toBeLessThan(2 * TEXT.length);
    }

    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 1000));
    const decisions = entries.filter((e) => e.kind === "decision");
    expect(decisions).toHaveLength(102);
    for (const entry of decisions) {
      expect(entry.body.length).toBeLessThan(4096);
      const data = JSON.parse(entry.body).data;
      expect([data.params_hash, data.params_blob, data.params_json]).toEqual([HASH, true, undefined]);
    }
    const stored = await store.substrate.transaction((tx) => tx.chain.params([HASH]));
    expect(stored.get(HASH)).toBe(TEXT);
    expect((await verifyChain(entries, { publicKeys: [KEY.publicKeyHex] })).ok).toBe(true);
  }, 60_000);

  it("keeps params shorter than PARAMS_INLINE_MAX inline, as before", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await engine.register({ agent_id: "a", session_id: "s", config: {} });
    const small = { q: "y".repeat(PARAMS_INLINE_MAX - 10) }; // canonical: 8 more than the string
    await engine.evaluate({ session_id: "s", tool_name: "t", params: small });
    const large = { q: "y".repeat(PARAMS_INLINE_MAX - 8) };
    await engine.evaluate({ session_id: "s", tool_name: "t", params: large, nonce: "2" });
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    const data = entries.filter((e) => e.kind === "decision").map((e) => JSON.parse(e.body).data);
    expect(data[0].params_json).toBe(canonicalJson(small));
    expect(data[0].params_blob).toBeUndefined();
    expect([data[1].params_json, data[1].params_blob]).toEqual([undefined, true]);
    const stored = await store.substrate.transaction((tx) =>
      tx.chain.params([data[0].params_hash, data[1].params_hash]),
    );
    expect([...stored.values()]).toEqual([canonicalJson(large)]);
  });
});
