// The library-mode commands (migrate, session, guard, evaluate, post-exec, expire) against real stores.
// The same tests run unchanged on SQLite and PostgreSQL: switching stores is the --store URL alone.
// Every command that writes signs the audit chain; the key comes from LEASH_SIGNING_KEY here.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { LATEST_SCHEMA_VERSION } from "@leash/substrate-postgres";
import { SCHEMA_VERSION } from "@leash/substrate-sqlite";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import {
  type Captured,
  expectOneLineError,
  leash,
  pythonCanonicalHash,
  scratchDir,
  testKey,
} from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

/** Every `*_ns` value in a parsed JSON output, with its path. */
function nanosecondFields(value: unknown, path = ""): [string, unknown][] {
  if (typeof value !== "object" || value === null) return [];
  return Object.entries(value).flatMap(([key, v]) => [
    ...(key.endsWith("_ns") ? [[`${path}.${key}`, v] as [string, unknown]] : []),
    ...nanosecondFields(v, `${path}.${key}`),
  ]);
}

const json = (r: Captured) => {
  expect(r.stderr).toBe("");
  return JSON.parse(r.stdout);
};

const keys = scratchDir();
afterAll(() => keys.cleanup());
const KEY = testKey(keys.dir);
/** The environment of every store command here: the signing key, nothing else. */
const KEY_ENV = { LEASH_SIGNING_KEY: KEY.pem };

describe.each(STORE_KINDS)("library mode on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });

  /** `leash …` against this test's store; the only place the store is named. */
  const L = (argv: string[], stdin = "", env: Record<string, string> = {}) =>
    leash([...argv, "--store", store.url], stdin, { ...KEY_ENV, ...env });

  const create = async (...flags: string[]): Promise<string> => {
    const r = await L(["session", "create", "--agent", "bot", ...flags]);
    expect(r.code).toBe(0);
    return json(r).session_id;
  };

  const evaluate = (session: string, nonce: string, ...flags: string[]) =>
    L(["evaluate", "--session", session, "--tool", "search", "--nonce", nonce, ...flags]);

  it("migrate creates the schema once, then has nothing to do", async () => {
    // Each store numbers its own migrations.
    const version = kind === "sqlite" ? SCHEMA_VERSION : LATEST_SCHEMA_VERSION;
    const first = await L(["migrate"]);
    expect(first.stderr).toBe("");
    expect(first.stdout).toBe(`created the Leash schema (version ${version}) in ${store.url}\n`);
    expect(first.code).toBe(0);
    const second = await L(["migrate"]);
    expect(second.stdout).toBe(`${store.url} is already at schema version ${version}; nothing to do\n`);
    expect(second.code).toBe(0);
  });

  it("session create turns its flags into the guard config", async () => {
    const r = await L([
      "session",
      "create",
      "--agent",
      "bot",
      "--org",
      "acme",
      "--session",
      "s-flags",
      "--budget",
      "2.5",
      "--scope",
      "agent",
      "--max-repeat",
      "3",
      "--error-amplification",
      "--max-calls",
      "100",
      "--hitl",
      "on_threshold",
      "--hitl-threshold",
      "0.2",
      "--probabilistic-deny",
      "--jitter",
      "0.1",
    ]);
    expect(r.code).toBe(0);
    const view = json(r);
    expect(view).toMatchObject({
      session_id: "s-flags",
      agent_id: "bot",
      organization_id: "acme",
      status: "ACTIVE",
      call_count: 0,
      budget_remaining_usd: "2.5",
    });
    expect(view.config).toEqual({
      budget_usd: 2.5,
      budget_scope: "agent",
      max_repeat_calls: 3,
      error_amplification: true,
      max_total_calls: 100,
      hitl_mode: "on_threshold",
      hitl_budget_threshold: 0.2,
      probabilistic_deny: true,
      deny_jitter_ratio: 0.1,
    });
    expect(r.stdout.trimEnd().split("\n")).toHaveLength(1);
  });

  it("evaluate exits 0 on ALLOW and 3 on a replayed nonce; show sees both calls", async () => {
    const s = await create("--budget", "1");
    const ok = await evaluate(s, "n1", "--params", '{"q":"leash"}', "--estimate", "0.25");
    expect(ok.code).toBe(0);
    expect(json(ok)).toMatchObject({
      session_id: s,
      call_number: 1,
      verdict: "ALLOW",
      reason: "within_thresholds",
      budget_remaining_usd: "0.75",
      reservation_id: `${s}#1`,
    });
    const replay = await evaluate(s, "n1", "--params", '{"q":"leash"}');
    expect(replay.code).toBe(3);
    expect(json(replay)).toMatchObject({ verdict: "DENY", reason: "policy_violation:duplicate_nonce" });

    const shown = await L(["session", "show", s]);
    expect(shown.code).toBe(0);
    expect(json(shown)).toMatchObject({ session_id: s, call_count: 2, budget_remaining_usd: "0.75" });
  });

  it("prints nanosecond times as strings of their exact integer, never as rounded JSON numbers", async () => {
    const s = await create();
    expect((await evaluate(s, "n1", "--params", '{"q":1}')).code).toBe(0);
    const outputs = [
      json(await L(["session", "show", s])),
      json(await L(["session", "reset", s, "--operator", "alice"])),
    ];
    for (const output of outputs) {
      const times = nanosecondFields(output).filter(([, v]) => v !== null);
      expect(times.map(([path]) => path)).toContain(".state.session_started_ns");
      expect(times.map(([path]) => path)).toContain(".state.last_activity_ns");
      for (const [path, v] of times) {
        expect(typeof v, path).toBe("string");
        // The integer the double holds, digit for digit: not JavaScript's shortest rounding of it.
        expect(BigInt(Number(v)).toString(), path).toBe(v);
        expect(Number(v), path).toBeGreaterThan(2 ** 53);
      }
    }
  });

  it("a DENY trips the circuit until an operator resets it", async () => {
    const s = await create();
    expect((await evaluate(s, "1")).code).toBe(0);
    expect((await evaluate(s, "1")).code).toBe(3);
    const blocked = await evaluate(s, "2");
    expect(blocked.code).toBe(3);
    expect(json(blocked).reason).toBe("circuit_open");

    const reset = await L(["session", "reset", s, "--operator", "alice"]);
    expect(reset.code).toBe(0);
    expect(json(reset)).toMatchObject({ status: "ACTIVE", state: { circuit_tripped: false } });
    expect((await evaluate(s, "3")).code).toBe(0);
  });

  it("HITL exits 4, and after resume --decision approve exactly the paused call goes through", async () => {
    const s = await create("--hitl", "always");
    const params = '{"amount":100,"to":"acct_1"}';
    const paused = await evaluate(s, "w1", "--params", params);
    expect(paused.code).toBe(4);
    expect(json(paused)).toMatchObject({ verdict: "HITL", reason: "hitl_all_calls" });
    expect(json(await L(["session", "show", s])).status).toBe("PAUSED");

    const resumed = await L(["session", "resume", s, "--decision", "approve", "--operator", "alice"]);
    expect(resumed.code).toBe(0);
    expect(json(resumed).state.pending_transition).toMatchObject({ decision: "approve" });

    const approved = await evaluate(s, "w1", "--params", params);
    expect(approved.code).toBe(0);
    expect(json(approved)).toMatchObject({ verdict: "ALLOW", reason: "hitl_transition:approve" });
    expect(json(await L(["session", "show", s])).status).toBe("ACTIVE");
    // An approval is single use: the same dispatch again is a replay.
    const replay = await evaluate(s, "w1", "--params", params);
    expect(replay.code).toBe(3);
    expect(json(replay).reason).toBe("policy_violation:duplicate_resume_no_effect");
  });

  it("an approval covers only the paused call's params", async () => {
    const s = await create("--hitl", "always");
    expect((await evaluate(s, "w1", "--params", '{"to":"acct_1"}')).code).toBe(4);
    expect((await L(["session", "resume", s, "--decision", "approve", "--operator", "alice"])).code).toBe(0);
    const evil = await evaluate(s, "w1", "--params", '{"to":"attacker"}');
    expect(evil.code).toBe(3);
    expect(json(evil).reason).toBe("hitl_transition:digest_mismatch");
  });

  it("resume --decision modify releases the edited call named by nonce and `leash hash` digest", async () => {
    const s = await create("--hitl", "always");
    expect((await evaluate(s, "7", "--params", '{"amount":100}')).code).toBe(4);
    const edited = '{"amount":50}';
    const digest = (await leash(["hash"], edited)).stdout.trim();
    const resumed = await L([
      "session",
      "resume",
      s,
      "--decision",
      "modify",
      "--operator",
      "alice",
      "--successor-nonce",
      "8",
      "--successor-digest",
      digest,
    ]);
    expect(resumed.code).toBe(0);
    // The successor goes through: nonce 8 is read as the number 8 by both --successor-nonce and --nonce.
    const successor = await evaluate(s, "8", "--params", edited);
    expect(successor.code).toBe(0);
    expect(json(successor)).toMatchObject({ verdict: "ALLOW", reason: "hitl_transition:modify_successor" });
  });

  it("evaluate hashes --params as the reference does (1e16, 10.0, -0.0, 1.5e300), and a modify bound to that digest releases the call", async () => {
    const s = await create("--hitl", "always");
    const params = '{"amount": 1e16, "fee": 10.0, "refund": -0.0}';
    const digest = pythonCanonicalHash(params)!;
    const paused = await evaluate(s, "1", "--params", params);
    expect(paused.code).toBe(4);
    expect(json(paused)).toMatchObject({ verdict: "HITL", params_hash: digest });
    const file = join(store.dir, "edited.json");
    writeFileSync(file, '{"amount": 1.5e300}');
    const editedDigest = pythonCanonicalHash('{"amount": 1.5e300}')!;
    expect((await leash(["hash", file])).stdout).toBe(`${editedDigest}\n`);
    const resumed = await L([
      "session",
      "resume",
      s,
      "--decision",
      "modify",
      "--operator",
      "alice",
      "--successor-nonce",
      "2",
      "--successor-digest",
      editedDigest,
    ]);
    expect(resumed.code).toBe(0);
    const successor = await evaluate(s, "2", "--params", `@${file}`);
    expect(json(successor)).toMatchObject({
      verdict: "ALLOW",
      reason: "hitl_transition:modify_successor",
      params_hash: editedDigest,
    });
  });

  it("resume refuses when nothing awaits a human, and modify without its successor", async () => {
    const s = await create();
    const none = await L(["session", "resume", s, "--decision", "approve", "--operator", "alice"]);
    expect(none.code).toBe(1);
    expectOneLineError(none.stderr);
    expect(none.stderr).toContain("no_pending_request");
    const modify = await L(["session", "resume", s, "--decision", "modify", "--operator", "alice"]);
    expect(modify.code).toBe(2);
    expect(modify.stderr).toContain("--successor-nonce");
  });

  it("post-exec settles a hold and prints exact decimal amounts", async () => {
    const s = await create("--budget", "1");
    // 0.1 + 0.2 in binary floats is 0.30000000000000004; the budget must not drift.
    expect(json(await evaluate(s, "a", "--estimate", "0.1")).budget_remaining_usd).toBe("0.9");
    expect(json(await evaluate(s, "b", "--estimate", "0.2")).budget_remaining_usd).toBe("0.7");
    const settled = await L(["post-exec", "--session", s, "--call", "2", "--actual", "0.15"]);
    expect(settled.code).toBe(0);
    expect(json(settled)).toEqual({
      session_id: s,
      call_number: 2,
      actual_usd: "0.15",
      overrun_usd: "0",
      budget_remaining_usd: "0.75",
      replayed: false,
      late: false,
    });
    const again = await L(["post-exec", "--session", s, "--call", "2", "--actual", "0.15"]);
    expect(json(again)).toMatchObject({ replayed: true, budget_remaining_usd: "0.75" });
    const missing = await L(["post-exec", "--session", s, "--call", "9", "--actual", "1"]);
    expect(missing.code).toBe(1);
    expect(missing.stderr).toContain("reservation_not_found");
  });

  it("expire charges holds past the config file's reservation TTL at their estimate", async () => {
    const config = join(store.dir, "short-ttl.json");
    writeFileSync(config, JSON.stringify({ reservation_ttl_s: 0.001 }));
    const s = await create("--budget", "1");
    const held = await L([
      "evaluate",
      "--session",
      s,
      "--tool",
      "t",
      "--nonce",
      "1",
      "--estimate",
      "0.5",
      "--config",
      config,
    ]);
    expect(json(held).budget_remaining_usd).toBe("0.5");
    await new Promise((resolve) => setTimeout(resolve, 20));
    const expired = await L(["expire", "--config", config]);
    expect(expired.code).toBe(0);
    expect(json(expired)).toEqual({ expired: 1, hitl_expired: 0 });
    expect(json(await L(["session", "show", s])).budget_remaining_usd).toBe("0.5");
    expect(json(await L(["expire"]))).toEqual({ expired: 0, hitl_expired: 0 });
  });

  it("guard create nests budgets; a child larger than its parent's remaining is refused", async () => {
    const team = await L(["guard", "create", "team", "--limit", "1"]);
    expect(team.code).toBe(0);
    expect(json(team)).toEqual({ guard_id: "team", limit_usd: "1", parent_guard_id: null });
    expect((await L(["guard", "create", "sub", "--limit", "0.5", "--parent", "team"])).code).toBe(0);
    expect((await L(["guard", "create", "team", "--limit", "1"])).code).toBe(0);

    const big = await L(["guard", "create", "big", "--limit", "5", "--parent", "team"]);
    expect(big.code).toBe(1);
    expectOneLineError(big.stderr);
    expect(big.stderr).toContain("child_exceeds_parent");

    const s = await create("--budget", "0.4", "--parent-guard", "sub");
    expect(json(await evaluate(s, "1", "--estimate", "0.3")).verdict).toBe("ALLOW");
    const over = await evaluate(s, "2", "--estimate", "0.3");
    expect(over.code).toBe(3);
    expect(json(over).reason).toBe("budget_overrun");
  });

  it("reads params from @file and leaves non-object params for the engine to deny", async () => {
    const s = await create();
    const file = join(store.dir, "params.json");
    writeFileSync(file, '{"path": "/etc/hosts"}');
    const r = await evaluate(s, "1", "--params", `@${file}`);
    expect(json(r)).toMatchObject({ verdict: "ALLOW" });
    const malformed = await evaluate(s, "2", "--params", "[1,2]");
    expect(malformed.code).toBe(3);
    expect(json(malformed).reason).toBe("policy_violation:malformed_input");
    const bad = await evaluate(s, "3", "--params", "{nope");
    expect(bad.code).toBe(2);
    expect(bad.stderr).toContain("--params: invalid JSON");
  });

  it("reports an unknown session in one line with exit 1", async () => {
    for (const argv of [
      ["session", "show", "nope"],
      ["evaluate", "--session", "nope", "--tool", "t"],
      ["session", "reset", "nope", "--operator", "alice"],
    ]) {
      const r = await L(argv);
      expect(r.code).toBe(1);
      expect(r.stdout).toBe("");
      expectOneLineError(r.stderr);
      expect(r.stderr).toBe('leash: error: unknown session "nope" (session_not_found)\n');
    }
  });

  it("takes the guard config from a JSON or YAML file, with flags overriding it field by field", async () => {
    const jsonFile = join(store.dir, "leash.json");
    writeFileSync(
      jsonFile,
      JSON.stringify({ store: store.url, guard: { budget_usd: 5, hitl_mode: "never" } }),
    );
    const yamlFile = join(store.dir, "leash.yaml");
    writeFileSync(
      yamlFile,
      `store: "${store.url}"\nguard:\n  budget_usd: 5\n  hitl_mode: never\nreservation_ttl_s: 60\n`,
    );
    for (const file of [jsonFile, yamlFile]) {
      // No --store: the file's store is used.
      const r = await leash(
        ["session", "create", "--agent", "bot", "--config", file, "--budget", "7", "--max-repeat", "2"],
        "",
        KEY_ENV,
      );
      expect(r.code).toBe(0);
      expect(json(r).config).toEqual({ budget_usd: 7, hitl_mode: "never", max_repeat_calls: 2 });
      const plain = await leash(["session", "create", "--agent", "bot", "--config", file], "", KEY_ENV);
      expect(json(plain).config).toEqual({ budget_usd: 5, hitl_mode: "never" });
    }
  });

  it("exits 2 naming the field of a bad config file", async () => {
    const badType = join(store.dir, "bad.yaml");
    writeFileSync(badType, "guard:\n  budget_usd: lots\n");
    const r = await L(["session", "create", "--agent", "bot", "--config", badType]);
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(badType);
    expect(r.stderr).toContain("/guard/budget_usd");

    const unknown = join(store.dir, "bad.json");
    writeFileSync(unknown, JSON.stringify({ gaurd: {} }));
    const u = await L(["migrate", "--config", unknown]);
    expect(u.code).toBe(2);
    expectOneLineError(u.stderr);
    expect(u.stderr).toContain('unknown field "gaurd"');
  });

  it("picks the store: flag over LEASH_STORE over the config file", async () => {
    const other = await testStore(kind);
    try {
      const config = join(store.dir, "leash.json");
      writeFileSync(config, JSON.stringify({ store: other.url }));
      // The env var beats the config file: the session lands in this test's store.
      const viaEnv = await leash(
        ["session", "create", "--agent", "bot", "--session", "e", "--config", config],
        "",
        { ...KEY_ENV, LEASH_STORE: store.url },
      );
      expect(viaEnv.code).toBe(0);
      expect((await leash(["session", "show", "e", "--store", store.url])).code).toBe(0);
      expect((await leash(["session", "show", "e", "--store", other.url])).code).toBe(1);
      // The flag beats both, even a broken env var. (show only reads: it needs no signing key.)
      const viaFlag = await leash(["session", "show", "e", "--store", store.url, "--config", config], "", {
        LEASH_STORE: "mysql://nowhere",
      });
      expect(viaFlag.code).toBe(0);
      // Without flag or env, the config file's store.
      const viaFile = await leash(
        ["session", "create", "--agent", "bot", "--session", "f", "--config", config],
        "",
        KEY_ENV,
      );
      expect(viaFile.code).toBe(0);
      expect((await leash(["session", "show", "f", "--store", other.url])).code).toBe(0);
    } finally {
      await other.cleanup();
    }
  });

  it("enforces a time window with the engine's real clock, and checks the window flags go together", async () => {
    const session = await create("--window-seconds", "60", "--window-max", "2");
    expect((await evaluate(session, "1", "--params", '{"q":1}')).code).toBe(0);
    expect((await evaluate(session, "2", "--params", '{"q":2}')).code).toBe(0);
    const third = await evaluate(session, "3", "--params", '{"q":3}');
    expect(third.code).toBe(3);
    expect(json(third).reason).toBe("window_exceeded");
    const half = await L(["session", "create", "--agent", "bot", "--window-max", "5"]);
    expect(half.code).toBe(2);
    expect(half.stderr).toContain("--window-seconds and --window-max go together");
  });
});
