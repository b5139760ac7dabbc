// The daemon's policy file over a real socket, on SQLite and PostgreSQL: rule verdicts reach the agent and
// /metrics per rule (monitor rules as would-be verdicts); a reload swaps the version atomically, a broken
// file keeps the old one and says why; the chain replays with the version in force at each entry.
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { loadPolicy } from "@leash/policy";
import { replayChain } from "@leash/recovery";
import { type StoreKind, startServeFixture } from "@leash/test-stores";
import { type Payload, PreExecRequestSchema, RegisterRequestSchema } from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { type Daemon, parseDaemonConfig, startDaemon } from "../src/index.js";
import { RawClient } from "./raw-client.js";
import {
  ACME,
  configObject,
  ensureBuilt,
  openStore,
  quietLogger,
  type Running,
  runDaemon,
} from "./support.js";

const V1 = `
version: 1
name: ops
rules:
  - { name: no-db, match: { tool: db.drop }, action: deny, message: no dropping }
  - { name: shadow-search, match: { tool: search }, action: deny, message: would refuse, mode: monitor }
`;
const V2 = `
version: 1
name: ops
default: deny
rules:
  - { name: reads, match: { tool: fs.read }, action: allow }
`;

const register = (agentId: string): Payload => ({
  case: "register",
  value: create(RegisterRequestSchema, { agentId, sessionId: "" }),
});
const preExec = (sessionId: string, n: number, toolName: string): Payload => ({
  case: "preExec",
  value: create(PreExecRequestSchema, {
    sessionId,
    callNumber: BigInt(n),
    toolName,
    toolParamsJson: `{"n":${n}}`,
    estimatedCostUsdDecimal: "0.01",
    nonce: BigInt(n),
  }),
});

describe.each(["sqlite", "postgres"] as StoreKind[])("the daemon's policy on %s", (kind) => {
  let running: Running | undefined;
  let client: RawClient | undefined;
  afterEach(async () => {
    client?.close();
    await running?.stop();
    running = undefined;
  });

  it("decides by rule, counts per rule in /metrics, reloads atomically, keeps the old version on a broken file", async () => {
    const dir = mkdtempSync(join(tmpdir(), "leash-policy-"));
    const file = join(dir, "policy.yaml");
    writeFileSync(file, V1);
    running = await runDaemon(kind, { http: "127.0.0.1:0", extra: { policy: file } });
    client = await RawClient.connect(running.socket, ACME);
    const registered = await client.request(register("writer-bot"));
    const sid = (registered.payload.value as { sessionId: string }).sessionId;
    const reasonOf = async (n: number, tool: string) =>
      ((await client!.request(preExec(sid, n, tool))).payload.value as { reason: string }).reason;

    expect(await reasonOf(1, "db.drop")).toBe("policy_violation:rule:no-db");
    expect(await reasonOf(2, "search")).toBe("within_thresholds"); // monitor never blocks

    const metrics = await (await fetch(`http://${running.daemon.httpAddress}/metrics`)).text();
    expect(metrics).toContain(
      'leash_daemon_policy_rule_verdicts_total{rule="no-db",verdict="DENY",mode="enforce"} 1',
    );
    expect(metrics).toContain(
      'leash_daemon_policy_rule_verdicts_total{rule="shadow-search",verdict="DENY",mode="monitor"} 1',
    );

    writeFileSync(file, "version: 1\nname: ops\nrules:\n  - { name: bad, action: deny }\n");
    const refused = running.daemon.reloadPolicy();
    expect(refused).toMatchObject({ ok: false });
    expect(refused?.ok === false && refused.error).toMatch(/policy\.yaml.*rules\[0\]/);
    expect(await reasonOf(3, "db.drop")).toBe("policy_violation:rule:no-db"); // the old version stays

    writeFileSync(file, V2);
    expect(running.daemon.reloadPolicy()).toMatchObject({ ok: true, changed: true });
    expect(await reasonOf(4, "search")).toBe("policy_violation:default_deny");
    expect(await reasonOf(5, "fs.read")).toBe("within_thresholds");

    const entries = await running.store.substrate.transaction((tx) => tx.chain.range(0, 1000));
    expect(entries.filter((e) => e.kind === "policy_published")).toHaveLength(2);
    const replayed = await replayChain(entries);
    expect(replayed.mismatch).toBeNull();
    expect(replayed.proved_from).toBe(0);
  });
});

const SAME = `
version: 1
name: same
rules:
  - { name: no-db, match: { tool: db.drop }, action: deny, message: no }
  - { name: big, match: { tool: pay }, when: "has(args.n) && args.n > 5", action: deny, message: too big }
  - { name: search-rate, match: { tool: search }, action: { rate: { limit: 2, window_s: 2592000, per: session } } }
  - { name: shadow, match: { tool: "*" }, action: deny, message: would, mode: monitor }
`;
const CALLS: Array<[string, number]> = [
  ["search", 1],
  ["db.drop", 2],
  ["pay", 3],
  ["pay", 9],
  ["search", 5],
  ["search", 6],
  ["fs.read", 7],
];

describe.each(["sqlite", "postgres"] as StoreKind[])("one policy, library and daemon (%s)", (kind) => {
  it("decides the same calls the same way as a library engine on memory", async () => {
    const dir = mkdtempSync(join(tmpdir(), "leash-policy-same-"));
    const file = join(dir, "same.yaml");
    writeFileSync(file, SAME);
    const running = await runDaemon(kind, { extra: { policy: file } });
    const c = await RawClient.connect(running.socket, ACME);
    const memory = await openStore("memory");
    try {
      const sid = ((await c.request(register("writer-bot"))).payload.value as { sessionId: string })
        .sessionId;
      const viaDaemon: string[] = [];
      for (const [tool, n] of CALLS) {
        const value = (await c.request(preExec(sid, n, tool))).payload.value as { reason: string };
        viaDaemon.push(value.reason);
      }
      const engine = createEngine({
        substrate: memory.substrate,
        signer: generateKeyPair().signer,
        policy: loadPolicy(SAME),
      });
      await engine.register({ agent_id: "writer-bot", session_id: "lib", config: { budget_usd: 1 } });
      const viaLibrary: string[] = [];
      for (const [tool, n] of CALLS) {
        const r = await engine.evaluate({
          session_id: "lib",
          tool_name: tool,
          params: { n },
          nonce: n,
          estimated_cost_usd: "0.01",
        });
        viaLibrary.push(r.reason);
      }
      expect(viaDaemon).toEqual(viaLibrary);
      expect(viaDaemon).toEqual([
        "within_thresholds",
        "policy_violation:rule:no-db",
        "within_thresholds",
        "policy_violation:rule:big",
        "within_thresholds",
        "policy_violation:rule:search-rate",
        "within_thresholds",
      ]);
    } finally {
      c.close();
      await running.stop();
      await memory.close();
    }
  });
});

describe("a signed policy (policyPublicKey)", () => {
  it("refuses an unsigned or re-written file at start and at reload; a signed one loads", async () => {
    const operator = generateKeyPair();
    const dir = mkdtempSync(join(tmpdir(), "leash-policy-signed-"));
    const file = join(dir, "policy.yaml");
    const sign = () =>
      writeFileSync(`${file}.sig`, Buffer.from(operator.signer.sign(readFileSync(file))).toString("hex"));
    writeFileSync(file, V1);
    const store = await openStore("sqlite");
    const options = {
      config: parseDaemonConfig(configObject(dir)),
      signer: generateKeyPair().signer,
      store: store.url as string,
      socketPath: join(dir, "leash.sock"),
      logger: quietLogger(),
      policyFile: file,
      policyPublicKey: operator.publicKeyHex,
    };
    let daemon: Daemon | undefined;
    try {
      await expect(startDaemon(options)).rejects.toThrow(/policy\.yaml\.sig: missing/);
      sign();
      daemon = await startDaemon(options);
      writeFileSync(file, V2); // not signed again
      const refused = daemon.reloadPolicy();
      expect(refused?.ok === false && refused.error).toMatch(/does not verify/);
      sign();
      expect(daemon.reloadPolicy()).toMatchObject({ ok: true, changed: true });
    } finally {
      await daemon?.close();
      await store.close();
    }
  });
});

describe("leash serve --policy", () => {
  it("reloads on SIGHUP: a broken file is refused and logged, a good one swapped in", async () => {
    ensureBuilt();
    const dir = mkdtempSync(join(tmpdir(), "leash-policy-serve-"));
    const file = join(dir, "policy.yaml");
    writeFileSync(file, V1);
    const fixture = await startServeFixture({ agents: { "writer-bot": { guard: {} } }, policyFile: file });
    const c = await RawClient.connect(fixture.socketPath, {
      key: Buffer.from(fixture.hmacKey, "hex"),
      keyId: fixture.keyId,
    });
    try {
      const sid = ((await c.request(register("writer-bot"))).payload.value as { sessionId: string })
        .sessionId;
      const reasonOf = async (n: number, tool: string) =>
        ((await c.request(preExec(sid, n, tool))).payload.value as { reason: string }).reason;
      const logged = async (text: string) => {
        for (let i = 0; i < 200 && !fixture.process.stderr().includes(text); i++) {
          await new Promise((r) => setTimeout(r, 50));
        }
        return fixture.process.stderr().includes(text);
      };
      expect(await reasonOf(1, "db.drop")).toBe("policy_violation:rule:no-db");
      writeFileSync(file, "version: 1\nname: ops\nrules: [ { name: x, action: nope } ]\n");
      fixture.process.child.kill("SIGHUP");
      expect(await logged("policy reload refused")).toBe(true);
      expect(await reasonOf(2, "db.drop")).toBe("policy_violation:rule:no-db");
      writeFileSync(file, V2);
      fixture.process.child.kill("SIGHUP");
      expect(await logged("policy reloaded")).toBe(true);
      expect(await reasonOf(3, "db.drop")).toBe("policy_violation:default_deny");
      c.close();
      await fixture.stop();
      const verified = await fixture.cli([
        "verify",
        "--replay",
        "--store",
        fixture.store,
        "--pubkey",
        join(fixture.dir, "leash.pub.hex"),
      ]);
      expect(verified.code, verified.stderr).toBe(0);
    } finally {
      c.close();
      await fixture.remove();
    }
  }, 60_000);
});
