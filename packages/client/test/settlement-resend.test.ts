// A post-exec the daemon never made durable is not lost: a real `leash serve` is SIGSTOPped after an
// ALLOW, the post-exec gets no ack, the daemon is SIGKILLed, recovered and restarted, and the client
// sends the kept settlement again on reconnect. The chain ends with exactly one settlement of that call.
import { join } from "node:path";
import { type ServeFixture, type ServeProcess, serve, startServeFixture } from "@leash/test-stores";
import { afterEach, describe, expect, it } from "vitest";
import { type Client, createClient, LeashError } from "../src/index.js";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

async function until(what: string, done: () => boolean | Promise<boolean>, ms = 30_000): Promise<void> {
  for (const deadline = Date.now() + ms; !(await done()); ) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

describe("post-exec over the socket: kept until the daemon has it durably", () => {
  it("SIGSTOP, no ack, SIGKILL, recover, restart: the client re-sends it and the chain has one settlement", async () => {
    const fixture: ServeFixture = await startServeFixture({
      agents: { "research-bot": { guard: { budget_usd: 1 } } },
    });
    cleanups.push(() => fixture.remove());
    const c: Client = createClient({
      socketPath: fixture.socketPath,
      organizationId: fixture.organizationId,
      agentId: "research-bot",
      hmacKey: fixture.hmacKey,
      keyId: fixture.keyId,
      heartbeatIntervalMs: 0,
      timeoutMs: 2000,
      controlTimeoutMs: 1000,
      reconnect: { initialDelayMs: 20, maxDelayMs: 200 },
    });
    cleanups.push(() => c.close());
    const { session_id } = await c.register();
    const allowed = await c.preExec({ session_id, tool_name: "t", params: {}, estimated_cost_usd: "0.6" });
    expect(allowed).toMatchObject({ verdict: "ALLOW", call_number: 1 });

    const first = fixture.process.child;
    process.kill(first.pid!, "SIGSTOP");
    // The frame is written, but nothing is durable: no ack, so postExec does not claim success.
    const unacked = await c.postExec({ session_id, call_number: 1, actual_cost_usd: "0.6" }).then(
      () => null,
      (error: unknown) => error,
    );
    expect(LeashError.isInstance(unacked) && unacked.code).toBe("timeout");
    expect(c.pendingSettlements).toBe(1);
    const exited = new Promise((resolve) => first.once("exit", resolve));
    first.kill("SIGKILL");
    await exited;

    const recovered = await fixture.cli([
      ...["recover", "--repair", "--store", fixture.store],
      ...["--key-file", join(fixture.dir, "leash.key"), "--pubkey", join(fixture.dir, "leash.pub.hex")],
    ]);
    expect(recovered.code, recovered.stderr).toBe(0);
    const again: ServeProcess = await serve([
      ...["--config", join(fixture.dir, "daemon.json"), "--key-file", join(fixture.dir, "leash.key")],
      ...["--socket", fixture.socketPath],
    ]);
    cleanups.push(() => again.stop());

    await until("the kept settlement to be confirmed", () => c.pendingSettlements === 0);
    const settlements = (await fixture.entries()).filter((e) => e.kind === "post_exec");
    expect(settlements.map((e) => [e.data.call_number, e.data.actual_usd])).toEqual([[1, "0.6"]]);
    // The money is spent once: 0.4 left, so a call of 0.9 is not allowed.
    const refused = await c.preExec({ session_id, tool_name: "u", params: {}, estimated_cost_usd: "0.9" });
    expect(refused).toMatchObject({ verdict: "DENY", fail_closed: false });
    expect((await c.getSession(session_id)).budgetSpentUsdDecimal).toBe("0.6");
    // Sending it again (the caller retried) changes nothing: one settlement per call.
    await c.postExec({ session_id, call_number: 1, actual_cost_usd: "0.6" });
    expect((await fixture.entries()).filter((e) => e.kind === "post_exec")).toHaveLength(1);
    expect((await fixture.verify()).code).toBe(0);
  }, 120_000);
});
