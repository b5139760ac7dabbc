// The guard config's max_params_bytes on every real store: params over the cap are a recorded, signed DENY
// policy_violation:params_too_large without the params in the entry, nothing held, no nonce spent.
import { createHash } from "node:crypto";
import { generateKeyPair, verifyChain } from "@leash/chain";
import { canonicalJson } from "@leash/core";
import { afterEach, describe, expect, it } from "vitest";
import { createEngine, DEFAULT_MAX_PARAMS_BYTES, LeashError } from "../src/index.js";
import { KINDS, type OpenedStore, openStore } from "./substrates.js";

const KEY = generateKeyPair();
/** About 790 KB of params: under the 1 MiB frame as a request, over it as an answer with the params inside. */
const BIG = { blob: "x".repeat(790_000) };
const sha256 = (text: string) => createHash("sha256").update(text).digest("hex");

describe.each(KINDS)("max_params_bytes on %s", (kind) => {
  let store: OpenedStore | undefined;
  afterEach(async () => {
    await store?.close();
    store = undefined;
  });

  it("denies params over the default cap, records their digest and size only, holds nothing", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    await engine.register({ agent_id: "a", session_id: "s", config: { budget_usd: 1 } });
    const denied = await engine.evaluate({
      session_id: "s",
      tool_name: "upload",
      params: BIG,
      nonce: "n1",
      estimated_cost_usd: "0.10",
    });
    expect([denied.verdict, denied.reason, denied.call_number]).toEqual([
      "DENY",
      "policy_violation:params_too_large",
      1,
    ]);
    expect(denied.reservation_id).toBeNull();
    expect(denied.budget_remaining_usd).toBe("1");
    expect(denied.receipt.length).toBeLessThan(10_000);
    const view = await engine.getSession("s");
    expect([view.state.circuit_tripped, view.call_count, view.budget_remaining_usd]).toEqual([false, 1, "1"]);

    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    const data = JSON.parse(entries.find((e) => e.kind === "decision")!.body).data;
    const text = canonicalJson(BIG);
    expect(data.params_json).toBeUndefined();
    expect(data.params_bytes).toBe(Buffer.byteLength(text));
    expect(data.params_hash).toBe(sha256(text));
    expect(data.reservation_id).toBeNull();
    expect(entries.some((e) => e.body.includes("xxxxxxxxxx"))).toBe(false);
    const holds = await store.substrate.transaction((tx) => tx.budgets.getReservation("s#1"));
    expect(holds).toBeNull();

    // The nonce was not spent: the same call with small params is allowed and held.
    const allowed = await engine.evaluate({
      session_id: "s",
      tool_name: "upload",
      params: { blob: "x" },
      nonce: "n1",
      estimated_cost_usd: "0.10",
    });
    expect([allowed.verdict, allowed.reason, allowed.budget_remaining_usd]).toEqual([
      "ALLOW",
      "within_thresholds",
      "0.9",
    ]);
    const all = await store.substrate.transaction((tx) => tx.chain.range(0, 100));
    expect((await verifyChain(all, { publicKeys: [KEY.publicKeyHex] })).ok).toBe(true);
  });

  it("takes the session's own cap: params at it pass, one byte over is denied", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    const atCap = { p: "é".repeat(40) }; // canonical {"p":"é…"}: 8 bytes + 80
    const cap = Buffer.byteLength(canonicalJson(atCap));
    await engine.register({ agent_id: "a", session_id: "c", config: { max_params_bytes: cap } });
    const fits = await engine.evaluate({ session_id: "c", tool_name: "t", params: atCap });
    expect(fits.verdict).toBe("ALLOW");
    const over = await engine.evaluate({ session_id: "c", tool_name: "t", params: { p: `${atCap.p}a` } });
    expect([over.verdict, over.reason]).toEqual(["DENY", "policy_violation:params_too_large"]);
    // A session without one gets the default: 256 KiB.
    await engine.register({ agent_id: "a", session_id: "d", config: {} });
    const under = { p: "y".repeat(DEFAULT_MAX_PARAMS_BYTES - 8) };
    expect((await engine.evaluate({ session_id: "d", tool_name: "t", params: under })).verdict).toBe("ALLOW");
    const beyond = { p: "y".repeat(DEFAULT_MAX_PARAMS_BYTES - 7) };
    expect((await engine.evaluate({ session_id: "d", tool_name: "t", params: beyond })).reason).toBe(
      "policy_violation:params_too_large",
    );
  });

  it("refuses a cap that is not a positive whole number at registration", async () => {
    store = await openStore(kind);
    const engine = createEngine({ substrate: store.substrate, signer: KEY.signer });
    for (const bad of [0, -1, 1.5, "1024"]) {
      await expect(
        engine.register({ agent_id: "a", config: { max_params_bytes: bad as number } }),
      ).rejects.toSatisfy(
        (error: unknown) => LeashError.isInstance(error) && error.code === "config_invalid",
      );
    }
  });
});
