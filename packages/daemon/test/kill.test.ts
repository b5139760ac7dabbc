// SIGKILL a real `leash serve` process under load from raw socket clients, round after round, on SQLite and
// PostgreSQL; after each: recover, then every verdict a client received is in the verified chain as received.
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair, verifyChain } from "@leash/chain";
import type { Substrate } from "@leash/core";
import { assertRecovered, formatReport, recover } from "@leash/recovery";
import {
  PostExecNotificationSchema,
  PreExecRequestSchema,
  type PreExecResponse,
  paramsToJson,
  RegisterRequestSchema,
  Verdict,
} from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, configObject, ensureBuilt, openStore, scratchDir, serve } from "./support.js";

const KILLS = 10;
const TTL_S = 1;
const SEED = Number(process.env.LEASH_CRASH_SEED ?? Date.now() % 1_000_000);

function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

const readChain = (substrate: Substrate) => substrate.transaction((tx) => tx.chain.range(0, 10_000_000));

describe.each(["sqlite", "postgres"] as const)("SIGKILL of the daemon under load on %s", (kind) => {
  beforeAll(() => ensureBuilt(), 120_000);
  const random = mulberry32(SEED + (kind === "sqlite" ? 1 : 2));
  const cleanups: (() => Promise<void>)[] = [];
  afterAll(async () => {
    for (const c of cleanups) await c();
  });

  it(`${KILLS} kills: clients see connection errors while it is down; after recover every received verdict is in the verified chain, no hold leaks`, async () => {
    const store = await openStore(kind);
    cleanups.push(() => store.close());
    const dir = scratchDir();
    const key = generateKeyPair();
    const keyFile = join(dir, "daemon.key");
    writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
    const configFile = join(dir, "daemon.json");
    const config = configObject(dir, { reservation_ttl_s: TTL_S });
    (config.organizations as Record<string, { agents: Record<string, unknown> }>).acme.agents.loader = {
      guard: { budget_usd: 1_000_000 },
    };
    writeFileSync(configFile, JSON.stringify(config));
    const socket = join(dir, "leash.sock");
    const args = ["--config", configFile, "--store", store.url!, "--key-file", keyFile, "--socket", socket];

    const received = new Map<number, string>();
    let sessions: string[] = [];
    let counter = 0;
    const totals = { verdicts: 0, refusedWhileDown: 0, expired: 0 };

    for (let round = 0; round < KILLS; round++) {
      const context = `seed ${SEED}, ${kind}, round ${round}`;
      const daemon = await serve(args);
      const clients = await Promise.all([0, 1, 2, 3].map(() => RawClient.connect(socket, ACME)));
      if (sessions.length === 0) {
        sessions = await Promise.all(
          [0, 1].map(async () => {
            const reg = await clients[0]!.request({
              case: "register",
              value: create(RegisterRequestSchema, { agentId: "loader", organizationId: "acme" }),
            });
            return (reg.payload.value as { sessionId: string }).sessionId;
          }),
        );
      }
      let stop = false;
      const load = clients.map(async (client, c) => {
        while (!stop && !client.closed) {
          const n = counter++;
          let answer: PreExecResponse;
          try {
            const envelope = await client.request({
              case: "preExec",
              value: create(PreExecRequestSchema, {
                sessionId: sessions[n % sessions.length]!,
                callNumber: 1n,
                toolName: "tool",
                toolParamsJson: paramsToJson({ c, n }),
                nonce: BigInt(n + 1 + round * 1_000_000),
                estimatedCostUsdDecimal: "0.001",
              }),
            });
            if (envelope.payload.case !== "preExecResponse") {
              throw new Error(
                `${context}: ${envelope.payload.case} ${JSON.stringify(envelope.payload.value)}`,
              );
            }
            answer = envelope.payload.value;
          } catch (error) {
            if (client.closed) return; // killed mid-request: this verdict was never received
            throw error;
          }
          expect(answer.verdict, `${context}: ${answer.reason}`).toBe(Verdict.ALLOW);
          expect(received.has(Number(answer.chainSeq)), `${context}: seq answered twice`).toBe(false);
          received.set(Number(answer.chainSeq), answer.entryHash);
          totals.verdicts++;
          if (n % 2 === 0) {
            client.notify({
              case: "postExec",
              value: create(PostExecNotificationSchema, {
                sessionId: answer.sessionId,
                callNumber: answer.callNumber,
                actualCostUsdDecimal: "0.0005",
                success: true,
              }),
            });
          }
        }
      });
      const before = totals.verdicts;
      await sleep(150 + Math.floor(random() * 450));
      // Under load, not after a fixed time: a loaded host may answer few calls in those milliseconds.
      for (let i = 0; i < 400 && totals.verdicts - before < 6; i++) await sleep(25);
      daemon.child.kill("SIGKILL");
      await new Promise((resolve) => daemon.child.once("exit", resolve));
      await Promise.all(load);
      stop = true;
      expect(
        clients.every((c) => c.closed),
        context,
      ).toBe(true);
      // Down: the socket file is still there (a kill removes nothing), and nobody answers on it.
      const refused = await RawClient.connect(socket, ACME).then(
        (c) => {
          c.close();
          return false;
        },
        (error: NodeJS.ErrnoException) => error.code === "ECONNREFUSED" || error.code === "ENOENT",
      );
      expect(refused, `${context}: a connection succeeded to a dead daemon`).toBe(true);
      totals.refusedWhileDown++;
      expect(daemon.stderr(), context).not.toContain('"level":50');

      await sleep(TTL_S * 1000 + 30);
      const report = await recover(store.substrate, {
        publicKeys: [key.publicKeyHex],
        signer: key.signer,
        storeUrl: store.url!,
        repair: true,
      });
      expect(report.ok, `${context}:\n${formatReport(report)}`).toBe(true);
      assertRecovered(report);
      totals.expired += report.reservations.expired;
      const chain = await readChain(store.substrate);
      const lost = [...received].filter(([seq, hash]) => chain[seq]?.entry_hash !== hash);
      expect(lost, `${context}: verdicts received but not in the chain as received`).toEqual([]);
      const pending = await store.substrate.transaction((tx) =>
        tx.budgets.listReservations({ status: "PENDING" }),
      );
      expect(pending, `${context}: holds left after recovery`).toEqual([]);
    }

    const chain = await readChain(store.substrate);
    expect((await verifyChain(chain, { publicKeys: [key.publicKeyHex] })).ok).toBe(true);
    expect(totals.verdicts).toBeGreaterThan(KILLS * 5);
    expect(totals.expired).toBeGreaterThan(0);
    console.log(
      `[daemon-kill ${kind}] seed ${SEED}: ${KILLS} kills, ${totals.verdicts} verdicts received, chain ${chain.length} entries, ${totals.expired} leaked holds charged by recover`,
    );
  }, 240_000);
});
