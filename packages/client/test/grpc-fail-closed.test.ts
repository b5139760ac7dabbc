// Fail closed over gRPC: no daemon, a real `leash serve` SIGSTOPped, and small in-test gRPC servers playing
// a broken or hostile daemon (garbage bytes, another session's verdict, no receipt): DENY, the tool never runs.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { type handleUnaryCall, Server, ServerCredentials, type ServiceDefinition } from "@grpc/grpc-js";
import { generateKeyPair } from "@leash/chain";
import { serve, writeConfig } from "@leash/test-stores";
import {
  type PreExecRequest,
  PreExecResponseSchema,
  RegisterResponseSchema,
  shackleGrpcService,
  Verdict,
} from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { type Client, type ClientOptions, createClient, guard, LeashDenied } from "../src/index.js";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function client(address: string, extra: Partial<ClientOptions> = {}): Client {
  const c = createClient({
    grpc: { address, tls: false },
    organizationId: "acme",
    agentId: "research-bot",
    heartbeatIntervalMs: 0,
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    ...extra,
  });
  cleanups.push(() => c.close());
  return c;
}

function recordingTool(c: Client, session_id = "s1") {
  const runs: unknown[] = [];
  const tool = guard(c, { session_id, tool_name: "web_search" }, async (args: { q: string }) => {
    runs.push(args);
    return `results for ${args.q}`;
  });
  return { tool, runs };
}

async function expectDenied(call: Promise<unknown>, reason: string): Promise<LeashDenied> {
  const error = await call.then(
    () => {
      throw new Error("the call was not denied");
    },
    (e: unknown) => e,
  );
  expect(LeashDenied.isInstance(error)).toBe(true);
  expect((error as LeashDenied).reason).toBe(reason);
  expect((error as LeashDenied).result.fail_closed).toBe(true);
  return error as LeashDenied;
}

/** A port nothing listens on (bound, then released). */
async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

type PreExecAnswer = (request: PreExecRequest, reply: (value: unknown) => void) => void;

/**
 * A gRPC server with the real ShackleDaemon definition whose PreExec answers as `answer` says;
 * `garbage` replaces the serialized answer with bytes that are no PreExecResponse.
 */
async function fakeDaemon(answer: PreExecAnswer, options: { garbage?: boolean } = {}): Promise<string> {
  const definition = { ...shackleGrpcService() };
  if (options.garbage) {
    const preExec = definition.PreExec!;
    // Field 1 as a varint tag with a truncated length-delimited body: unparseable protobuf.
    definition.PreExec = { ...preExec, responseSerialize: () => Buffer.from([0x0a, 0xff, 0xff, 0x01]) };
  }
  const server = new Server();
  const implementation: Record<string, handleUnaryCall<unknown, unknown>> = {
    Register: (_call, callback) =>
      callback(null, create(RegisterResponseSchema, { sessionId: "s1", negotiatedProtocol: "1.0.0" })),
    PreExec: (call, callback) => answer(call.request as PreExecRequest, (value) => callback(null, value)),
  };
  server.addService(definition as unknown as ServiceDefinition, implementation);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e, p) =>
      e ? reject(e) : resolve(p),
    ),
  );
  cleanups.push(() => {
    server.forceShutdown();
  });
  return `127.0.0.1:${port}`;
}

const allowFor = (request: PreExecRequest, extra: Record<string, unknown> = {}) =>
  create(PreExecResponseSchema, {
    sessionId: request.sessionId,
    callNumber: 1n,
    verdict: Verdict.ALLOW,
    reason: "within_thresholds",
    ...extra,
  });

describe("fail closed over gRPC", () => {
  it("no daemon listening: DENY fail_closed:daemon_unavailable; register throws daemon_unavailable", async () => {
    const c = client(`127.0.0.1:${await freePort()}`);
    const { tool, runs } = recordingTool(c);
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:daemon_unavailable");
    expect(denied.result.detail).toMatch(/cannot reach the daemon/);
    await expect(c.register()).rejects.toMatchObject({ code: "daemon_unavailable" });
    expect(runs).toEqual([]);
  });

  it("a real `leash serve` SIGSTOPped: DENY fail_closed:timeout; served again after SIGCONT", async () => {
    const dir = mkdtempSync(join(tmpdir(), "leash-client-grpc-"));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const config = writeConfig(dir, "daemon.json", {
      organizations: {
        acme: {
          hmac_keys: { k1: { hex: randomBytes(32).toString("hex") } },
          agents: { "research-bot": { guard: { max_repeat_calls: 0 } } },
        },
      },
    });
    const daemon = await serve([
      "--store",
      `sqlite:${join(dir, "leash.db")}`,
      "--ephemeral-key",
      "--config",
      config,
      "--socket",
      join(dir, "leash.sock"),
      "--grpc",
      "127.0.0.1:0",
      "--grpc-insecure",
    ]);
    cleanups.push(() => daemon.stop());
    const c = client(daemon.listening.grpc as string, {
      daemonPublicKey: daemon.listening.public_key,
      timeoutMs: 1000, // room for a loaded host while the process runs
    });
    const { session_id } = await c.register();
    const { tool, runs } = recordingTool(c, session_id);
    await expect(tool({ q: "before" })).resolves.toBe("results for before");
    process.kill(daemon.child.pid as number, "SIGSTOP");
    await expectDenied(tool({ q: "stopped" }), "fail_closed:timeout");
    await expectDenied(tool({ q: "still stopped" }), "fail_closed:timeout");
    expect(runs).toEqual([{ q: "before" }]);
    process.kill(daemon.child.pid as number, "SIGCONT");
    await expect(tool({ q: "after" })).resolves.toBe("results for after");
    expect(runs).toEqual([{ q: "before" }, { q: "after" }]);
  }, 60_000);

  it("a daemon that never answers: DENY fail_closed:timeout (the 50 ms default)", async () => {
    const address = await fakeDaemon(() => {});
    const { tool, runs } = recordingTool(client(address, { timeoutMs: undefined }));
    await expectDenied(tool({ q: "x" }), "fail_closed:timeout");
    expect(runs).toEqual([]);
  });

  it("an answer that does not parse: DENY fail_closed:bad_response", async () => {
    const address = await fakeDaemon((request, reply) => reply(allowFor(request)), { garbage: true });
    const { tool, runs } = recordingTool(client(address));
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_response");
    expect(denied.result.detail).toMatch(/INTERNAL/);
    expect(runs).toEqual([]);
  });

  it("an ALLOW for another session, or without its reason: DENY fail_closed:bad_response", async () => {
    let n = 0;
    const address = await fakeDaemon((request, reply) =>
      reply(++n === 1 ? allowFor(request, { sessionId: "someone-else" }) : allowFor(request, { reason: "" })),
    );
    const { tool, runs } = recordingTool(client(address));
    expect((await expectDenied(tool({ q: "x" }), "fail_closed:bad_response")).result.detail).toMatch(
      /someone-else/,
    );
    expect((await expectDenied(tool({ q: "y" }), "fail_closed:bad_response")).result.detail).toMatch(
      /without its reason/,
    );
    expect(runs).toEqual([]);
  });

  it("an ALLOW without a receipt, or with a receipt the pinned key did not sign: DENY fail_closed:bad_receipt", async () => {
    let n = 0;
    const address = await fakeDaemon((request, reply) =>
      reply(allowFor(request, ++n === 1 ? {} : { receipt: "eyJhbGciOiJFZERTQSJ9.e30.AAAA" })),
    );
    const { tool, runs } = recordingTool(
      client(address, { daemonPublicKey: generateKeyPair().publicKeyHex }),
    );
    await expectDenied(tool({ q: "x" }), "fail_closed:bad_receipt");
    await expectDenied(tool({ q: "y" }), "fail_closed:bad_receipt");
    expect(runs).toEqual([]);
  });

  it("a server without the ShackleDaemon service (UNIMPLEMENTED): DENY fail_closed:bad_response", async () => {
    const server = new Server();
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (e, p) =>
        e ? reject(e) : resolve(p),
      ),
    );
    cleanups.push(() => {
      server.forceShutdown();
    });
    const { tool, runs } = recordingTool(client(`127.0.0.1:${port}`));
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_response");
    expect(denied.result.detail).toMatch(/UNIMPLEMENTED/);
    expect(runs).toEqual([]);
  });

  it("refuses bad gRPC options with one-line errors", () => {
    const base = { organizationId: "acme", agentId: "a" };
    expect(() => createClient({ ...base })).toThrow(/one of socketPath or grpc/);
    expect(() => createClient({ ...base, socketPath: "/x", grpc: { address: "127.0.0.1:1" } })).toThrow(
      /one of socketPath or grpc/,
    );
    expect(() => createClient({ ...base, grpc: { address: "nonsense" } })).toThrow(/HOST:PORT/);
    expect(() => createClient({ ...base, grpc: { address: "10.0.0.1:50051", tls: false } })).toThrow(
      /only to a loopback address/,
    );
    expect(() => createClient({ ...base, grpc: { address: "127.0.0.1:1", tls: { cert: "x" } } })).toThrow(
      /cert and grpc.tls.key go together/,
    );
    expect(() => createClient({ ...base, socketPath: "/x" })).toThrow(/needs hmacKey/);
  });
});
