// Hostile socket peers for the daemon's load test and soak: partial frames, slowloris, idle, never-reading.
// It attacks one socket path and keeps its connection count up until killed; it checks nothing itself.
//
// node hostile-peers.mjs --socket PATH --connections N [--key-hex HEX --key-id ID] [--kinds partial,idle,…]
//   [--tails N] [--requests N]   (per never-reading peer: tail requests, default 0; small ones, default 200)
// Without a key there are no never-reading peers (they need authenticated requests to get answers).
// Prints a JSON line of counts each second and on SIGTERM.
import { connect } from "node:net";
import { parseArgs } from "node:util";
import { create } from "@bufbuild/protobuf";
import { encodeFrame, GetSessionStateRequestSchema, sealEnvelope, TailRequestSchema } from "@leash/wire";

const { values } = parseArgs({
  options: {
    socket: { type: "string" },
    connections: { type: "string", default: "1000" },
    "key-hex": { type: "string" },
    "key-id": { type: "string" },
    kinds: { type: "string" },
    tails: { type: "string", default: "0" },
    requests: { type: "string", default: "200" },
  },
});
if (values.socket === undefined) throw new Error("--socket PATH is required");
const total = Number(values.connections);
const key =
  values["key-hex"] === undefined
    ? undefined
    : { key: Uint8Array.from(Buffer.from(values["key-hex"], "hex")), keyId: values["key-id"] ?? "" };
const clock = { nowNs: () => Date.now() * 1e6 };
const tails = Number(values.tails);

/** Kinds, by share of the connections. */
let KINDS = key
  ? [
      // 300 peers holding a 1 MiB frame, as issue #31 measured; the rest mostly idle.
      ["partial", 0.3],
      ["slowloris", 0.2],
      ["idle", 0.4],
      ["never_reading", 0.1],
    ]
  : [
      ["partial", 0.45],
      ["slowloris", 0.2],
      ["idle", 0.35],
    ];
if (values.kinds !== undefined) {
  // Only these kinds, sharing the connections equally (to see what each one costs).
  const only = values.kinds.split(",");
  KINDS = only.map((kind) => [kind, 1 / only.length]);
}
const counts = { opened: 0, closed: 0 };
let stopping = false;

const prefix = (length) => {
  const bytes = Buffer.alloc(4);
  bytes.writeUInt32BE(length, 0);
  return bytes;
};

/**
 * Requests whose answers a peer that never reads lets pile up: `tails` tails of the chain (large
 * answers, costly to build) and small refusals.
 */
function unreadRequests() {
  const frames = [];
  for (let i = 0; i < tails; i++) {
    const payload = { case: "tailEntries", value: create(TailRequestSchema, { last: 500, limit: 500 }) };
    frames.push(encodeFrame(sealEnvelope(payload, { ...key, sender: "agent", clock })));
  }
  for (let i = 0; i < Number(values.requests); i++) {
    const payload = {
      case: "getSessionState",
      value: create(GetSessionStateRequestSchema, { sessionId: `no-such-session-${i}` }),
    };
    frames.push(encodeFrame(sealEnvelope(payload, { ...key, sender: "agent", clock })));
  }
  return Buffer.concat(frames);
}

function open(kind) {
  if (stopping) return;
  const socket = connect(values.socket);
  let timer;
  let opened = false;
  socket.on("error", () => undefined);
  socket.once("connect", () => {
    opened = true;
    counts.opened++;
    if (kind === "partial") {
      // A 1 MiB frame announced, a quarter of it sent, the rest never.
      socket.write(Buffer.concat([prefix(1024 * 1024 - 1), Buffer.alloc(256 * 1024, 7)]));
    } else if (kind === "slowloris") {
      socket.write(prefix(1000));
      timer = setInterval(() => socket.write(Buffer.of(1)), 1000);
    } else if (kind === "never_reading") {
      socket.pause();
      socket.write(unreadRequests());
    }
  });
  socket.once("close", () => {
    clearInterval(timer);
    if (opened) counts.closed++;
    // Keep the count up: a closed peer comes back.
    setTimeout(() => open(kind), 1000 + Math.random() * 1000).unref();
  });
}

let started = 0;
for (const [kind, share] of KINDS) {
  const n = Math.round(total * share);
  for (let i = 0; i < n && started < total; i++, started++) {
    // Spread the connects over about a second, not one burst of thousands.
    setTimeout(() => open(kind), (started / total) * 1000);
  }
}
// Progress once a second: connections opened so far, closed by the daemon, open now.
const progress = setInterval(() => {
  process.stdout.write(`${JSON.stringify({ ...counts, open: counts.opened - counts.closed })}\n`);
}, 1000);
process.on("SIGTERM", () => {
  stopping = true;
  clearInterval(progress);
  process.stdout.write(`${JSON.stringify(counts)}\n`);
  process.exit(0);
});
