// Test harness: the built `leash mcp` as a child process, driven by the MCP SDK's real Client over stdio,
// in front of test/fixtures/test-server.mjs, with a real store. Nothing is mocked.
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair } from "@leash/chain";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import type { ClientCapabilities } from "@modelcontextprotocol/sdk/types.js";

export const REPO_ROOT = fileURLToPath(new URL("../../../", import.meta.url));
export const CLI = join(REPO_ROOT, "apps/cli/dist/bin.js");
export const TEST_SERVER = fileURLToPath(new URL("./fixtures/test-server.mjs", import.meta.url));

let built = false;
/** The CLI runs from dist: build it once per test file (`tsc --build` is incremental). */
export function ensureBuilt(): void {
  if (built) return;
  execFileSync(join(REPO_ROOT, "node_modules/.bin/tsc"), ["--build"], { cwd: REPO_ROOT, stdio: "inherit" });
  built = true;
}

export interface Workspace {
  dir: string;
  keyFile: string;
  publicKeyHex: string;
  signer: ReturnType<typeof generateKeyPair>["signer"];
  callLog: string;
  /** The tool calls the test server received, in order. */
  calls(): { tool: string; args: Record<string, unknown>; meta: Record<string, unknown> | null }[];
  writeConfig(yaml: string): string;
}

export function workspace(): Workspace {
  const dir = mkdtempSync(join(tmpdir(), "leash-mcp-test-"));
  const pair = generateKeyPair();
  const keyFile = join(dir, "leash.key");
  writeFileSync(keyFile, pair.privateKeyPem, { mode: 0o600 });
  const callLog = join(dir, "calls.ndjson");
  writeFileSync(callLog, "");
  return {
    dir,
    keyFile,
    publicKeyHex: pair.publicKeyHex,
    signer: pair.signer,
    callLog,
    calls: () =>
      readFileSync(callLog, "utf8")
        .split("\n")
        .filter((line) => line !== "")
        .map((line) => JSON.parse(line)),
    writeConfig: (yaml) => {
      const path = join(dir, "mcp.yaml");
      writeFileSync(path, yaml);
      return path;
    },
  };
}

export interface Proxied {
  client: Client;
  /** What `leash mcp` wrote on stderr so far. */
  stderr(): string;
  /** Resolves when the proxy's stdio closed (the process ended). */
  closed: Promise<void>;
  close(): Promise<void>;
}

/** Starts `leash mcp ARGS` and connects the SDK's Client to it over stdio. */
export async function proxied(
  ws: Workspace,
  args: readonly string[],
  options: { capabilities?: ClientCapabilities; name?: string; setup?: (client: Client) => void } = {},
): Promise<Proxied> {
  ensureBuilt();
  const transport = new StdioClientTransport({
    command: process.execPath,
    args: [CLI, "mcp", ...args],
    env: { PATH: process.env.PATH ?? "", HOME: ws.dir, CALL_LOG: ws.callLog },
    stderr: "pipe",
    cwd: ws.dir,
  });
  let stderr = "";
  transport.stderr?.on("data", (chunk: Buffer) => {
    stderr += chunk.toString("utf8");
  });
  const client = new Client(
    { name: options.name ?? "vitest-agent", version: "1.0.0" },
    { capabilities: options.capabilities ?? {} },
  );
  options.setup?.(client);
  let resolveClosed: () => void = () => undefined;
  const closed = new Promise<void>((resolve) => {
    resolveClosed = resolve;
  });
  client.onclose = () => resolveClosed();
  try {
    await client.connect(transport);
  } catch (error) {
    throw new Error(`leash mcp did not start: ${(error as Error).message}; stderr: ${stderr}`);
  }
  return { client, stderr: () => stderr, closed, close: () => client.close() };
}

/** Runs `leash mcp ARGS` to its end without a client (for refusals): status and stderr. */
export function runCli(
  args: readonly string[],
  cwd: string,
): Promise<{ status: number | null; stderr: string }> {
  ensureBuilt();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [CLI, "mcp", ...args], { cwd, stdio: ["pipe", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (chunk: Buffer) => {
      stderr += chunk.toString("utf8");
    });
    child.on("close", (status) => resolve({ status, stderr }));
    child.stdin.end();
  });
}

/** Starts the test server on streamable HTTP; its URL and a stop function. */
export async function httpTestServer(ws: Workspace): Promise<{ url: string; stop(): void }> {
  const child = spawn(process.execPath, [TEST_SERVER, "--http"], {
    env: { ...process.env, CALL_LOG: ws.callLog },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const url = await new Promise<string>((resolve, reject) => {
    let out = "";
    child.stdout.on("data", (chunk: Buffer) => {
      out += chunk.toString("utf8");
      const line = out.split("\n")[0];
      if (out.includes("\n") && line !== undefined) resolve((JSON.parse(line) as { url: string }).url);
    });
    child.on("exit", (code) => reject(new Error(`the HTTP test server exited (${code})`)));
  });
  return { url, stop: () => child.kill() };
}

/** The text of a tool result's first content item. */
export function firstText(result: { content?: unknown }): string {
  const content = result.content as { type: string; text?: string }[] | undefined;
  return content?.[0]?.text ?? "";
}
