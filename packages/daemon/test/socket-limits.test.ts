// What one socket peer can make the daemon hold, over a real socket: frame deadlines (slowloris), the auth and
// idle timeouts, the connection cap, the shared partial-frame budget, and write back-pressure on a non-reader.
import { connect, type Socket } from "node:net";
import { create } from "@bufbuild/protobuf";
import {
  encodeFrame,
  GetSessionStateRequestSchema,
  RegisterRequestSchema,
  sealEnvelope,
  TailRequestSchema,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { parseDaemonConfig } from "../src/index.js";
import { clock, RawClient } from "./raw-client.js";
import { ACME, configObject, type Running, runDaemon, scratchDir } from "./support.js";

let running: Running | undefined;
const opened: Socket[] = [];
afterEach(async () => {
  for (const socket of opened.splice(0)) socket.destroy();
  await running?.stop();
  running = undefined;
});

/** Waits (bounded) until `check` holds; false if it never did. */
async function until(check: () => boolean | Promise<boolean>, ms = 5_000): Promise<boolean> {
  for (const end = Date.now() + ms; Date.now() < end; ) {
    if (await check()) return true;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  return check();
}

async function refusals(r: Running, limit: string): Promise<number> {
  const metric = await r.daemon.metrics.limitRefusals.get();
  return metric.values.find((v) => v.labels.limit === limit)?.value ?? 0;
}

/** A raw connection that tracks whether the daemon closed it. */
function raw(path: string): Promise<{ socket: Socket; closed: () => boolean }> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    opened.push(socket);
    let closed = false;
    socket.on("error", () => undefined);
    socket.on("close", () => {
      closed = true;
    });
    socket.once("connect", () => resolve({ socket, closed: () => closed }));
    socket.once("error", reject);
  });
}

const prefix = (length: number) => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(length, 0);
  return bytes;
};

const register = (client: RawClient) =>
  client.request({
    case: "register",
    value: create(RegisterRequestSchema, { agentId: "research-bot", organizationId: "acme" }),
  });

describe("socket limits", () => {
  it("a frame that does not arrive whole within frame_timeout_s is closed (one byte at a time)", async () => {
    running = await runDaemon("memory", { extra: { limits: { frame_timeout_s: 0.3 } } });
    const slow = await raw(running.socket);
    slow.socket.write(prefix(1000));
    const drip = setInterval(() => slow.socket.write(Buffer.of(1)), 50);
    try {
      expect(await until(slow.closed)).toBe(true);
    } finally {
      clearInterval(drip);
    }
    expect(await refusals(running, "frame_timeout")).toBe(1);
  });

  it("a connection that never authenticates is closed after auth_timeout_s, an idle one after idle_timeout_s, not while a poll waits", async () => {
    running = await runDaemon("memory", { extra: { limits: { auth_timeout_s: 0.3, idle_timeout_s: 0.5 } } });
    const stranger = await raw(running.socket);
    const idle = await RawClient.connect(running.socket, ACME);
    await register(idle);
    const polling = await RawClient.connect(running.socket, ACME);
    await register(polling);
    const poll = polling.request(
      { case: "tailEntries", value: create(TailRequestSchema, { follow: true, waitMs: 1_500 }) },
      { timeoutMs: 10_000 },
    );
    expect(await until(stranger.closed)).toBe(true);
    expect(await until(() => idle.closed)).toBe(true);
    // The poll outlives the idle timeout: answered at its wait, its connection still open then.
    expect((await poll).payload.case).toBe("tailBatch");
    expect(await refusals(running, "auth_timeout")).toBe(1);
    expect(await refusals(running, "idle_timeout")).toBeGreaterThanOrEqual(1);
  });

  it("at max_connections a new connection takes the place of the oldest unauthenticated one, else is refused", async () => {
    running = await runDaemon("memory", { extra: { limits: { max_connections: 3 } } });
    const strangers = [await raw(running.socket), await raw(running.socket), await raw(running.socket)];
    const agent = await RawClient.connect(running.socket, ACME);
    expect((await register(agent)).payload.case).toBe("registerResponse");
    expect(await until(strangers[0]!.closed)).toBe(true);
    expect(strangers[1]!.closed() || strangers[2]!.closed()).toBe(false);
    expect(await refusals(running, "evicted_unauthenticated")).toBe(1);

    // Every place held by an agent that authenticated: the newcomer is refused, the agents keep theirs.
    const others = [
      await RawClient.connect(running.socket, ACME),
      await RawClient.connect(running.socket, ACME),
    ];
    for (const other of others) expect((await register(other)).payload.case).toBe("registerResponse");
    const late = await raw(running.socket);
    expect(await until(late.closed)).toBe(true);
    expect(await refusals(running, "max_connections")).toBe(1);
    expect((await register(agent)).payload.case).toBe("registerResponse");
    for (const client of [agent, ...others]) client.close();
  });

  it("partial frames across connections are held within max_buffered_bytes; the others wait and the daemon serves on", async () => {
    const budget = 1024 * 1024;
    running = await runDaemon("memory", {
      extra: { limits: { max_buffered_bytes: budget, frame_timeout_s: 2 } },
    });
    const peers = await Promise.all(Array.from({ length: 6 }, () => raw(running!.socket)));
    // Each announces a 1 MiB frame and sends 600 KiB of it: 3.6 MiB offered, the budget is 1 MiB.
    for (const peer of peers)
      peer.socket.write(Buffer.concat([prefix(1024 * 1024 - 1), Buffer.alloc(600 * 1024)]));
    expect(await until(async () => (await refusals(running!, "buffer_budget_paused")) > 0)).toBe(true);
    const held = (await running.daemon.metrics.bufferedBytes.get()).values[0]!.value;
    // Over the budget by at most the chunk each connection had in hand when it was paused.
    expect(held).toBeLessThanOrEqual(budget + peers.length * 64 * 1024);
    const agent = await RawClient.connect(running.socket, ACME);
    expect((await register(agent)).payload.case).toBe("registerResponse");
    agent.close();
    // Their deadline closes them all (the paused ones too) and the budget is free again.
    expect(await until(() => peers.every((p) => p.closed()), 10_000)).toBe(true);
    expect(
      await until(async () => (await running!.daemon.metrics.bufferedBytes.get()).values[0]!.value === 0),
    ).toBe(true);
  });

  it("a peer that does not read its answers is no longer read from", async () => {
    running = await runDaemon("memory", { extra: { limits: { write_pause_bytes: 1024 } } });
    const sent = 4_000;
    const frames = Array.from({ length: sent }, (_, i) =>
      encodeFrame(
        sealEnvelope(
          {
            case: "getSessionState",
            value: create(GetSessionStateRequestSchema, { sessionId: `no-such-session-${i}` }),
          },
          { ...ACME, sender: "agent", clock },
        ),
      ),
    );
    const deaf = await raw(running.socket);
    deaf.socket.pause();
    deaf.socket.write(Buffer.concat(frames));
    expect(await until(async () => (await refusals(running!, "write_paused")) > 0)).toBe(true);
    await new Promise((resolve) => setTimeout(resolve, 500));
    const answered = (await running.daemon.metrics.latency.get()).values.find(
      (v) =>
        v.metricName === "leash_daemon_request_duration_seconds_count" && v.labels.rpc === "GetSessionState",
    )?.value;
    // Some hundreds answered (what the kernel's buffer took), never the 4,000 asked.
    expect(answered).toBeGreaterThan(0);
    expect(answered).toBeLessThan(sent);
  });

  it("a peer whose unread answers pass write_close_bytes is closed", async () => {
    running = await runDaemon("memory", {
      extra: { limits: { write_pause_bytes: 1024, write_close_bytes: 1024 * 1024 } },
    });
    const session = await running.daemon.engine.register({
      agent_id: "bot",
      organization_id: "acme",
      config: {},
    });
    for (let i = 0; i < 400; i++) {
      await running.daemon.engine.evaluate({
        session_id: session.session_id,
        tool_name: `tool-${i}`,
        params: { text: "x".repeat(200) },
      });
    }
    // Thirty tails of 400 entries in one write: answered even once reading stops, several MiB unread.
    const frames = Array.from({ length: 30 }, () =>
      encodeFrame(
        sealEnvelope(
          { case: "tailEntries", value: create(TailRequestSchema, { last: 400 }) },
          { ...ACME, sender: "agent", clock },
        ),
      ),
    );
    const deaf = await raw(running.socket);
    deaf.socket.pause();
    deaf.socket.write(Buffer.concat(frames));
    expect(await until(async () => (await refusals(running!, "write_overflow")) > 0, 10_000)).toBe(true);
    expect(
      await until(async () => (await running!.daemon.metrics.connections.get()).values[0]!.value === 0),
    ).toBe(true);
  });

  it("the limits block: defaults when absent, each field checked by name", () => {
    const dir = scratchDir();
    const defaults = parseDaemonConfig(configObject(dir)).limits;
    expect(defaults.socket.maxConnections).toBe(1024);
    expect(defaults.socket.frameTimeoutMs).toBe(10_000);
    expect(defaults.perOrganization.replayIds).toBe(1_000_000);
    const set = parseDaemonConfig(
      configObject(dir, { limits: { idle_timeout_s: 30, per_organization: { tails: 4, rate_per_s: 0 } } }),
    ).limits;
    expect(set.socket.idleTimeoutMs).toBe(30_000);
    expect(set.perOrganization).toMatchObject({ tails: 4, ratePerS: 0 });
    expect(() => parseDaemonConfig(configObject(dir, { limits: { max_conections: 5 } }))).toThrow(
      /\/limits has unknown field "max_conections"/,
    );
    expect(() => parseDaemonConfig(configObject(dir, { limits: { max_connections: 0 } }))).toThrow(
      /\/limits\/max_connections must be a number ≥ 1/,
    );
    expect(() =>
      parseDaemonConfig(configObject(dir, { limits: { per_organization: { replay_ids: "many" } } })),
    ).toThrow(/\/limits\/per_organization\/replay_ids/);
    expect(() =>
      parseDaemonConfig(
        configObject(dir, { limits: { write_pause_bytes: 4_194_304, write_close_bytes: 2_097_152 } }),
      ),
    ).toThrow(/write_close_bytes must be larger than write_pause_bytes/);
  });
});
