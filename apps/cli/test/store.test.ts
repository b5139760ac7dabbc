// Tests for store URLs: parsing, password redaction, precedence, and one-line errors for stores that won't open.
// The stores opened here are real (memory:, a SQLite file); the postgres failure is a closed port, not a mock.
import { mkdirSync } from "node:fs";
import { join } from "node:path";
import type { PostgresSubstrate } from "@leash/substrate-postgres";
import { afterAll, describe, expect, it } from "vitest";
import {
  DEFAULT_STORE,
  openStore,
  parseStoreUrl,
  redactStoreUrl,
  resolveStoreUrl,
  scrubSecrets,
} from "../src/store.js";
import { expectOneLineError, leash, scratchDir, testKey } from "./helpers.js";
import { testStore } from "./stores.js";

const scratch = scratchDir();
afterAll(() => scratch.cleanup());
const KEY_ENV = { LEASH_SIGNING_KEY: testKey(scratch.dir).pem };

describe("store URLs", () => {
  it("reads sqlite:, postgres:// with ?schema= and memory:", () => {
    expect(parseStoreUrl("sqlite:./leash.db")).toMatchObject({
      kind: "sqlite",
      options: { path: "./leash.db" },
    });
    expect(
      parseStoreUrl("postgres://u@h:5432/db?sslmode=disable&schema=tenant_1&application_name=x"),
    ).toMatchObject({
      kind: "postgres",
      connection: "postgres://u@h:5432/db?sslmode=disable&application_name=x",
      schema: "tenant_1",
    });
    expect(parseStoreUrl("postgresql://u@h/db?schema=s")).toMatchObject({
      connection: "postgresql://u@h/db",
      schema: "s",
    });
    expect(parseStoreUrl("postgres://u@h/db")).toMatchObject({
      connection: "postgres://u@h/db",
      schema: undefined,
    });
    expect(parseStoreUrl("memory:")).toMatchObject({ kind: "memory", shared: undefined });
  });

  it("reads group_commit=on|off off a postgres URL (on by default) and refuses anything else", () => {
    expect(parseStoreUrl("postgres://u@h/db?group_commit=off&sslmode=disable")).toMatchObject({
      connection: "postgres://u@h/db?sslmode=disable",
      groupCommit: false,
    });
    expect(parseStoreUrl("postgres://u@h/db?group_commit=on")).toMatchObject({ groupCommit: true });
    expect(parseStoreUrl("postgres://u@h/db")).toMatchObject({ groupCommit: true });
    expect(() => parseStoreUrl("postgres://u@h/db?group_commit=maybe")).toThrow(
      /group_commit must be on or off/,
    );
    expect(() => parseStoreUrl("postgres://u@h/db?group_commit=on&group_commit=off")).toThrow(/twice/);
  });

  it("opens PostgreSQL with group commit on by default and off when the URL says so", async () => {
    const store = await testStore("postgres");
    try {
      const commitsFor = async (url: string) => {
        const substrate = (await openStore(url)) as PostgresSubstrate;
        try {
          await Promise.all(Array.from({ length: 12 }, () => substrate.transaction(async () => 1)));
          return substrate.stats.commits;
        } finally {
          await substrate.close();
        }
      };
      expect(await commitsFor(`${store.url}&group_commit=off`)).toBe(12);
      expect(await commitsFor(store.url)).toBeLessThan(12);
    } finally {
      await store.cleanup();
    }
  });

  it("never shows a password", () => {
    expect(redactStoreUrl("postgres://leash:s3cr%40t@db.example:5432/prod?schema=a")).toBe(
      "postgres://leash:***@db.example:5432/prod?schema=a",
    );
    expect(redactStoreUrl("postgres://leash@db/prod?sslmode=require&password=hunter22")).toBe(
      "postgres://leash@db/prod?sslmode=require&password=***",
    );
    expect(redactStoreUrl("postgres://leash@db/prod")).toBe("postgres://leash@db/prod");
    expect(redactStoreUrl("sqlite:./a:b@c.db")).toBe("sqlite:./a:b@c.db");
    const url = "postgres://leash:s3cr%40t@db/prod";
    expect(scrubSecrets(`login as leash with s3cr@t at ${url} failed`, url)).toBe(
      "login as leash with *** at postgres://leash:***@db/prod failed",
    );
  });

  it("resolves flag > LEASH_STORE > config file > default", () => {
    expect(resolveStoreUrl("memory:", { LEASH_STORE: "sqlite:e.db" }, "sqlite:f.db")).toBe("memory:");
    expect(resolveStoreUrl(undefined, { LEASH_STORE: "sqlite:e.db" }, "sqlite:f.db")).toBe("sqlite:e.db");
    expect(resolveStoreUrl(undefined, { LEASH_STORE: "" }, "sqlite:f.db")).toBe("sqlite:f.db");
    expect(resolveStoreUrl(undefined, {}, undefined)).toBe(DEFAULT_STORE);
    expect(DEFAULT_STORE).toBe("sqlite:./leash.db");
  });
});

describe("stores that cannot be used", () => {
  it("exits 2 in one line on an unknown scheme, hiding the password", async () => {
    const r = await leash(["session", "show", "x", "--store", "mysql://root:topsecret@db/leash"]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toBe(
      "leash: error: unknown store URL scheme in mysql://root:***@db/leash: expected sqlite:PATH, postgres://… (or postgresql://…) or memory:\n",
    );
  });

  it("names the redacted URL when postgres cannot be reached", async () => {
    const url = "postgres://leash:hunter2secret@127.0.0.1:1/test?schema=x";
    const r = await leash(["migrate", "--store", url]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toMatch(
      /^leash: error: cannot open store postgres:\/\/leash:\*\*\*@127\.0\.0\.1:1\/test\?schema=x: /,
    );
    expect(r.stderr).not.toContain("hunter2secret");
    // The same through LEASH_STORE and a store command other than migrate.
    const viaEnv = await leash(["session", "create", "--agent", "a"], "", { ...KEY_ENV, LEASH_STORE: url });
    expect(viaEnv.code).toBe(2);
    expect(viaEnv.stderr).not.toContain("hunter2secret");
    expect(viaEnv.stderr).toContain("leash:***@127.0.0.1:1");
  });

  it.each([
    ["sqlite:", "the path is empty"],
    ["sqlite:./x.db?cache=shared", 'unknown parameter "cache"'],
    ["postgres://u@h/db?schema=bad-name", "schema must be a plain identifier"],
    ["postgres://u@h/db?schema=a&schema=b", "`schema` is given twice"],
  ])("exits 2 on the malformed URL %s", async (url, problem) => {
    const r = await leash(["migrate", "--store", url]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(problem);
  });

  it("exits 2 naming the store when a SQLite path cannot be opened", async () => {
    const dir = join(scratch.dir, "a-directory.db");
    mkdirSync(dir);
    const r = await leash(["migrate", "--store", `sqlite:${dir}`]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(`cannot open store sqlite:${dir}: `);
    const notDb = scratch.write(
      "not-a-db.db",
      "this is not a database, just text that is long enough\n".repeat(40),
    );
    const garbage = await leash(["session", "show", "x", "--store", `sqlite:${notDb}`]);
    expect(garbage.code).toBe(2);
    expectOneLineError(garbage.stderr);
  });
});

describe("the memory: store", () => {
  it("works for a try-out and has no schema to migrate", async () => {
    const m = await leash(["migrate", "--store", "memory:"]);
    expect(m.stdout).toBe("memory: holds nothing between runs; there is no schema to migrate\n");
    const r = await leash(
      ["session", "create", "--agent", "bot", "--budget", "3", "--store", "memory:"],
      "",
      KEY_ENV,
    );
    expect(r.code).toBe(0);
    expect(JSON.parse(r.stdout)).toMatchObject({ agent_id: "bot", budget_remaining_usd: "3" });
  });
});
