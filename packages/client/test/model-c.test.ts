// SP/1.0 Model C: two real `leash serve` processes on one PostgreSQL schema, 8 @leash/client clients spread
// over them (socket and gRPC), one organization budget: no overspend, every ALLOW in the one chain, verify OK.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair } from "@leash/chain";
import { openStore, type ServeProcess, serve, type TestStore, writeConfig } from "@leash/test-stores";
import { afterEach, expect, it } from "vitest";
import { type Client, createClient, type PreExecResult } from "../src/index.js";

const BIN = fileURLToPath(new URL("../../../apps/cli/dist/bin.js", import.meta.url));
/** The organization's budget, and every call's estimate, in thousandths of a dollar (exact integers here). */
const BUDGET_MILLI = 2000;
const ESTIMATE_MILLI = 10;
const IN_FLIGHT = 4;
const BUDGET_DONE = new Set(["budget_exhausted", "budget_overrun"]);
const milli = (n: number) => (n / 1000).toFixed(3);
/** An exact decimal string ("1.993", "0") in thousandths; the store's money is exact decimal text. */
const toMilli = (decimal: string) => Math.round(Number(decimal) * 1000);

let store: TestStore | undefined;
const daemons: ServeProcess[] = [];
const clients: Client[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.close();
  for (const d of daemons.splice(0)) await d.stop();
  await store?.close();
  store = undefined;
});

interface Allowed {
  readonly client: number;
  readonly result: PreExecResult;
  readonly actualMilli: number;
}

it("two daemons, one PostgreSQL schema, 8 clients over socket and gRPC, one organization budget: no overspend, every ALLOW in the chain, the chain verifies, a session moves from daemon A to B", async () => {
  const pg = await openStore("postgres", { label: "clientmodelc" });
  store = pg;
  const hmac = randomBytes(32);
  // One operator key for both daemons: they append to one chain, each verifying what the other wrote.
  const key = generateKeyPair();
  const keyFile = join(pg.dir, "daemon.key");
  writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
  const config = writeConfig(pg.dir, "daemon.json", {
    organizations: {
      acme: {
        hmac_keys: { k1: { hex: hmac.toString("hex") } },
        default_guard: { budget_usd: BUDGET_MILLI / 1000, budget_scope: "organization" },
      },
    },
  });
  for (const name of ["a", "b"]) {
    daemons.push(
      await serve([
        "--store",
        pg.url,
        "--key-file",
        keyFile,
        "--config",
        config,
        "--socket",
        join(pg.dir, `${name}.sock`),
        "--grpc",
        "127.0.0.1:0",
        "--grpc-insecure",
      ]),
    );
  }
  const connect = (daemon: ServeProcess, transport: "socket" | "grpc", agentId: string) => {
    const c = createClient({
      ...(transport === "socket"
        ? { socketPath: daemon.listening.listening, hmacKey: hmac, keyId: "k1" }
        : { grpc: { address: daemon.listening.grpc as string, tls: false } }),
      organizationId: "acme",
      agentId,
      daemonPublicKey: key.publicKeyHex,
      // Two daemons and PostgreSQL on a shared 2-core host: a timeout here would be a lost hold, not a finding.
      timeoutMs: 20_000,
      controlTimeoutMs: 20_000,
      heartbeatIntervalMs: 0,
    });
    clients.push(c);
    return c;
  };
  const [a, b] = daemons as [ServeProcess, ServeProcess];
  const allowed: Allowed[] = [];

  // A session registered on daemon A (socket) continues on daemon B (gRPC): same call counter, same budget.
  const onA = connect(a, "socket", "mover");
  const onB = connect(b, "grpc", "mover");
  const { session_id } = await onA.register();
  const first = await onA.preExec({
    session_id,
    tool_name: "search",
    params: { q: 1 },
    estimated_cost_usd: "0.01",
  });
  expect([first.verdict, first.call_number]).toEqual(["ALLOW", 1]);
  await onA.postExec({ session_id, call_number: 1, actual_cost_usd: "0.01" });
  allowed.push({ client: -1, result: first, actualMilli: 10 });
  expect((await onB.register({ session_id })).session_id).toBe(session_id);
  const second = await onB.preExec({
    session_id,
    tool_name: "search",
    params: { q: 2 },
    estimated_cost_usd: "0.01",
  });
  expect([second.verdict, second.call_number, second.budget_remaining_usd]).toEqual(["ALLOW", 2, "1.98"]);
  await onB.postExec({ session_id, call_number: 2, actual_cost_usd: "0.01" });
  allowed.push({ client: -2, result: second, actualMilli: 10 });
  expect((await onB.getSession()).totalCalls).toBe(2n);

  // The load: clients 0, 2, 4, 6 on A and 1, 3, 5, 7 on B; socket and gRPC alternate in pairs.
  const denied: string[] = [];
  const drive = async (index: number) => {
    const c = connect(index % 2 === 0 ? a : b, index % 4 < 2 ? "socket" : "grpc", `agent-${index}`);
    let seq = 0;
    for (let sessions = 0; sessions < 100; sessions++) {
      const { session_id: sid } = await c.register();
      // A DENY trips the session's circuit: then a new session, until the organization's budget is gone.
      for (let round = 0; round < 200; round++) {
        const results = await Promise.all(
          Array.from({ length: IN_FLIGHT }, () =>
            c.preExec({
              session_id: sid,
              tool_name: `tool_${seq % 5}`,
              params: { client: index, n: seq++ },
              estimated_cost_usd: milli(ESTIMATE_MILLI),
            }),
          ),
        );
        for (const r of results) {
          if (r.fail_closed) throw new Error(`client ${index} failed closed: ${r.reason} ${r.detail}`);
          if (r.verdict !== "ALLOW") denied.push(r.reason);
        }
        await Promise.all(
          results
            .filter((r) => r.verdict === "ALLOW")
            .map(async (r) => {
              // Settle at or below the estimate, so what is left moves and calls keep racing for it.
              const actualMilli = r.call_number % 3 === 0 ? 7 : ESTIMATE_MILLI;
              await c.postExec({
                session_id: sid,
                call_number: r.call_number,
                actual_cost_usd: milli(actualMilli),
              });
              allowed.push({ client: index, result: r, actualMilli });
            }),
        );
        // Rule 5 (nothing left) or 5b (less left than the estimate): this organization's budget is done.
        if (results.some((r) => BUDGET_DONE.has(r.reason))) return;
        if (results.some((r) => r.verdict !== "ALLOW")) break;
      }
    }
    throw new Error(`client ${index} never saw its budget run out: ${denied.slice(-5).join(", ")}`);
  };
  await Promise.all(Array.from({ length: 8 }, (_, i) => drive(i)));

  // Zero overspend: what the clients settled is within the budget, and is exactly what the store spent.
  const settledMilli = allowed.reduce((sum, x) => sum + x.actualMilli, 0);
  expect(settledMilli).toBeLessThanOrEqual(BUDGET_MILLI);
  // Over the socket a post_exec is a notification (§4.4): the last ones may still be on their way into
  // a daemon when the clients return. Wait (bounded) until no hold is pending; a lost settlement
  // would keep its hold pending and fail the checks below.
  const read = () =>
    pg.substrate.transaction(async (tx) => ({
      account: await tx.budgets.getAccount("org:acme"),
      pending: await tx.budgets.listReservations({ status: "PENDING" }),
      settled: await tx.budgets.listReservations({ status: "SETTLED" }),
      entries: await tx.chain.range(0, 1_000_000),
    }));
  let state = await read();
  for (let waited = 0; state.pending.length > 0 && waited < 15_000; waited += 100) {
    await new Promise((resolve) => setTimeout(resolve, 100));
    state = await read();
  }
  const { account, pending, settled, entries } = state;
  expect(account).not.toBeNull();
  expect(toMilli(account!.spent_usd)).toBe(settledMilli);
  expect(toMilli(account!.reserved_usd)).toBe(0);
  // The budget really ran out (else the test proved nothing about racing for its end): what is left
  // is at most what the holds in flight when the clients stopped gave back by settling below estimate.
  expect(BUDGET_MILLI - settledMilli).toBeLessThan(ESTIMATE_MILLI * 8 * IN_FLIGHT);
  expect(denied.some((reason) => BUDGET_DONE.has(reason))).toBe(true);
  // Every ALLOW's hold is accounted for: settled, none left pending, none that no client was told of.
  expect(pending).toEqual([]);
  expect(settled.length).toBe(allowed.length);

  // One chain for both daemons: every ALLOW a client received is in it by entry hash, and no other ALLOW.
  expect(new Set(entries.map((e) => (JSON.parse(e.body) as { chain_id: string }).chain_id)).size).toBe(1);
  const byHash = new Map(entries.map((e) => [e.entry_hash, e]));
  for (const x of allowed) {
    const entry = byHash.get(x.result.entry_hash as string);
    expect(entry?.kind).toBe("decision");
    expect(entry?.seq).toBe(x.result.entry_seq);
  }
  const allowEntries = entries.filter(
    (e) =>
      e.kind === "decision" && (JSON.parse(e.body) as { data: { verdict: string } }).data.verdict === "ALLOW",
  );
  expect(allowEntries.length).toBe(allowed.length);
  // Both daemons served a share of the load, over both transports.
  for (const parity of [0, 1])
    expect(allowed.some((x) => x.client >= 0 && x.client % 2 === parity)).toBe(true);

  // `leash verify` checks the whole record: both daemons' entries, one hash chain, one key.
  const out = execFileSync(
    process.execPath,
    [BIN, "verify", "--store", pg.url, "--pubkey", key.publicKeyHex],
    {
      encoding: "utf8",
    },
  );
  expect(out).toMatch(new RegExp(`^OK: ${entries.length} entries verified`));
}, 180_000);
