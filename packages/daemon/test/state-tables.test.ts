// The daemon refuses to start on state tables its own chain contradicts (a budget account edited behind
// its back), and starts once `recover` has rebuilt them from the chain.

import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { recover } from "@leash/recovery";
import type { TestStore } from "@leash/test-stores";
import { afterEach, describe, expect, it } from "vitest";
import { parseDaemonConfig, startDaemon } from "../src/index.js";
import { configObject, openStore, quietLogger, scratchDir } from "./support.js";

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

describe.each(["sqlite", "postgres"] as const)("daemon start on %s", (kind) => {
  it("refuses a hand-edited spent_usd, and starts after recover --repair", async () => {
    store = await openStore(kind);
    const key = generateKeyPair();
    const engine = createEngine({ substrate: store.substrate, signer: key.signer });
    const session = await engine.register({ agent_id: "bot", config: { budget_usd: 1 } });
    const r = await engine.evaluate({
      session_id: session.session_id,
      tool_name: "t",
      params: {},
      nonce: "1",
      estimated_cost_usd: 0.4,
    });
    await engine.postExec({
      session_id: session.session_id,
      call_number: r.call_number,
      actual_cost_usd: "0.4",
    });
    const edited = await store.another();
    const accountId = `session:${session.session_id}`;
    await edited.transaction(async (tx) => {
      const account = (await tx.budgets.getAccount(accountId))!;
      await tx.budgets.updateAccount({ ...account, spent_usd: "0" });
    });

    const dir = scratchDir();
    const start = () =>
      startDaemon({
        config: parseDaemonConfig(configObject(dir)),
        signer: key.signer,
        store: store!.url!,
        socketPath: join(dir, "leash.sock"),
        logger: quietLogger(),
      });
    await expect(start()).rejects.toThrow(
      `the state tables disagree with the replayed chain: budget_accounts ${accountId} spent_usd is "0" in the store, but the chain gives "0.4"`,
    );

    const report = await recover(await store.another(), {
      publicKeys: [key.publicKeyHex],
      signer: key.signer,
      repair: true,
    });
    expect(report.ok).toBe(true);
    const daemon = await start();
    await daemon.close();
  }, 30_000);
});
