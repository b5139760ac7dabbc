// The client against the real daemon (@leash/daemon in this process, real socket and real gRPC, real SQLite
// file and PostgreSQL schema): SP/1.0 Appendix A through the client's guard() per transport, receipts verified.
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { type Daemon, parseDaemonConfig, startDaemon } from "@leash/daemon";
import { verifyReceipt } from "@leash/receipts";
import { openStore, type StoreKind, type TestStore } from "@leash/test-stores";
import { pino } from "pino";
import { afterEach, describe, expect, it } from "vitest";
import {
  type Client,
  type ClientOptions,
  createClient,
  guard,
  LeashDenied,
  type PreExecResult,
} from "../src/index.js";

type Transport = "socket" | "grpc";
const HMAC = randomBytes(32);
let store: TestStore | undefined;
let daemon: Daemon | undefined;
let signer: ReturnType<typeof generateKeyPair>;
/** Starts (or restarts, on the same socket path and gRPC port) the daemon over `store`. */
let start: () => Promise<Daemon>;
const clients: Client[] = [];

async function setUp(kind: StoreKind = "sqlite"): Promise<Daemon> {
  store = await openStore(kind, { label: "client" });
  writeFileSync(join(store.dir, "acme-k1.hmac"), HMAC.toString("hex"), { mode: 0o600 });
  signer = generateKeyPair();
  const config = parseDaemonConfig({
    organizations: {
      acme: {
        hmac_keys: { k1: { file: join(store.dir, "acme-k1.hmac") } },
        default_guard: { budget_usd: 1 },
        agents: {
          "research-bot": { guard: { budget_usd: 0.5, max_repeat_calls: 3, denied_tools: ["delete_file"] } },
        },
      },
    },
  });
  let grpcListen = "127.0.0.1:0";
  const where = store;
  start = async () => {
    const started = await startDaemon({
      config,
      signer: signer.signer,
      store: where.url ?? "memory:",
      socketPath: join(where.dir, "leash.sock"),
      grpc: { listen: grpcListen, insecure: true },
      logger: pino({ level: "silent" }),
    });
    grpcListen = started.grpcAddress as string; // a restart listens on the same port
    return started;
  };
  daemon = await start();
  return daemon;
}

afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  await daemon?.close();
  await store?.close();
  daemon = undefined;
  store = undefined;
});

function client(transport: Transport, extra: Partial<ClientOptions> = {}): Client {
  const running = daemon as Daemon;
  const c = createClient({
    ...(transport === "socket"
      ? { socketPath: running.address, hmacKey: HMAC, keyId: "k1" }
      : { grpc: { address: running.grpcAddress as string, tls: false } }),
    organizationId: "acme",
    agentId: "research-bot",
    daemonPublicKey: signer.publicKeyHex,
    // SQLite commits (fsync) on a shared 2-core host: far above the 50 ms default at times.
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    heartbeatIntervalMs: 0,
    ...extra,
  });
  clients.push(c);
  return c;
}

const TRANSPORTS: readonly Transport[] = ["socket", "grpc"];
const KINDS: readonly StoreKind[] = ["sqlite", "postgres"];

describe.each(TRANSPORTS)("against the real daemon over %s", (transport) => {
  it.each(KINDS)(
    "Appendix A through guard() on %s: three ALLOWs that ran, then max_repeat_exceeded and circuit_open without running; receipts verify",
    async (kind) => {
      await setUp(kind);
      const c = client(transport);
      const { session_id, active_config } = await c.register({ framework: "crewai" });
      // The policy is the daemon's for acme/research-bot; the agent sent none.
      expect(active_config?.budgetUsdDecimal).toBe("0.5");
      expect(active_config?.maxRepeatCalls).toBe(3);
      expect(active_config?.deniedTools).toEqual(["delete_file"]);

      const runs: unknown[] = [];
      const decisions: PreExecResult[] = [];
      const search = guard(
        c,
        {
          session_id,
          tool_name: "web_search",
          estimate: 0.002,
          cost: () => "0.0015",
          onDecision: (d) => decisions.push(d),
        },
        async (args: { query: string }) => {
          runs.push(args);
          return `results for ${args.query}`;
        },
      );
      const args = { query: "AI safety research papers 2024" };
      for (let i = 0; i < 3; i++)
        await expect(search(args)).resolves.toBe("results for AI safety research papers 2024");
      expect(runs).toHaveLength(3);

      const fourth = await search(args).catch((e: unknown) => e);
      expect(LeashDenied.isInstance(fourth)).toBe(true);
      expect((fourth as LeashDenied).reason).toBe("max_repeat_exceeded");
      expect((fourth as LeashDenied).result.fail_closed).toBe(false);
      const fifth = await search(args).catch((e: unknown) => e);
      expect(LeashDenied.isInstance(fifth)).toBe(true);
      expect((fifth as LeashDenied).reason).toBe("circuit_open");
      expect(runs).toHaveLength(3); // neither denied call ran

      expect(decisions.map((d) => [d.verdict, d.reason])).toEqual([
        ["ALLOW", "within_thresholds"],
        ["ALLOW", "within_thresholds"],
        ["ALLOW", "within_thresholds"],
        ["DENY", "max_repeat_exceeded"],
        ["DENY", "circuit_open"],
      ]);
      // Each settlement (0.0015) reached the daemon before the next call: 0.5 − 0.002, then − 0.0015 − 0.002 …
      expect(decisions.slice(0, 3).map((d) => d.budget_remaining_usd)).toEqual(["0.498", "0.4965", "0.495"]);
      expect(decisions.map((d) => d.call_number)).toEqual([1, 2, 3, 4, 5]);
      // The client verified each receipt before acting; check them again here, independently.
      for (const d of decisions) {
        const checked = await verifyReceipt(d.receipt as string, signer.publicKeyHex);
        expect(checked.ok).toBe(true);
        if (checked.ok) {
          expect(checked.entry_hash).toBe(d.entry_hash);
          expect(checked.payload.data).toMatchObject({
            session_id,
            call_number: d.call_number,
            verdict: d.verdict,
          });
        }
      }

      // The three settlements arrived (acknowledged on gRPC, fire-and-forget on the socket): 0.5 − 3 × 0.0015.
      let state = await c.getSession();
      for (let i = 0; i < 50 && state.budgetRemainingUsdDecimal !== "0.4955"; i++) {
        await new Promise((r) => setTimeout(r, 20));
        state = await c.getSession();
      }
      expect(state.budgetRemainingUsdDecimal).toBe("0.4955");
      expect(state.circuitTripped).toBe(true);
      const hb = await c.heartbeat();
      expect(hb.daemon_budget_remaining_usd).toBe("0.4955");
    },
  );

  for (const [what, bad, detail] of (transport === "socket"
    ? [
        ["HMAC key", { hmacKey: randomBytes(32) }, "bad_hmac"],
        ["key id", { keyId: "k9" }, "unknown_key"],
      ]
    : []) as ReadonlyArray<readonly [string, Partial<ClientOptions>, string]>) {
    it(`a client with the wrong ${what} fails closed and its tool never runs`, async () => {
      await setUp();
      const { session_id } = await client(transport).register();
      const runs: unknown[] = [];
      const tool = guard(client(transport, bad), { session_id, tool_name: "web_search" }, async () => {
        runs.push(1);
      });
      const error = await tool().catch((e: unknown) => e);
      expect(LeashDenied.isInstance(error)).toBe(true);
      // The daemon cannot sign for a key it does not trust: an unsigned Error. The cause comes first.
      expect((error as LeashDenied).reason).toBe("fail_closed:auth_failed");
      expect((error as LeashDenied).result.detail).toMatch(
        new RegExp(`^the daemon refused our key \\(${detail}\\)`),
      );
      expect(runs).toEqual([]);
      // register() says the same, as its error's code and first words.
      const refused = await client(transport, bad)
        .register()
        .catch((e: unknown) => e);
      expect((refused as { code: string }).code).toBe("auth_failed");
      expect((refused as Error).message).toMatch(/^the daemon refused our key/);
    });
  }

  it("a verdict signed by another daemon key is refused (bad_receipt) when the client pins the real one", async () => {
    await setUp();
    const c = client(transport, { daemonPublicKey: generateKeyPair().publicKeyHex });
    const { session_id } = await c.register();
    const runs: unknown[] = [];
    const tool = guard(c, { session_id, tool_name: "web_search" }, async () => {
      runs.push(1);
    });
    const error = await tool().catch((e: unknown) => e);
    expect((error as LeashDenied).reason).toBe("fail_closed:bad_receipt");
    expect(runs).toEqual([]);
  });

  it("each settlement is applied before the session's next decision (PostgreSQL; on the socket postExec is fire-and-forget)", async () => {
    await setUp("postgres");
    const c = client(transport);
    const { session_id } = await c.register();
    const remaining: Array<string | null> = [];
    const tool = guard(
      c,
      {
        session_id,
        tool_name: "fetch",
        estimate: "0.002",
        cost: () => "0.001",
        onDecision: (d) => remaining.push(d.budget_remaining_usd),
      },
      async (args: { n: number }) => args.n,
    );
    for (let n = 0; n < 30; n++) await tool({ n });
    // Call k (from 0) sees k settlements of 0.001 and its own hold of 0.002: 0.5 − k × 0.001 − 0.002.
    expect(remaining).toEqual(
      Array.from({ length: 30 }, (_, k) => (0.498 - k * 0.001).toFixed(3).replace(/0+$/, "")),
    );
  });

  it("many calls in flight on one connection each get their own verdict and receipt", async () => {
    await setUp();
    const c = client(transport);
    const { session_id } = await c.register();
    const results = await Promise.all(
      Array.from({ length: 16 }, (_, i) =>
        c.preExec({ session_id, tool_name: `tool_${i}`, params: { i }, estimated_cost_usd: "0.001" }),
      ),
    );
    expect(results.every((r) => r.verdict === "ALLOW" && !r.fail_closed)).toBe(true);
    expect(new Set(results.map((r) => r.call_number)).size).toBe(16);
    expect(new Set(results.map((r) => r.entry_hash)).size).toBe(16);
  });

  it("the daemon restarts: calls DENY while it is down, then the same client is served on the same session", async () => {
    await setUp();
    const c = client(transport, { reconnect: { initialDelayMs: 10, maxDelayMs: 100 } });
    const { session_id } = await c.register();
    const runs: unknown[] = [];
    const tool = guard(
      c,
      { session_id, tool_name: "web_search", estimate: 0.01 },
      async (args: { n: number }) => {
        runs.push(args.n);
        return args.n;
      },
    );
    await expect(tool({ n: 1 })).resolves.toBe(1);
    await daemon?.close();
    const down = await tool({ n: 2 }).catch((e: unknown) => e);
    expect((down as LeashDenied).reason).toBe("fail_closed:daemon_unavailable");
    daemon = await start();
    let served: unknown;
    for (let i = 0; i < 100 && served === undefined; i++) {
      served = await tool({ n: 3 }).catch(async (e: unknown) => {
        if (!LeashDenied.isInstance(e) || !e.result.fail_closed) throw e;
        await new Promise((r) => setTimeout(r, 20));
        return undefined;
      });
    }
    expect(served).toBe(3);
    expect(runs).toEqual([1, 3]);
    expect((await c.getSession()).totalCalls).toBe(2n);
  });
});
