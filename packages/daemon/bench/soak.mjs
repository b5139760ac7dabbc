// The soak: honest agents beside 1,000 hostile socket peers (hostile-peers.mjs) against one `leash serve` on
// loopback, for --seconds; then the chain is verified and every answered decision found in it exactly once.
//
// node packages/daemon/bench/soak.mjs [--seconds 600] [--hostile 1000] [--clients 4]
// The first fifth (at most 60 s) is quiet (honest agents only): the p99 the hostile phase is compared with.
// Prints one JSON line of figures; exit status 1 when a decision was lost or doubled or the chain fails.
import { spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { generateKeyPair, parseEntryBody, verifyChain } from "@leash/chain";
import { openStore } from "@leash/engine";
import {
  decodeEnvelope,
  encodeFrame,
  FrameDecoder,
  openEnvelope,
  PendingRequests,
  PostExecNotificationSchema,
  PreExecRequestSchema,
  paramsToJson,
  RegisterRequestSchema,
  ReplayWindow,
  sealEnvelope,
} from "@leash/wire";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "600" },
    hostile: { type: "string", default: "1000" },
    clients: { type: "string", default: "4" },
  },
});
const seconds = Number(values.seconds);
const quietSeconds = Math.min(60, seconds / 5);
const clock = { nowNs: () => Date.now() * 1e6 };
const BIN = fileURLToPath(new URL("../../../apps/cli/dist/bin.js", import.meta.url));
const HOSTILE = fileURLToPath(new URL("./hostile-peers.mjs", import.meta.url));

const dir = mkdtempSync(join(tmpdir(), "leash-soak-"));
const signing = generateKeyPair();
writeFileSync(join(dir, "daemon.key"), signing.privateKeyPem, { mode: 0o600 });
const acme = { key: randomBytes(32), keyId: "acme-k1" };
const globex = { key: randomBytes(32), keyId: "globex-k1" };
const hex = (k) => Buffer.from(k.key).toString("hex");
writeFileSync(
  join(dir, "daemon.json"),
  JSON.stringify({
    organizations: {
      acme: { hmac_keys: { [acme.keyId]: { hex: hex(acme) } } },
      globex: { hmac_keys: { [globex.keyId]: { hex: hex(globex) } } },
    },
  }),
);
const store = `sqlite:${join(dir, "soak.db")}`;
const socketPath = join(dir, "leash.sock");

function lineOf(child, key) {
  return new Promise((resolve, reject) => {
    let out = "";
    child.stdout.setEncoding("utf8").on("data", (chunk) => {
      out += chunk;
      const line = out.split("\n").find((l) => l.startsWith(`{"${key}"`));
      if (line !== undefined) resolve(JSON.parse(line));
    });
    child.once("exit", (code) => reject(new Error(`exited with ${code} before printing ${key}`)));
  });
}

/** One honest agent's connection: seals, frames, pairs answers by correlation id. */
async function honestClient(key) {
  const socket = connect(socketPath);
  await new Promise((resolve, reject) => {
    socket.once("connect", resolve);
    socket.once("error", reject);
  });
  const pending = new PendingRequests();
  const replay = new ReplayWindow({ clock });
  const decoder = new FrameDecoder();
  socket.on("data", (chunk) => {
    for (const body of decoder.push(chunk)) {
      pending.settle(openEnvelope(body, { keyFor: () => key.key, sender: "daemon", replay }));
    }
  });
  socket.on("error", () => undefined);
  socket.on("close", () => pending.failAll());
  const send = (payload) => {
    const body = sealEnvelope(payload, { ...key, sender: "agent", clock });
    socket.write(encodeFrame(body));
    return decodeEnvelope(body).messageId;
  };
  return {
    request: (payload) => {
      const id = send(payload);
      return pending.wait(id, { timeoutMs: 30_000 });
    },
    notify: send,
    close: () => socket.destroy(),
  };
}

const daemon = spawn(
  process.execPath,
  [
    BIN,
    "serve",
    ...["--config", join(dir, "daemon.json"), "--key-file", join(dir, "daemon.key")],
    ...["--socket", socketPath, "--http", "127.0.0.1:0"],
  ],
  {
    stdio: ["ignore", "pipe", "ignore"],
    env: {
      ...process.env,
      LEASH_STORE: store,
      LEASH_STATE_DIR: dir,
      NODE_OPTIONS: "--max-semi-space-size=2",
    },
  },
);
const listening = await lineOf(daemon, "listening");
const rss = () =>
  Number(/VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${daemon.pid}/status`, "utf8"))[1]) * 1024;

const answered = new Map(); // entry hash → "session call"
const failures = { errors: 0, noAnswer: 0 };
const latencies = { quiet: [], hostile: [] };
let phase = "quiet";
const peakRss = { quiet: 0, hostile: 0 };
const started = Date.now();
const end = started + seconds * 1000;

async function agent(n) {
  const client = await honestClient(globex);
  const reg = await client.request({
    case: "register",
    value: create(RegisterRequestSchema, { agentId: `soak-${n}`, organizationId: "globex" }),
  });
  const sessionId = reg.payload.value.sessionId;
  for (let call = 0; Date.now() < end; call++) {
    const t0 = performance.now();
    let answer;
    try {
      answer = await client.request({
        case: "preExec",
        value: create(PreExecRequestSchema, {
          sessionId,
          toolName: `tool-${call % 50}-${call}`,
          toolParamsJson: paramsToJson({ call, agent: n }),
          estimatedCostUsdDecimal: "0.0001",
        }),
      });
    } catch {
      failures.noAnswer++;
      continue;
    }
    latencies[phase].push(performance.now() - t0);
    if (answer.payload.case !== "preExecResponse") {
      failures.errors++;
      continue;
    }
    const r = answer.payload.value;
    answered.set(r.entryHash, `${sessionId} ${r.callNumber}`);
    client.notify({
      case: "postExec",
      value: create(PostExecNotificationSchema, {
        sessionId,
        callNumber: r.callNumber,
        success: true,
        actualCostUsdDecimal: "0.0001",
      }),
    });
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  client.close();
}

const sampler = setInterval(() => {
  peakRss[phase] = Math.max(peakRss[phase], rss());
}, 500);
const agents = Array.from({ length: Number(values.clients) }, (_, n) => agent(n));
await new Promise((resolve) => setTimeout(resolve, quietSeconds * 1000));
phase = "hostile";
const hostile = spawn(
  process.execPath,
  [
    HOSTILE,
    ...["--socket", socketPath, "--connections", values.hostile],
    ...["--key-hex", hex(acme), "--key-id", acme.keyId],
  ],
  { stdio: ["ignore", "pipe", "ignore"] },
);
let attack = {};
hostile.stdout.setEncoding("utf8").on("data", (chunk) => {
  const lines = chunk.trim().split("\n");
  attack = JSON.parse(lines[lines.length - 1]);
});
await Promise.all(agents);
clearInterval(sampler);
const metrics = await (await fetch(`http://${listening.http}/metrics`)).text();
hostile.kill("SIGTERM");
daemon.kill("SIGTERM");
await new Promise((resolve) => daemon.once("exit", resolve));

// The chain: verified, and each answered decision in it exactly once; no globex decision unanswered.
const substrate = await openStore(store);
const entries = [];
for (let from = 0; ; from += 5000) {
  const batch = await substrate.transaction((tx) => tx.chain.range(from, 5000));
  entries.push(...batch);
  if (batch.length < 5000) break;
}
const verified = await verifyChain(entries, { publicKeys: [signing.publicKeyHex] });
const seen = new Map();
for (const entry of entries) {
  if (entry.kind !== "decision") continue;
  const body = parseEntryBody(entry.body);
  const id = `${entry.session_id} ${body.data.call_number}`;
  seen.set(id, (seen.get(id) ?? 0) + 1);
}
const inChain = new Set(entries.map((e) => e.entry_hash));
const lost = [...answered.keys()].filter((hash) => !inChain.has(hash)).length;
const doubled = [...seen.values()].filter((count) => count > 1).length;
const unanswered = seen.size - answered.size;
await substrate.close();
rmSync(dir, { recursive: true, force: true });

const p99 = (xs) => {
  const sorted = [...xs].sort((a, b) => a - b);
  return Math.round(sorted[Math.floor(sorted.length * 0.99)] * 10) / 10;
};
const figures = {
  seconds,
  quietSeconds,
  hostileConnections: Number(values.hostile),
  decisions: answered.size,
  lost,
  doubled,
  unanswered,
  chainVerified: verified.ok,
  chainEntries: entries.length,
  failures,
  quiet: {
    calls: latencies.quiet.length,
    p99Ms: p99(latencies.quiet),
    peakRssMiB: Math.round(peakRss.quiet / 2 ** 20),
  },
  hostile: {
    calls: latencies.hostile.length,
    p99Ms: p99(latencies.hostile),
    peakRssMiB: Math.round(peakRss.hostile / 2 ** 20),
  },
  attack,
  refusals: Object.fromEntries(
    [...metrics.matchAll(/^leash_daemon_limit_refusals_total\{limit="([a-z_]+)"\} (\d+)/gm)].map((m) => [
      m[1],
      Number(m[2]),
    ]),
  ),
};
figures.p99Ratio = Math.round((figures.hostile.p99Ms / figures.quiet.p99Ms) * 100) / 100;
process.stdout.write(`${JSON.stringify(figures)}\n`);
process.exit(lost === 0 && doubled === 0 && unanswered === 0 && verified.ok ? 0 : 1);
