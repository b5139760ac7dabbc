// `leash tail --daemon` as a user runs it: the built CLI as a child process against a real `leash serve`
// on a SQLite file, over the socket and gRPC — same lines as --store, one organization only, --follow.
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generateKeyPair } from "@leash/chain";
import { type Client, createClient } from "@leash/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CLI_BIN, leash as leashInProcess } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "leash-cli-tail-daemon-"));
const dbPath = join(dir, "leash.db");
const socket = join(dir, "leash.sock");
const acmeKeyFile = join(dir, "acme-a1.hmac");
const globexKeyFile = join(dir, "globex-g1.hmac");
const acmeKey = randomBytes(32).toString("hex");
const globexKey = randomBytes(32).toString("hex");
let daemon: ChildProcess;
let grpc = "";
let acmeSession = "";
let globexSession = "";
const clients: Client[] = [];
const LINE = /^(\S+)\s{2}(\S+)\s{2}(\S+)\s{2}(ALLOW|DENY |HITL )\s{2}(\S+)$/;

function leash(args: string[]) {
  if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`npx tsc --build\` first`);
  const { LEASH_STORE: _s, NO_COLOR: _n, ...env } = process.env;
  return spawnSync(process.execPath, [CLI_BIN, ...args], { encoding: "utf8", env, timeout: 30_000 });
}

function client(org: "acme" | "globex", transport: "socket" | "grpc"): Client {
  const c = createClient({
    ...(transport === "socket"
      ? {
          socketPath: socket,
          hmacKey: org === "acme" ? acmeKey : globexKey,
          keyId: org === "acme" ? "a1" : "g1",
        }
      : { grpc: { address: grpc, tls: false } }),
    organizationId: org,
    agentId: `${org}-bot`,
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    heartbeatIntervalMs: 0,
  });
  clients.push(c);
  return c;
}

const acmeSocket = () => [
  "--daemon",
  socket,
  "--org",
  "acme",
  "--hmac-key-file",
  acmeKeyFile,
  "--hmac-key-id",
  "a1",
];
const acmeGrpc = () => ["--daemon", grpc, "--org", "acme", "--grpc-insecure"];

beforeAll(async () => {
  writeFileSync(acmeKeyFile, acmeKey, { mode: 0o600 });
  writeFileSync(globexKeyFile, globexKey, { mode: 0o600 });
  const key = generateKeyPair();
  writeFileSync(join(dir, "daemon.key"), key.privateKeyPem, { mode: 0o600 });
  writeFileSync(
    join(dir, "daemon.json"),
    JSON.stringify({
      organizations: {
        acme: {
          hmac_keys: { a1: { file: acmeKeyFile } },
          default_guard: { budget_usd: 5, max_repeat_calls: 2 },
        },
        globex: { hmac_keys: { g1: { file: globexKeyFile } } },
      },
    }),
  );
  daemon = spawn(
    process.execPath,
    [
      CLI_BIN,
      "serve",
      ...[
        "--config",
        join(dir, "daemon.json"),
        "--store",
        `sqlite:${dbPath}`,
        "--key-file",
        join(dir, "daemon.key"),
      ],
      ...["--socket", socket, "--grpc", "127.0.0.1:0", "--grpc-insecure"],
    ],
    { stdio: ["ignore", "pipe", "pipe"] },
  );
  grpc = await new Promise<string>((resolve, reject) => {
    let out = "";
    let err = "";
    daemon.stderr!.on("data", (chunk) => {
      err += chunk;
    });
    daemon.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      out += chunk;
      const line = out.split("\n").find((l) => l.startsWith('{"listening"'));
      if (line !== undefined) resolve(String((JSON.parse(line) as { grpc: string }).grpc));
    });
    daemon.once("exit", (code) => reject(new Error(`serve exited ${code}: ${err}`)));
  });
  const acme = client("acme", "socket");
  const globex = client("globex", "grpc");
  acmeSession = (await acme.register()).session_id;
  globexSession = (await globex.register()).session_id;
  // acme: two lookups allowed, the third identical one denied (repeat limit 2); globex: its own calls.
  for (const n of [1, 2, 3]) {
    await acme.preExec({ tool_name: "crm.lookup", params: { id: 7 }, nonce: n });
    await globex.preExec({ tool_name: "globex.secret", nonce: n });
  }
}, 120_000);

afterAll(async () => {
  for (const c of clients) c.close();
  if (daemon?.exitCode === null) {
    daemon.kill("SIGTERM");
    await new Promise((resolve) => daemon.once("exit", resolve));
  }
  rmSync(dir, { recursive: true, force: true });
});

describe("leash tail --daemon", { timeout: 60_000 }, () => {
  it("over the socket: the organization's decisions, one line each, and nothing of another organization", () => {
    const r = leash(["tail", ...acmeSocket()]);
    expect(r.stderr).toBe("");
    expect(r.status).toBe(0);
    const cells = r.stdout
      .trimEnd()
      .split("\n")
      .map((l) =>
        LINE.exec(l)
          ?.slice(2)
          .map((x) => x.trim()),
      );
    expect(cells).toEqual([
      [acmeSession, "crm.lookup", "ALLOW", "within_thresholds"],
      [acmeSession, "crm.lookup", "ALLOW", "within_thresholds"],
      [acmeSession, "crm.lookup", "DENY", "max_repeat_exceeded"],
    ]);
    expect(r.stdout).not.toContain("globex");
    const theirs = leash([
      "tail",
      "--daemon",
      socket,
      "--org",
      "globex",
      "--hmac-key-file",
      globexKeyFile,
      "--hmac-key-id",
      "g1",
    ]);
    expect(theirs.status).toBe(0);
    expect(
      theirs.stdout
        .trimEnd()
        .split("\n")
        .every((l) => l.includes(globexSession) && l.includes("globex.secret")),
    ).toBe(true);
    expect(theirs.stdout).not.toContain(acmeSession);
  });

  it("prints exactly what --store prints for the same decisions, over the socket and gRPC (--json, -n, --session)", () => {
    for (const n of ["10", "2"]) {
      const store = leash([
        "tail",
        "--store",
        `sqlite:${dbPath}`,
        "--session",
        acmeSession,
        "--json",
        "-n",
        n,
      ]);
      expect(store.status).toBe(0);
      expect(store.stdout.trimEnd().split("\n")).toHaveLength(Number(n) === 2 ? 2 : 3);
      for (const via of [acmeSocket(), acmeGrpc()]) {
        // -n 10: the organization's (acme has one session here); -n 2: also filtered by --session.
        const r = leash([
          "tail",
          ...via,
          "--json",
          "-n",
          n,
          ...(n === "2" ? ["--session", acmeSession] : []),
        ]);
        expect(r.stderr).toBe("");
        expect(r.stdout).toBe(store.stdout);
      }
    }
  });

  it.each([
    ["socket", acmeSocket],
    ["gRPC", acmeGrpc],
  ])(
    "--follow over the %s prints a decision made after it started, and not another organization's",
    async (_, flags) => {
      const child = spawn(process.execPath, [CLI_BIN, "tail", ...flags(), "--follow", "-n", "1"], {
        stdio: ["ignore", "pipe", "pipe"],
      });
      let out = "";
      let err = "";
      child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
      });
      child.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
        err += chunk;
      });
      const until = async (test: () => boolean) => {
        for (let i = 0; i < 200 && !test(); i++) await new Promise((r) => setTimeout(r, 50));
        return test();
      };
      expect(await until(() => out.split("\n").length >= 2), err).toBe(true); // the latest one, printed first
      await client("globex", "socket").preExec({ session_id: globexSession, tool_name: "globex.later" });
      const tool = `after.start.${flags === acmeSocket ? "socket" : "grpc"}`;
      // A new session of acme's: its first call is an ALLOW (acmeSession's circuit is open).
      const late = client("acme", "grpc");
      const session = (await late.register()).session_id;
      await late.preExec({ session_id: session, tool_name: tool });
      expect(await until(() => out.includes(tool)), err).toBe(true);
      child.kill("SIGINT");
      const code = await new Promise((resolve) => child.once("exit", resolve));
      expect(code).toBe(0);
      const lines = out.trimEnd().split("\n");
      expect(lines).toHaveLength(2);
      expect(lines[1]).toMatch(
        new RegExp(`^\\S+  ${session}  ${tool.replace(/\./g, "\\.")}  ALLOW  within_thresholds$`),
      );
      expect(out).not.toContain("globex");
    },
  );

  it("bad flags: one line on stderr, exit 2, nothing printed", async () => {
    const cases: [string[], RegExp][] = [
      [["--daemon", socket], /--daemon needs --org/],
      [["--daemon", socket, "--org", "acme"], /--hmac-key-file/],
      [
        ["--daemon", grpc, "--org", "acme", "--hmac-key-file", acmeKeyFile],
        /--hmac-key-file applies to a Unix socket/,
      ],
      [
        ["--daemon", socket, "--org", "acme", "--hmac-key-file", acmeKeyFile, "--grpc-insecure"],
        /--grpc-insecure applies to a gRPC/,
      ],
      [[...acmeSocket(), "--store", `sqlite:${dbPath}`], /not both/],
      [[...acmeGrpc(), "--interval", "100"], /--interval applies to --store/],
      [["--org", "acme", "--store", `sqlite:${dbPath}`], /--org applies only with --daemon/],
      [["--daemon", "10.1.2.3:50051", "--org", "acme", "--grpc-insecure"], /loopback/],
      [["--daemon", socket, "--org", "acme", "--hmac-key-file", join(dir, "missing.hmac")], /missing\.hmac/],
    ];
    for (const [args, message] of cases) {
      const r = await leashInProcess(["tail", ...args]);
      expect([r.code, r.stdout], args.join(" ")).toEqual([2, ""]);
      expect(r.stderr.trimEnd().split("\n"), args.join(" ")).toHaveLength(1);
      expect(r.stderr, args.join(" ")).toMatch(message);
    }
  });

  it("a daemon that is not there, or a refusal: one line, exit 1", () => {
    const gone = leash([
      "tail",
      "--daemon",
      join(dir, "nobody.sock"),
      "--org",
      "acme",
      "--hmac-key-file",
      acmeKeyFile,
    ]);
    expect(gone.status).toBe(1);
    expect(gone.stderr).toMatch(/^leash: error: the daemon at .*nobody\.sock: .*\(daemon_unavailable\)\n$/);
    const theirs = leash(["tail", ...acmeGrpc(), "--session", globexSession]);
    expect(theirs.status).toBe(1);
    expect(theirs.stderr.trimEnd().split("\n")).toHaveLength(1);
    expect(theirs.stderr).toMatch(/SESSION_NOT_FOUND/);
  });
});
