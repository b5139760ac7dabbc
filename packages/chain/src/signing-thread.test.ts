// Tests of withSigningThread: the same signatures as the synchronous signer, from worker threads,
// and what happens when it is closed or given a signer it cannot use.
import { describe, expect, it } from "vitest";
import { ChainError } from "./errors.js";
import { generateKeyPair, type Signer } from "./keys.js";
import { withSigningThread } from "./signing-thread.js";

const KEY = generateKeyPair();
const messages = Array.from({ length: 50 }, (_, i) =>
  new TextEncoder().encode(`message ${i} ${"x".repeat(i * 7)}`),
);

describe("withSigningThread", () => {
  it("makes, on two threads and concurrently, exactly the synchronous signer's signatures, in order", async () => {
    const threaded = withSigningThread(KEY.signer, { threads: 2 });
    try {
      expect(threaded.threads).toBe(2);
      expect([threaded.keyId, threaded.publicKeyHex]).toEqual([KEY.keyId, KEY.publicKeyHex]);
      const signatures = await Promise.all(messages.map((m) => threaded.signAsync(m)));
      // Ed25519 is deterministic: each answer must be its own message's signature, not a neighbour's.
      signatures.forEach((signature, i) => {
        expect(Buffer.from(signature).equals(Buffer.from(KEY.signer.sign(messages[i]!)))).toBe(true);
      });
      expect(Buffer.from(threaded.sign(messages[0]!)).equals(Buffer.from(signatures[0]!))).toBe(true);
    } finally {
      await threaded.close();
    }
  });

  it("finishes what it owes on close, then signs on the caller's thread", async () => {
    const threaded = withSigningThread(KEY.signer);
    const owed = messages.map((m) => threaded.signAsync(m));
    await threaded.close();
    expect(threaded.threads).toBe(0);
    expect((await Promise.all(owed)).length).toBe(messages.length);
    const after = await threaded.signAsync(messages[3]!);
    expect(Buffer.from(after).equals(Buffer.from(KEY.signer.sign(messages[3]!)))).toBe(true);
  });

  it("refuses a signer it cannot copy the key of, and a bad thread count", () => {
    const foreign: Signer = { ...KEY.signer };
    expect(() => withSigningThread(foreign)).toThrow(ChainError);
    expect(() => withSigningThread(foreign)).toThrow(/createSigner, loadSigningKey or generateKeyPair/);
    for (const threads of [0, 1.5, 65]) {
      expect(() => withSigningThread(KEY.signer, { threads })).toThrow(/threads must be an integer/);
    }
  });
});
