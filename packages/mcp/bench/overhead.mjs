#!/usr/bin/env node
// What `leash mcp` adds to one tools/call: the same calls straight to the test MCP server and through the
// built proxy (memory and SQLite stores), alternated, as one JSON line. Run after `tsc --build`.
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair } from "@leash/chain";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const CALLS = Number(process.env.CALLS ?? 300);
const ROUNDS = Number(process.env.ROUNDS ?? 3);
const server = fileURLToPath(new URL("../test/fixtures/test-server.mjs", import.meta.url));
const cli = fileURLToPath(new URL("../../../apps/cli/dist/bin.js", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "leash-mcp-bench-"));
const keyFile = join(dir, "leash.key");
writeFileSync(keyFile, generateKeyPair().privateKeyPem, { mode: 0o600 });

async function perCallMs(args) {
  const client = new Client({ name: "bench", version: "1" });
  await client.connect(
    new StdioClientTransport({ command: process.execPath, args, stderr: "ignore", cwd: dir }),
  );
  for (let i = 0; i < 20; i++) await client.callTool({ name: "echo", arguments: { text: `warm ${i}` } });
  const start = process.hrtime.bigint();
  for (let i = 0; i < CALLS; i++) await client.callTool({ name: "echo", arguments: { text: `call ${i}` } });
  const ms = Number(process.hrtime.bigint() - start) / 1e6 / CALLS;
  await client.close();
  return ms;
}

const proxy = (store) => [
  cli,
  "mcp",
  "--store",
  store,
  "--key-file",
  keyFile,
  "--",
  process.execPath,
  server,
];
const runs = { direct: [], memory: [], sqlite: [] };
for (let round = 0; round < ROUNDS; round++) {
  runs.direct.push(await perCallMs([server]));
  runs.memory.push(await perCallMs(proxy("memory:")));
  runs.sqlite.push(await perCallMs(proxy(`sqlite:${join(dir, `r${round}.db`)}`)));
}
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const out = { bench: "mcp_overhead", calls: CALLS, rounds: ROUNDS };
for (const [name, xs] of Object.entries(runs)) out[`${name}_ms_per_call`] = Number(median(xs).toFixed(3));
out.added_ms_memory = Number((out.memory_ms_per_call - out.direct_ms_per_call).toFixed(3));
out.added_ms_sqlite = Number((out.sqlite_ms_per_call - out.direct_ms_per_call).toFixed(3));
process.stdout.write(`${JSON.stringify(out)}\n`);
