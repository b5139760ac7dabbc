// Two daemons on one PostgreSQL schema with one policy file: its rate and USD budget limits hold for the
// cluster (a limit of 5 allows exactly 5 calls, from both daemons together), and the chain replays.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import { replayChain } from "@leash/recovery";
import { type Payload, PreExecRequestSchema, RegisterRequestSchema } from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { parseDaemonConfig, startDaemon } from "../src/index.js";
import { RawClient } from "./raw-client.js";
import { ACME, configObject, openStore, quietLogger, scratchDir } from "./support.js";

/** The daemons of one cluster share the store and the signing key. */
const KEY = generateKeyPair();
// Windows far longer than the test, so it never straddles one.
const POLICY = `
version: 1
name: cluster
rules:
  - name: search-rate
    match: { tool: web_search }
    action: { rate: { limit: 5, window_s: 2592000, per: agent } }
  - name: pay-budget
    match: { tool: pay }
    action: { budget_usd: { limit: 0.05, period: month, per: agent } }
`;
const SESSIONS = 3;
const CALLS = 4;

const register: Payload = {
  case: "register",
  value: create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
};
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

describe("one policy, two daemons on one PostgreSQL schema", () => {
  const cleanup: Array<() => Promise<void> | void> = [];
  afterEach(async () => {
    for (const step of cleanup.splice(0).reverse()) await step();
  });

  it("a rate of 5 and a $0.05 budget allow exactly 5 calls across both daemons; the chain replays", async () => {
    const store = await openStore("postgres");
    cleanup.push(() => store.close());
    const dir = scratchDir();
    const policyFile = join(dir, "policy.yaml");
    writeFileSync(policyFile, POLICY);
    const config = parseDaemonConfig(configObject(dir, { policy: policyFile }));
    const clients: RawClient[] = [];
    for (const name of ["a", "b"]) {
      const daemon = await startDaemon({
        config,
        signer: KEY.signer,
        store: store.url!,
        socketPath: join(dir, `${name}.sock`),
        logger: quietLogger(),
      });
      cleanup.push(() => daemon.close());
      const client = await RawClient.connect(daemon.address, ACME);
      cleanup.push(() => client.close());
      clients.push(client);
    }
    /** SESSIONS sessions on each daemon, each calling `tool` CALLS times in turn, all sessions at once. */
    const hammer = async (tool: string): Promise<string[]> => {
      const runs = clients.flatMap((client) =>
        Array.from({ length: SESSIONS }, async () => {
          const reg = await client.request(register);
          const sessionId = (reg.payload.value as { sessionId: string }).sessionId;
          const reasons: string[] = [];
          for (let n = 1; n <= CALLS; n++) {
            const answer = await client.request(preExec(sessionId, n, tool));
            reasons.push((answer.payload.value as { reason: string }).reason);
          }
          return reasons;
        }),
      );
      return (await Promise.all(runs)).flat();
    };
    const allowed = (reasons: string[]) => reasons.filter((r) => r === "within_thresholds").length;

    const searches = await hammer("web_search");
    expect(allowed(searches)).toBe(5);
    expect(searches.filter((r) => r !== "within_thresholds")).toEqual(
      Array(2 * SESSIONS * CALLS - 5).fill("policy_violation:rule:search-rate"),
    );
    const pays = await hammer("pay");
    expect(allowed(pays)).toBe(5);
    expect(pays.filter((r) => r !== "within_thresholds")).toEqual(
      Array(2 * SESSIONS * CALLS - 5).fill("policy_violation:rule:pay-budget"),
    );

    const chain = await store.substrate.transaction((tx) => tx.chain.range(0, 100_000));
    const replayed = await replayChain(chain);
    expect(replayed.mismatch).toBeNull();
    expect(replayed.verdicts_checked).toBe(2 * 2 * SESSIONS * CALLS);
  }, 120_000);
});
