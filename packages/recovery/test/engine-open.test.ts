// The checkpoint recovery writes is where an engine starts verifying its store; what recovery finds
// tampered, the engine refuses too. Real substrates, the real checkpoint file.
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { createEngine } from "@leash/engine";
import { afterEach, describe, expect, it } from "vitest";
import { fileCheckpointStore, recover } from "../src/index.js";
import { KINDS, type Kind, openStore, param, SQL_KINDS, type TestStore } from "./support.js";

const KEY = generateKeyPair();

let store: TestStore | undefined;
afterEach(async () => {
  await store?.close();
  store = undefined;
});

async function seeded(kind: Kind, calls: number): Promise<TestStore> {
  store = await openStore(kind);
  const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
  await engine.register({ agent_id: "bot", session_id: "s", config: {} });
  for (let i = 0; i < calls; i++) await engine.evaluate({ session_id: "s", tool_name: "t", nonce: i });
  return store;
}

describe.each(KINDS)("%s: recover, then an engine", (kind) => {
  it("opens from the checkpoint recover wrote, reading only its head and what came after", async () => {
    const s = await seeded(kind, 6);
    const checkpointStore = fileCheckpointStore(join(s.dir, "checkpoint.json"));
    const report = await recover(s.substrate, { publicKeys: [KEY.publicKeyHex], checkpointStore });
    expect(report.chain.checkpoint.written).toEqual({ count: 7, head_hash: report.chain.head_hash });

    const engine = createEngine({ substrate: s.substrate, signer: KEY.signer, checkpointStore });
    expect(await engine.open()).toMatchObject({
      verified: true,
      trusted_from: "checkpoint",
      from_seq: 6,
      entries_read: 1,
      count: 7,
    });
    expect((await engine.evaluate({ session_id: "s", tool_name: "t", nonce: 100 })).verdict).toBe("ALLOW");
    // A clean close moves the checkpoint to the head, for the next start.
    expect(await engine.close()).toMatchObject({ count: 8 });
    expect(await checkpointStore.read()).toMatchObject({ count: 8 });
  });
});

describe.each(SQL_KINDS)("%s: a store recover refuses", (kind) => {
  it("is refused by an engine as well: DENY fail_closed:chain_unverified, at the same entry", async () => {
    const s = await seeded(kind, 4);
    await s.sql(
      `UPDATE leash_chain SET body = replace(body, '"nonce":2', '"nonce":9') WHERE seq = ${param(s, 1)}`,
      [3],
    );
    const report = await recover(s.substrate, { publicKeys: [KEY.publicKeyHex] });
    expect(report.ok).toBe(false);
    const engine = createEngine({ substrate: await s.another(), signer: KEY.signer });
    const r = await engine.evaluate({ session_id: "s", tool_name: "t", nonce: 100 });
    expect(r).toMatchObject({
      verdict: "DENY",
      reason: "fail_closed:chain_unverified",
      chain_failure: { index: report.chain.failure!.index, kind: report.chain.failure!.kind },
    });
  });
});
