// openStore(url): the same library program on SQLite, PostgreSQL (with ?schema=) and memory, by URL alone.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import type { Substrate } from "@leash/core";
import { openPostgresSubstrate } from "@leash/substrate-postgres";
import { PG_URL, withPg } from "@leash/test-stores";
import { afterAll, describe, expect, it } from "vitest";
import { createEngine, LeashError, openStore } from "../src/index.js";

const KEY = generateKeyPair();
const dir = mkdtempSync(join(tmpdir(), "leash-open-store-"));
const schemas: string[] = [];
afterAll(async () => {
  rmSync(dir, { recursive: true, force: true });
  await withPg(async (client) => {
    for (const schema of schemas) await client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`);
  });
});

function freshSchema(): string {
  const schema = `leash_test_openstore_${process.pid}_${schemas.length}_${Date.now().toString(36)}`;
  schemas.push(schema);
  return schema;
}

async function oneDecision(substrate: Substrate): Promise<number> {
  const engine = createEngine({ substrate, signer: KEY.signer });
  const session = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
  const result = await engine.evaluate({
    session_id: session.session_id,
    tool_name: "search",
    params: { q: "x" },
    nonce: "n1",
    estimated_cost_usd: 0.1,
  });
  expect(result.verdict).toBe("ALLOW");
  return substrate.transaction(async (tx) => (await tx.chain.head())?.seq ?? -1);
}

async function tablesIn(schema: string): Promise<number> {
  return withPg(async (client) => {
    const { rows } = await client.query<{ n: number }>(
      "SELECT count(*)::integer AS n FROM information_schema.tables WHERE table_schema = $1",
      [schema],
    );
    return rows[0]?.n ?? 0;
  });
}

describe("openStore", () => {
  it("opens a migrated SQLite file from sqlite:PATH, with its URL options", async () => {
    const substrate = await openStore(`sqlite:${join(dir, "a.db")}?busy_timeout=2000&synchronous=FULL`);
    try {
      expect(await oneDecision(substrate)).toBeGreaterThanOrEqual(0);
    } finally {
      await substrate.close();
    }
    // A second open sees the same file and its chain.
    const again = await openStore(`sqlite:${join(dir, "a.db")}`);
    try {
      expect(await again.transaction(async (tx) => (await tx.chain.head())?.seq)).toBeGreaterThanOrEqual(0);
    } finally {
      await again.close();
    }
  });

  it("opens PostgreSQL in the schema the URL's ?schema= names, not in public", async () => {
    const schema = freshSchema();
    const substrate = await openStore(`${PG_URL}?schema=${schema}&application_name=leash-test`);
    try {
      await oneDecision(substrate);
    } finally {
      await substrate.close();
    }
    expect(await tablesIn(schema)).toBeGreaterThan(3);
  });

  it("makes openPostgresSubstrate honour ?schema= in its url too", async () => {
    const schema = freshSchema();
    const substrate = await openPostgresSubstrate({ url: `${PG_URL}?schema=${schema}` });
    try {
      await substrate.migrate();
    } finally {
      await substrate.close();
    }
    expect(await tablesIn(schema)).toBeGreaterThan(3);
    await expect(
      openPostgresSubstrate({ url: `${PG_URL}?schema=${schema}`, schema: "other" }),
    ).rejects.toThrow(/differ/);
  });

  it("opens memory: and shares memory:NAME between handles", async () => {
    const a = await openStore("memory:openstore-shared");
    const b = await openStore("memory:openstore-shared");
    try {
      const seq = await oneDecision(a);
      expect(await b.transaction(async (tx) => (await tx.chain.head())?.seq)).toBe(seq);
    } finally {
      await a.close();
      await b.close();
    }
  });

  it.each([
    ["an unknown scheme", "mysql://localhost/x", /unknown store URL scheme/],
    ["an unknown sqlite parameter", `sqlite:${join(dir, "b.db")}?busy=1`, /unknown parameter "busy"/],
    ["an unknown postgres parameter", `${PG_URL}?shema=x`, /unknown parameter "shema"/],
    ["a bad schema name", `${PG_URL}?schema=a-b`, /plain identifier/],
    ["a schema given twice", `${PG_URL}?schema=a&schema=b`, /given twice/],
  ])("refuses %s with INVALID_ARGUMENT, opening nothing", async (_what, url, message) => {
    const error = await openStore(url).then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(LeashError.isInstance(error)).toBe(true);
    expect((error as LeashError).code).toBe("invalid_argument");
    expect((error as Error).message).toMatch(message);
  });

  it("never prints a password from a refused URL", async () => {
    const error = (await openStore("postgres://u:s3cret-pw@127.0.0.1/test?bogus=1").catch((e) => e)) as Error;
    expect(error.message).toMatch(/unknown parameter/);
    expect(error.message).not.toContain("s3cret-pw");
  });
});
