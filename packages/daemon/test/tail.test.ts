// tail_entries on the Unix socket (a raw SP/1.0 client, SQLite and PostgreSQL): one organization's entries,
// positions and limits, the long poll woken by another writer's entry, refusals, and shutdown mid-poll.
import { create } from "@bufbuild/protobuf";
import type { StoreKind } from "@leash/test-stores";
import { ErrorCode, type Payload, type TailBatch, TailRequestSchema } from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, GLOBEX, type Running, runDaemon } from "./support.js";

function tailRequest(init: Parameters<typeof create<typeof TailRequestSchema>>[1]): Payload {
  return { case: "tailEntries", value: create(TailRequestSchema, init) };
}

async function ask(client: RawClient, init: Parameters<typeof create<typeof TailRequestSchema>>[1]) {
  const answer = await client.request(tailRequest(init), { timeoutMs: 20_000 });
  return answer.payload;
}

async function batch(client: RawClient, init: Parameters<typeof create<typeof TailRequestSchema>>[1]) {
  const payload = await ask(client, init);
  if (payload.case !== "tailBatch") throw new Error(`expected a tail_batch, got ${JSON.stringify(payload)}`);
  return payload.value as TailBatch;
}

describe.each(["sqlite", "postgres"] as StoreKind[])("tail_entries on %s", (kind) => {
  let running: Running;
  let acme: RawClient;
  let globex: RawClient;
  const sessions = { acme: "", globex: "" };

  beforeAll(async () => {
    running = await runDaemon(kind);
    const engine = running.daemon.engine;
    for (const org of ["acme", "globex"] as const) {
      const s = await engine.register({
        agent_id: `${org}-bot`,
        organization_id: org,
        config: { budget_usd: 1 },
      });
      sessions[org] = s.session_id;
      for (const tool of ["a", "b"]) {
        await engine.evaluate({ session_id: s.session_id, tool_name: `${org}.${tool}`, params: {} });
      }
    }
    acme = await RawClient.connect(running.socket, ACME);
    globex = await RawClient.connect(running.socket, GLOBEX);
  });
  afterAll(async () => {
    acme?.close();
    globex?.close();
    await running?.stop();
  });

  it("sends the key's organization's entries only, with the position to resume from", async () => {
    const all = await batch(acme, { afterSeq: -1n });
    expect(all.more).toBe(false);
    expect(all.events.map((e) => [e.kind, e.sessionId, e.toolName])).toEqual([
      ["session_registered", sessions.acme, undefined],
      ["decision", sessions.acme, "acme.a"],
      ["decision", sessions.acme, "acme.b"],
    ]);
    // The position is the last entry examined: globex's entries come after acme's.
    expect(all.afterSeq).toBeGreaterThan(all.events.at(-1)!.seq);
    const theirs = await batch(globex, { afterSeq: -1n, kinds: ["decision"] });
    expect(theirs.events.map((e) => e.toolName)).toEqual(["globex.a", "globex.b"]);
    // limit: one event, more to come, resumable from it.
    const one = await batch(acme, { afterSeq: -1n, kinds: ["decision"], limit: 1 });
    expect([one.events.length, one.more, one.afterSeq]).toEqual([1, true, one.events[0]!.seq]);
    const rest = await batch(acme, { afterSeq: one.afterSeq, kinds: ["decision"] });
    expect(rest.events.map((e) => e.toolName)).toEqual(["acme.b"]);
    // last: the latest N (no after_seq).
    const last = await batch(acme, { last: 1, kinds: ["decision"] });
    expect(last.events.map((e) => e.toolName)).toEqual(["acme.b"]);
  });

  it("a follow poll answers empty at its wait, and at once when another writer appends", async () => {
    const head = (await batch(acme, { afterSeq: -1n })).afterSeq;
    const quiet = await batch(acme, { afterSeq: head, follow: true, waitMs: 300 });
    expect([quiet.events.length, quiet.afterSeq]).toEqual([0, head]);
    const waiting = batch(acme, { afterSeq: head, follow: true, waitMs: 15_000, kinds: ["decision"] });
    // The engine appends directly, as another daemon on the store would: the feed's poll finds it.
    await new Promise((r) => setTimeout(r, 100));
    await running.daemon.engine.evaluate({
      session_id: sessions.globex,
      tool_name: "globex.hidden",
      params: {},
    });
    await running.daemon.engine.evaluate({ session_id: sessions.acme, tool_name: "acme.late", params: {} });
    const woke = await waiting;
    expect(woke.events.map((e) => e.toolName)).toEqual(["acme.late"]);
  });

  it("refuses another organization's session as unknown, and malformed positions and kinds", async () => {
    const refusal = async (init: Parameters<typeof create<typeof TailRequestSchema>>[1]) => {
      const payload = await ask(acme, init);
      if (payload.case !== "error") throw new Error(`expected an Error, got ${payload.case}`);
      return [ErrorCode[payload.value.code], payload.value.detail];
    };
    expect(await refusal({ sessionId: sessions.globex })).toEqual(["SESSION_NOT_FOUND", "session_not_found"]);
    expect(await refusal({ afterSeq: -2n })).toEqual(["INVALID_MESSAGE", "invalid_after_seq"]);
    expect(await refusal({ kinds: ["DROP TABLE"] })).toEqual(["INVALID_MESSAGE", "invalid_kinds"]);
  });

  it("a poll in flight at shutdown is answered DAEMON_UNAVAILABLE shutting_down, not left to its wait", async () => {
    const head = (await batch(acme, { afterSeq: -1n })).afterSeq;
    const waiting = ask(acme, { afterSeq: head, follow: true, waitMs: 60_000 });
    await new Promise((r) => setTimeout(r, 200));
    const closing = running.daemon.close();
    const payload = await waiting;
    expect(payload.case).toBe("error");
    if (payload.case === "error") {
      expect([ErrorCode[payload.value.code], payload.value.detail]).toEqual([
        "DAEMON_UNAVAILABLE",
        "shutting_down",
      ]);
    }
    await closing;
  });
});
