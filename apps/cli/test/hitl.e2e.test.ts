// `leash hitl …` run as the built binary against real SQLite and PostgreSQL stores: the operator's
// list, show and answers, one-line refusals for answered and expired requests, and the agent's re-dispatch.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { CLI_BIN, pythonCanonicalHash, REPO_ROOT, scratchDir, testKey } from "./helpers.js";
import { STORE_KINDS, type TestStore, testStore } from "./stores.js";

const keys = scratchDir();
afterAll(() => keys.cleanup());
const KEY = testKey(keys.dir);

function bin(args: string[], { key = true }: { key?: boolean } = {}) {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`npx tsc --build\` first`);
  const { LEASH_STORE: _store, LEASH_SIGNING_KEY: _key, ...rest } = process.env;
  const r = spawnSync(process.execPath, [CLI_BIN, ...args], {
    cwd: REPO_ROOT,
    encoding: "utf8",
    env: key ? { ...rest, LEASH_SIGNING_KEY: KEY.pem } : rest,
    timeout: 30_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** Each test spawns the binary about ten times (a second or two each on a loaded machine). */
const SPAWNS = { timeout: 90_000 };

/** 10.0 keeps its text: the digest is the reference's, and `show` prints it as hashed. */
const PARAMS = '{"to":"acct-9","amount":10.0,"memo":"ünï"}';

describe.each(STORE_KINDS)("leash hitl on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });
  const L = (...args: string[]) => bin([...args, "--store", store.url]);
  const json = (r: { code: number | null; stdout: string; stderr: string }) => {
    expect(r.stderr).toBe("");
    return JSON.parse(r.stdout);
  };
  const evaluate = (session: string, nonce: string, params: string) =>
    L("evaluate", "--session", session, "--tool", "pay", "--nonce", nonce, "--params", params);
  /** A session paused on pay(PARAMS) with nonce w1; returns the session and request ids. */
  const paused = (...flags: string[]) => {
    const s = json(L("session", "create", "--agent", "bot", "--hitl", "always", ...flags))
      .session_id as string;
    const h = evaluate(s, "w1", PARAMS);
    expect(h.code).toBe(4);
    const id = json(h).hitl_request_id as string;
    expect(typeof id).toBe("string");
    return { s, id };
  };

  it("list and show a pending request; approve once; the exact call then runs once", SPAWNS, () => {
    const { s, id } = paused();
    const listed = L("hitl", "list", "--status", "pending");
    expect(listed.code).toBe(0);
    expect(listed.stdout).toMatch(new RegExp(`^${id}  pending   pay  session ${s} call 1  expires \\d{4}-`));
    // Listing is a read: no signing key needed.
    const unsigned = bin(["hitl", "list", "--store", store.url, "--status", "pending"], { key: false });
    expect([unsigned.code, unsigned.stdout, unsigned.stderr]).toEqual([0, listed.stdout, ""]);

    const shown = L("hitl", "show", id);
    expect(shown.code).toBe(0);
    expect(shown.stdout).toContain(`digest   ${pythonCanonicalHash(PARAMS)}\n`);
    expect(shown.stdout).toContain(
      'params\n  {\n    "amount": 10.0,\n    "memo": "ünï",\n    "to": "acct-9"\n  }',
    );
    expect(shown.stdout).toMatch(/status {3}pending; expires .* \(in 1[45]m \d+s\)/);

    const approved = L("hitl", "approve", id, "--operator", "alice", "--comment", "known payee");
    expect(approved.code).toBe(0);
    expect(json(approved)).toMatchObject({
      request_id: id,
      status: "decided",
      decision: "approve",
      operator_id: "alice",
      comment: "known payee",
    });
    const twice = L("hitl", "reject", id, "--operator", "bob");
    expect([twice.code, twice.stdout]).toEqual([1, ""]);
    expect(twice.stderr).toMatch(
      /^leash: error: request .* was already decided: approve by "alice" \(hitl_already_decided\)\n$/,
    );

    const run = evaluate(s, "w1", PARAMS);
    expect(run.code).toBe(0);
    expect(json(run)).toMatchObject({ verdict: "ALLOW", reason: "hitl_transition:approve" });
    const again = evaluate(s, "w1", PARAMS);
    expect(again.code).toBe(3);
    expect(json(again).reason).toBe("policy_violation:duplicate_resume_no_effect");
  });

  it(
    "modify --params FILE: bad params change nothing; the successor runs with the operator's params",
    SPAWNS,
    () => {
      const { s, id } = paused();
      const missing = L("hitl", "modify", id, "--operator", "alice");
      expect([missing.code, missing.stderr]).toEqual([
        2,
        "leash: error: required option '--params <json|file>' not specified\n",
      ]);
      const array = L("hitl", "modify", id, "--operator", "alice", "--params", keys.write("arr.json", "[1]"));
      expect([array.code, array.stderr]).toEqual([
        2,
        "leash: error: --params must be a JSON object (the edited call's params)\n",
      ]);

      const text = '{"to":"acct-9","amount":5.0,"memo":"halved"}';
      const modified = json(
        L("hitl", "modify", id, "--operator", "alice", "--params", keys.write("edited.json", text)),
      );
      // The digest of the text as written (5.0 is not 5 to the reference), as the agent's params hash.
      expect(modified.successor.args_digest).toBe(pythonCanonicalHash(text));
      const run = evaluate(s, String(modified.successor.nonce), text);
      expect(run.code).toBe(0);
      expect(json(run)).toMatchObject({ verdict: "ALLOW", reason: "hitl_transition:modify_successor" });
    },
  );

  it(
    "an expired request: answering says so and records nothing; the next attempt is DENY hitl_timeout",
    SPAWNS,
    async () => {
      const { s, id } = paused("--hitl-timeout", "0.2");
      await new Promise((resolve) => setTimeout(resolve, 300));
      // A read needs no signing key: the due request is listed as expired, and nothing is recorded.
      const unsigned = bin(["hitl", "list", "--store", store.url, "--status", "expired"], { key: false });
      expect([unsigned.code, unsigned.stderr]).toEqual([0, ""]);
      expect(unsigned.stdout).toMatch(new RegExp(`^${id}  expired   pay  session ${s} call 1`));
      const stillStored = bin(["hitl", "show", id, "--store", store.url, "--json"], { key: false });
      expect(JSON.parse(stillStored.stdout).status).toBe("pending");
      const late = L("hitl", "approve", id, "--operator", "alice");
      expect(late.code).toBe(1);
      expect(late.stderr).toMatch(/^leash: error: request .* expired unanswered \(hitl_expired\)\n$/);
      const expired = json(L("hitl", "list", "--status", "expired", "--json")) as { request_id: string }[];
      expect(expired.map((r) => r.request_id)).toEqual([id]);
      expect(L("hitl", "show", id).stdout).toContain("answer   expired by system:timeout");
      const told = evaluate(s, "w1", PARAMS);
      expect(told.code).toBe(3);
      expect(json(told).reason).toBe("hitl_timeout");

      const unknown = L("hitl", "approve", "no-such", "--operator", "alice");
      expect([unknown.code, unknown.stderr]).toEqual([
        1,
        'leash: error: no HITL request "no-such" (hitl_not_found)\n',
      ]);
      expect(L("hitl", "list", "--status", "pending").stdout).toBe("no HITL requests\n");
    },
  );
});

it("leash hitl --help names every subcommand", () => {
  const help = bin(["hitl", "--help"]);
  expect(help.code).toBe(0);
  for (const sub of ["list", "show", "approve", "reject", "defer", "escalate", "modify"]) {
    expect(help.stdout).toMatch(new RegExp(`\\n  ${sub}\\b`));
  }
});
