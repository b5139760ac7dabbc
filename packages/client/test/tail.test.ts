// client.tail() against a real `leash serve` on a SQLite file, over the Unix socket and gRPC: an
// organization's entries only, resume, follow, refusals, and a daemon that dies mid-follow ends it.
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { type ServeProcess, serve, writeConfig } from "@leash/test-stores";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, createClient, type TailEntry, type TailOptions } from "../src/index.js";

const dir = mkdtempSync(join(tmpdir(), "leash-client-tail-"));
const acmeKey = randomBytes(32);
const globexKey = randomBytes(32);
const key = generateKeyPair();
let daemon: ServeProcess;
const clients: Client[] = [];

async function startServe(): Promise<ServeProcess> {
  const config = writeConfig(dir, "daemon.json", {
    organizations: {
      acme: { hmac_keys: { a1: { hex: acmeKey.toString("hex") } }, default_guard: { budget_usd: 1 } },
      globex: { hmac_keys: { g1: { hex: globexKey.toString("hex") } } },
    },
  });
  const keyFile = join(dir, "daemon.key");
  writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
  return serve([
    ...["--config", config, "--store", `sqlite:${join(dir, "leash.db")}`, "--key-file", keyFile],
    ...["--socket", join(dir, "leash.sock"), "--grpc", "127.0.0.1:0", "--grpc-insecure"],
  ]);
}

function connect(transport: "socket" | "grpc", org: "acme" | "globex", agentId = "bot"): Client {
  const c = createClient({
    ...(transport === "socket"
      ? {
          socketPath: daemon.listening.listening,
          hmacKey: org === "acme" ? acmeKey : globexKey,
          keyId: org === "acme" ? "a1" : "g1",
        }
      : { grpc: { address: daemon.listening.grpc as string, tls: false } }),
    organizationId: org,
    agentId,
    controlTimeoutMs: 5000,
    timeoutMs: 5000,
    heartbeatIntervalMs: 0,
  });
  clients.push(c);
  return c;
}

async function collect(c: Client, options: TailOptions = {}): Promise<TailEntry[]> {
  const out: TailEntry[] = [];
  for await (const entry of c.tail(options)) out.push(entry);
  return out;
}

/** Each org's sessions, and the decisions their clients were answered. */
const acmeDecisions: { session_id: string; seq: number; hash: string; tool: string; verdict: string }[] = [];
let acmeSession = "";
let globexSession = "";

beforeAll(async () => {
  daemon = await startServe();
  const acme = connect("socket", "acme");
  const globex = connect("grpc", "globex");
  acmeSession = (await acme.register()).session_id;
  globexSession = (await globex.register()).session_id;
  for (const [i, tool] of ["search", "fetch", "search"].entries()) {
    const r = await acme.preExec({ tool_name: tool, params: { q: i }, estimated_cost_usd: "0.01" });
    acmeDecisions.push({
      session_id: acmeSession,
      seq: r.entry_seq as number,
      hash: r.entry_hash as string,
      tool,
      verdict: r.verdict,
    });
    await globex.preExec({ tool_name: "globex-secret", params: { i } });
  }
}, 120_000);

afterAll(async () => {
  for (const c of clients) c.close();
  await daemon?.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe.each(["socket", "grpc"] as const)("client.tail() over the %s", (transport) => {
  it("reads its organization's entries only, in chain order, with what leash tail prints", async () => {
    const entries = await collect(connect(transport, "acme"));
    expect(entries.length).toBeGreaterThan(acmeDecisions.length); // registration, decisions
    expect(entries.every((e) => e.session_id === acmeSession)).toBe(true);
    expect(entries.map((e) => e.seq)).toEqual([...entries.map((e) => e.seq)].sort((a, b) => a - b));
    const decisions = entries.filter((e) => e.kind === "decision");
    expect(decisions.map((d) => [d.seq, d.entry_hash, d.tool_name, d.verdict, d.call_number])).toEqual(
      acmeDecisions.map((d, i) => [d.seq, d.hash, d.tool, d.verdict, i + 1]),
    );
    expect(decisions[0]).toMatchObject({
      reason: "within_thresholds",
      agent_id: "bot",
      budget_after_usd: "0.99",
    });
    expect(typeof decisions[0]!.time_ns).toBe("bigint");
    // globex's side: its own decisions, none of acme's.
    const theirs = await collect(connect(transport, "globex"), { kinds: ["decision"] });
    expect(theirs.map((e) => [e.session_id, e.tool_name])).toEqual(
      Array.from({ length: 3 }, () => [globexSession, "globex-secret"]),
    );
  });

  it("resumes after a seq, starts with the latest N, filters by kind, session and limit", async () => {
    const c = connect(transport, "acme");
    const [first, second, third] = acmeDecisions;
    expect((await collect(c, { afterSeq: first!.seq, kinds: ["decision"] })).map((e) => e.seq)).toEqual([
      second!.seq,
      third!.seq,
    ]);
    expect((await collect(c, { last: 2, kinds: ["decision"] })).map((e) => e.seq)).toEqual([
      second!.seq,
      third!.seq,
    ]);
    expect(
      (await collect(c, { sessionId: acmeSession, kinds: ["decision"], limit: 1 })).map((e) => e.seq),
    ).toEqual([first!.seq]);
  });

  it("refuses another organization's session as unknown, and bad options before asking", async () => {
    const c = connect(transport, "acme");
    await expect(collect(c, { sessionId: globexSession })).rejects.toMatchObject({
      code: "daemon_error",
      message: expect.stringContaining("SESSION_NOT_FOUND"),
    });
    await expect(collect(c, { afterSeq: -2 })).rejects.toMatchObject({ code: "invalid_argument" });
    await expect(collect(c, { kinds: ["Not A Kind!"] })).rejects.toMatchObject({
      code: "daemon_error",
      message: expect.stringContaining("INVALID_MESSAGE invalid_kinds"),
    });
  });
});

// After every read above, so the decisions these add do not change what those expect.
describe.each(["socket", "grpc"] as const)("client.tail({ follow }) over the %s", (transport) => {
  it("follows: a decision made after the tail started arrives; abort ends it quietly", async () => {
    const c = connect(transport, "acme");
    const controller = new AbortController();
    const seen: TailEntry[] = [];
    const done = (async () => {
      for await (const e of c.tail({
        last: 0,
        follow: true,
        kinds: ["decision"],
        signal: controller.signal,
      })) {
        seen.push(e);
        if (seen.length === 1) controller.abort();
      }
    })();
    // Give the tail time to start waiting, then decide (globex first: it must never show up).
    await new Promise((r) => setTimeout(r, 300));
    await connect("socket", "globex").preExec({ session_id: globexSession, tool_name: "globex-secret" });
    const agent = connect(transport, "acme");
    const r = await agent.preExec({ session_id: acmeSession, tool_name: `late-${transport}` });
    await done;
    expect(seen.map((e) => [e.seq, e.tool_name, e.session_id])).toEqual([
      [r.entry_seq, `late-${transport}`, acmeSession],
    ]);
  });
});

describe("a daemon that goes away", () => {
  it("ends a following tail with a clear error on both transports", async () => {
    const tails = (["socket", "grpc"] as const).map((transport) => {
      const it = connect(transport, "acme").tail({ last: 0, follow: true });
      return it.next().then(
        () => "no error",
        (error: { code?: string; message?: string }) => error,
      );
    });
    await new Promise((r) => setTimeout(r, 300));
    await daemon.stop();
    for (const outcome of await Promise.all(tails)) {
      expect(outcome).toMatchObject({ code: expect.stringMatching(/^(daemon_unavailable|daemon_error)$/) });
      expect((outcome as { message: string }).message).toMatch(/shutting|reach|closed|UNAVAILABLE/);
    }
    // With the daemon down, a new tail fails at once, never an empty success.
    await expect(collect(connect("socket", "acme"))).rejects.toMatchObject({ code: "daemon_unavailable" });
    await expect(collect(connect("grpc", "acme"))).rejects.toMatchObject({ code: "daemon_unavailable" });
  }, 30_000);
});
