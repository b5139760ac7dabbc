// A running `leash serve` on a SQLite file whose session row was edited behind its back (the circuit flag
// cleared by SQL) after another process wrote it: the agent's next call is DENY fail_closed:state_unverified,
// naming the row, with nothing appended. (A daemon that starts on an edited store refuses to start: recover.)
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { sqlInFile } from "@leash/test-stores";
import { PreExecRequestSchema, type PreExecResponse, paramsDigest, paramsToJson } from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, configObject, ensureBuilt, openStore, scratchDir, serve } from "./support.js";

describe("a running leash serve and an edited SQLite row", () => {
  beforeAll(() => ensureBuilt(), 180_000);
  const cleanups: (() => Promise<void> | void)[] = [];
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
  });

  it("refuses the call on the edited session: DENY fail_closed:state_unverified, the chain unchanged", async () => {
    const store = await openStore("sqlite");
    cleanups.push(() => store.close());
    const dir = scratchDir();
    const keyFile = join(dir, "daemon.key");
    const key = generateKeyPair();
    writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
    const configFile = join(dir, "daemon.json");
    writeFileSync(configFile, JSON.stringify(configObject(dir)));
    const socket = join(dir, "leash.sock");
    const start = async () => {
      const daemon = await serve([
        "--config",
        configFile,
        "--store",
        store.url!,
        "--key-file",
        keyFile,
        "--socket",
        socket,
      ]);
      cleanups.push(() => {
        if (daemon.child.exitCode === null) daemon.child.kill("SIGKILL");
      });
      return daemon;
    };
    const preExec = async (client: RawClient, sessionId: string, n: number): Promise<PreExecResponse> => {
      const answer = await client.request({
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId,
          callNumber: BigInt(n),
          toolName: "web_search",
          toolParamsJson: paramsToJson({}),
          toolParamsHash: paramsDigest({}),
          estimatedCostUsd: 0.01,
          estimatedCostUsdDecimal: "0.01",
        }),
      });
      expect(answer.payload.case).toBe("preExecResponse");
      return answer.payload.value as PreExecResponse;
    };

    // The daemon runs; another process (an engine on the same file and key) opens a session and trips
    // its circuit. The daemon has never read that session's row.
    await start();
    const other = createEngine({ substrate: await store.another(), signer: key.signer });
    const { session_id: sessionId } = await other.register({
      agent_id: "research-bot",
      organization_id: "acme",
      config: { max_repeat_calls: 2 },
    });
    for (let n = 0; n < 3; n++)
      await other.evaluate({ session_id: sessionId, tool_name: "same", params: {}, nonce: `r${n}` });
    expect((await other.getSession(sessionId)).state.circuit_tripped).toBe(true);

    const path = store.path!;
    sqlInFile(
      path,
      "UPDATE leash_sessions SET state = json_set(state, '$.circuit_tripped', json('false')) WHERE session_id = ?",
      [sessionId],
    );
    const count = () => (sqlInFile(path, "SELECT count(*) AS n FROM leash_chain")[0] as { n: number }).n;
    const before = count();

    const again = await RawClient.connect(socket, ACME);
    const refused = await preExec(again, sessionId, 4);
    expect(refused.reason).toBe("fail_closed:state_unverified");
    expect(refused.humanReadableReason).toContain(`sessions row ${JSON.stringify(sessionId)}`);
    expect(refused.receipt).toBe("");
    expect(count()).toBe(before);
    again.close();
  }, 120_000);
});
