// Fail closed: every way of not getting a trustworthy verdict is a DENY, and the guarded tool never runs.
// The daemons here are small in-test servers playing a broken or hostile daemon on a real Unix socket.
import { type ChildProcess, spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { ErrorCode, ErrorSchema, HeartbeatAckSchema, paramsDigest, paramsFromJson } from "@leash/wire";
import { afterEach, describe, expect, it } from "vitest";
import { type Client, createClient, guard, LeashDenied } from "../src/index.js";
import {
  answer,
  type FakeDaemon,
  forgerOf,
  KEY,
  OTHER_KEY,
  startFakeDaemon,
  type TestSigner,
  tempSocketPath,
  testSigner,
  verdictFor,
} from "./fake-daemon.js";

const cleanups: Array<() => void | Promise<void>> = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function socket(): string {
  const s = tempSocketPath();
  cleanups.push(s.cleanup);
  return s.path;
}

async function daemon(path: string, respond: Parameters<typeof startFakeDaemon>[1]): Promise<FakeDaemon> {
  const d = await startFakeDaemon(path, respond);
  cleanups.push(() => d.close());
  return d;
}

function client(path: string, extra: Partial<Parameters<typeof createClient>[0]> = {}): Client {
  const c = createClient({
    socketPath: path,
    organizationId: "acme",
    agentId: "research-bot",
    hmacKey: KEY,
    keyId: "k1",
    heartbeatIntervalMs: 0,
    // Generous, so only the timeout tests time out on this shared, loaded machine.
    timeoutMs: 2000,
    ...extra,
  });
  cleanups.push(() => c.close());
  return c;
}

/** A guarded tool that records every run: on a DENY it must never run. */
function recordingTool(c: Client) {
  const runs: unknown[] = [];
  const tool = guard(c, { session_id: "s1", tool_name: "web_search" }, async (args: { q: string }) => {
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

describe("fail closed", () => {
  it("no daemon (socket path absent): DENY fail_closed:daemon_unavailable", async () => {
    const c = client(socket());
    const { tool, runs } = recordingTool(c);
    await expectDenied(tool({ q: "x" }), "fail_closed:daemon_unavailable");
    // preExec itself answers DENY rather than throwing
    const verdict = await c.preExec({ session_id: "s1", tool_name: "web_search", params: {} });
    expect(verdict).toMatchObject({
      verdict: "DENY",
      reason: "fail_closed:daemon_unavailable",
      fail_closed: true,
    });
    expect(runs).toEqual([]);
  });

  it("a daemon that accepts and never answers: DENY fail_closed:timeout", async () => {
    const path = socket();
    await daemon(path, () => {});
    const c = client(path, { timeoutMs: undefined }); // the default, 50 ms
    const { tool, runs } = recordingTool(c);
    const started = Date.now();
    await expectDenied(tool({ q: "x" }), "fail_closed:timeout");
    expect(Date.now() - started).toBeLessThan(1000); // the 50 ms default, plus a loaded host's slack
    expect(runs).toEqual([]);
  });

  it("a daemon process that is SIGSTOPped: DENY fail_closed:timeout", async () => {
    const path = socket();
    const script = fileURLToPath(new URL("./fixtures/allow-server.mjs", import.meta.url));
    const child: ChildProcess = spawn(process.execPath, [script, path, Buffer.from(KEY).toString("hex")], {
      stdio: ["ignore", "pipe", "inherit"],
    });
    cleanups.push(() => {
      child.kill("SIGCONT");
      child.kill("SIGKILL");
    });
    await new Promise<void>((resolve, reject) => {
      child.stdout?.once("data", () => resolve());
      child.once("exit", (code) => reject(new Error(`allow-server exited with ${code}`)));
    });
    const c = client(path, { timeoutMs: 1000 }); // room for a loaded host while the process runs
    const { tool, runs } = recordingTool(c);
    // The same process answers while it runs: the tool runs once.
    await expect(tool({ q: "before" })).resolves.toBe("results for before");
    expect(runs).toEqual([{ q: "before" }]);
    process.kill(child.pid as number, "SIGSTOP");
    await expectDenied(tool({ q: "stopped" }), "fail_closed:timeout");
    expect(runs).toEqual([{ q: "before" }]);
  });

  it("a daemon that answers garbage: DENY fail_closed:bad_response", async () => {
    const path = socket();
    await daemon(path, (_request, s) => {
      s.write(Buffer.from([0, 0, 0, 5, 0xde, 0xad, 0xbe, 0xef, 0x42]));
    });
    const c = client(path);
    const { tool, runs } = recordingTool(c);
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_response");
    expect(denied.result.detail).toMatch(/does not authenticate/);
    expect(runs).toEqual([]);
  });

  it("a daemon that answers an oversize frame: DENY fail_closed:bad_response", async () => {
    const path = socket();
    await daemon(path, (_request, s) => {
      s.write(Buffer.from([0x7f, 0xff, 0xff, 0xff, 1, 2, 3]));
    });
    const c = client(path);
    const { tool, runs } = recordingTool(c);
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_response");
    expect(denied.result.detail).toMatch(/unreadable frame/);
    expect(runs).toEqual([]);
  });

  it("a correctly-HMACed answer for another correlation id: DENY fail_closed:bad_response", async () => {
    const path = socket();
    await daemon(path, (request, s) => {
      s.write(
        answer(request, verdictFor(request, "ALLOW", "within_thresholds"), {
          correlationId: "0190f5c2-7b1a-7000-8000-000000000000",
        }),
      );
    });
    const c = client(path);
    const { tool, runs } = recordingTool(c);
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_response");
    expect(denied.result.detail).toMatch(/correlation id/);
    expect(runs).toEqual([]);
  });

  it("an ALLOW with a bad HMAC: DENY fail_closed:bad_response", async () => {
    const path = socket();
    await daemon(path, (request, s) => {
      s.write(answer(request, verdictFor(request, "ALLOW", "within_thresholds"), { key: OTHER_KEY }));
    });
    const c = client(path);
    const { tool, runs } = recordingTool(c);
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_response");
    expect(denied.result.detail).toMatch(/HMAC|hmac/);
    expect(runs).toEqual([]);
  });

  it("an authenticated answer that is not this call's verdict: DENY fail_closed:bad_response", async () => {
    const path = socket();
    let n = 0;
    await daemon(path, (request, s) => {
      if (request.payload.case !== "preExec") return;
      if (++n === 1) {
        // Another kind of answer under the right correlation id.
        const value = create(HeartbeatAckSchema, { sessionId: request.payload.value.sessionId });
        s.write(answer(request, { case: "heartbeatAck", value }));
      } else {
        // A verdict for another session.
        const verdict = verdictFor(request, "ALLOW", "within_thresholds");
        if (verdict.case === "preExecResponse") verdict.value.sessionId = "someone-else";
        s.write(answer(request, verdict));
      }
    });
    const { tool, runs } = recordingTool(client(path));
    expect((await expectDenied(tool({ q: "x" }), "fail_closed:bad_response")).result.detail).toMatch(
      /heartbeatAck/,
    );
    expect((await expectDenied(tool({ q: "y" }), "fail_closed:bad_response")).result.detail).toMatch(
      /someone-else/,
    );
    expect(runs).toEqual([]);
  });

  it("an SP/1.0 Error instead of a verdict: DENY fail_closed:daemon_error", async () => {
    const path = socket();
    await daemon(path, (request, s) => {
      const value = create(ErrorSchema, {
        code: ErrorCode.SESSION_NOT_FOUND,
        detail: "session_not_found",
        message: "no",
      });
      s.write(answer(request, { case: "error", value }));
    });
    const c = client(path);
    const { tool, runs } = recordingTool(c);
    const denied = await expectDenied(tool({ q: "x" }), "fail_closed:daemon_error");
    expect(denied.result.detail).toMatch(/SESSION_NOT_FOUND/);
    expect(runs).toEqual([]);
  });

  describe("with the daemon's public key configured", () => {
    const real: TestSigner = testSigner();

    async function signedDaemon(signer: TestSigner, bind: Record<string, unknown> = {}) {
      const path = socket();
      await daemon(path, (request, s) => {
        s.write(answer(request, verdictFor(request, "ALLOW", "within_thresholds", signer, bind)));
      });
      return client(path, { daemonPublicKey: real.publicKeyHex });
    }

    it("an ALLOW whose receipt verifies and binds the call runs the tool (the control case)", async () => {
      const { tool, runs } = recordingTool(await signedDaemon(real));
      await expect(tool({ q: "x" })).resolves.toBe("results for x");
      expect(runs).toEqual([{ q: "x" }]);
    });

    it("an ALLOW with a receipt signed by another key: DENY fail_closed:bad_receipt", async () => {
      const { tool, runs } = recordingTool(await signedDaemon(forgerOf(real)));
      const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_receipt");
      expect(denied.result.detail).toMatch(/bad_signature/);
      expect(runs).toEqual([]);
    });

    it("an ALLOW with a receipt under another key id: DENY fail_closed:bad_receipt", async () => {
      const { tool, runs } = recordingTool(await signedDaemon(testSigner()));
      const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_receipt");
      expect(denied.result.detail).toMatch(/kid_mismatch/);
      expect(runs).toEqual([]);
    });

    it("an ALLOW without a receipt: DENY fail_closed:bad_receipt", async () => {
      const path = socket();
      await daemon(path, (request, s) =>
        s.write(answer(request, verdictFor(request, "ALLOW", "within_thresholds"))),
      );
      const { tool, runs } = recordingTool(client(path, { daemonPublicKey: real.publicKeyHex }));
      await expectDenied(tool({ q: "x" }), "fail_closed:bad_receipt");
      expect(runs).toEqual([]);
    });

    for (const [field, value] of [
      ["session_id", "s2"],
      ["tool_name", "delete_everything"],
      ["params_hash", "0".repeat(64)],
      ["nonce", "12345"],
      ["verdict", "DENY"],
      ["reason", "max_repeat_exceeded"],
    ] as const) {
      it(`a genuine receipt of another decision (${field} differs): DENY fail_closed:bad_receipt`, async () => {
        const { tool, runs } = recordingTool(await signedDaemon(real, { [field]: value }));
        const denied = await expectDenied(tool({ q: "x" }), "fail_closed:bad_receipt");
        expect(denied.result.detail).toContain(field);
        expect(runs).toEqual([]);
      });
    }
  });
});

describe("reconnect", () => {
  it("a daemon that goes away and comes back: DENY while it is down, served again by the same client", async () => {
    const path = socket();
    const allow = (request: Parameters<typeof answer>[0], s: import("node:net").Socket) => {
      s.write(answer(request, verdictFor(request, "ALLOW", "within_thresholds")));
    };
    let d = await startFakeDaemon(path, allow);
    const c = client(path, { reconnect: { initialDelayMs: 10, maxDelayMs: 50 } });
    const { tool, runs } = recordingTool(c);
    await expect(tool({ q: "1" })).resolves.toBe("results for 1");
    await d.close();
    await expectDenied(tool({ q: "down" }), "fail_closed:daemon_unavailable");
    await expectDenied(tool({ q: "down again" }), "fail_closed:daemon_unavailable");
    d = await startFakeDaemon(path, allow);
    cleanups.push(() => d.close());
    let result: unknown;
    for (let i = 0; i < 100 && result === undefined; i++) {
      result = await tool({ q: "2" }).catch(async (e: unknown) => {
        if (!LeashDenied.isInstance(e)) throw e;
        await new Promise((r) => setTimeout(r, 20));
        return undefined;
      });
    }
    expect(result).toBe("results for 2");
    expect(runs).toEqual([{ q: "1" }, { q: "2" }]);
  });
});

describe("requests in flight", () => {
  it("pairs answers with their requests by correlation id, in any order", async () => {
    const path = socket();
    const held: Array<() => void> = [];
    await daemon(path, (request, s) => {
      if (request.payload.case !== "preExec") return;
      const reason = `reason_for_${request.payload.value.toolName}`;
      held.push(() => s.write(answer(request, verdictFor(request, "DENY", reason))));
      if (held.length === 5) for (const send of held.reverse()) send();
    });
    const c = client(path, { timeoutMs: 2000 });
    const verdicts = await Promise.all(
      [1, 2, 3, 4, 5].map((i) => c.preExec({ session_id: "s1", tool_name: `t${i}`, params: { i } })),
    );
    expect(verdicts.map((v) => v.reason)).toEqual([1, 2, 3, 4, 5].map((i) => `reason_for_t${i}`));
    expect(verdicts.every((v) => !v.fail_closed)).toBe(true);
  });
});

describe("what the client sends", () => {
  it("params as the agent gave them, their canonical digest, exact money and the HMAC key id", async () => {
    const path = socket();
    const d = await daemon(path, (request, s) =>
      s.write(answer(request, verdictFor(request, "DENY", "budget_exhausted"))),
    );
    const c = client(path, { timeoutMs: 2000 });
    await c.preExec({
      session_id: "s1",
      tool_name: "a",
      params: '{"b": 10.0, "a": [1e16]}',
      estimated_cost_usd: "0.0015",
    });
    await c.preExec({ session_id: "s1", tool_name: "b", params: { z: 1, a: "é" }, estimated_cost_usd: 0.1 });
    const [first, second] = d.received.map((e) =>
      e.payload.case === "preExec" ? e.payload.value : undefined,
    );
    expect(first?.toolParamsJson).toBe('{"b": 10.0, "a": [1e16]}');
    expect(first?.toolParamsHash).toEqual(paramsDigest(paramsFromJson('{"b": 10.0, "a": [1e16]}')));
    expect(first?.estimatedCostUsdDecimal).toBe("0.0015");
    expect(first?.estimatedCostUsd).toBe(0.0015);
    expect(second?.toolParamsJson).toBe('{"a":"é","z":1}');
    expect(second?.estimatedCostUsdDecimal).toBe("0.1");
    expect(first?.nonce).not.toBe(0n);
    expect(first?.nonce).not.toBe(second?.nonce);
    expect(d.received.every((e) => e.keyId === "k1")).toBe(true);
  });

  it("refuses bad options with one-line errors", () => {
    const base = { socketPath: "/x", organizationId: "acme", agentId: "a", keyId: "k1" };
    expect(() => createClient({ ...base, hmacKey: new Uint8Array(16) })).toThrow(/at least 32 bytes/);
    expect(() => createClient({ ...base, hmacKey: "zz" })).toThrow(/not hex/);
    expect(() => createClient({ ...base, hmacKey: KEY, timeoutMs: 0 })).toThrow(/timeoutMs must be > 0/);
    expect(() => createClient({ ...base, hmacKey: KEY, daemonPublicKey: "abc" })).toThrow(/64 hex/);
  });
});
