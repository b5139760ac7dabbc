// The Python client (clients/python) against a real `leash serve` on SQLite, over the Unix socket and
// gRPC: Appendix A, receipts, mTLS, fail closed once the daemon is stopped. Needs /usr/bin/python3 with
// Debian's python3-protobuf, python3-grpcio, python3-cryptography and python3-mypy (.ci/run installs them).
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { cpSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { generateKeyPair, verifyChain } from "@leash/chain";
import { verifyReceipt } from "@leash/receipts";
import { formatReport, recover } from "@leash/recovery";
import { makeTestPki } from "@leash/test-stores";
import { paramsDigest, paramsFromJson } from "@leash/wire";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ensureBuilt, openStore, type Running, runDaemon, scratchDir, serve } from "./support.js";

const PYTHON = "/usr/bin/python3";
const CLIENT = fileURLToPath(new URL("../../../clients/python/", import.meta.url));

interface Run {
  code: number;
  stdout: string;
  stderr: string;
}

/** Runs a program; async, so this process keeps reaping its children (the stopped daemon among them). */
function run(
  file: string,
  args: string[],
  options: { cwd?: string; env?: Record<string, string> } = {},
): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      file,
      args,
      {
        cwd: options.cwd ?? CLIENT,
        env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1", ...options.env },
        timeout: 120_000,
      },
      (error, stdout, stderr) => {
        const code = error === null ? 0 : typeof error.code === "number" ? error.code : 1;
        resolve({ code, stdout, stderr });
      },
    );
  });
}

/** python3 with the client's source and tests on its path. */
const python = (args: string[], env: Record<string, string> = {}): Promise<Run> =>
  run(PYTHON, args, { env: { PYTHONPATH: `${CLIENT}src:${CLIENT}tests`, ...env } });

/** unittest's summary line: "Ran N tests". */
const ranCount = (run: Run) => Number(/Ran (\d+) tests?/.exec(run.stderr)?.[1] ?? -1);

interface Decision {
  transport: string;
  test: string;
  verdict: string;
  reason: string;
  call_number: number;
  entry_seq: number;
  entry_hash: string;
  receipt: string;
  params_hash: string | null;
  session_id: string;
}

describe("the Python client against leash serve (socket + gRPC, SQLite)", () => {
  const hmac = randomBytes(32);
  const key = generateKeyPair();
  const dir = scratchDir();
  const out = join(dir, "decisions.jsonl");
  let store: Awaited<ReturnType<typeof openStore>>;
  let daemon: { child: ChildProcess; stderr: () => string; listening: Record<string, unknown> };
  let env: Record<string, string>;

  beforeAll(async () => {
    ensureBuilt();
    store = await openStore("sqlite");
    writeFileSync(join(dir, "acme-k1.hmac"), hmac.toString("hex"), { mode: 0o600 });
    writeFileSync(join(dir, "daemon.key"), key.privateKeyPem, { mode: 0o600 });
    const config = {
      organizations: {
        acme: {
          hmac_keys: { "acme-k1": { file: join(dir, "acme-k1.hmac") } },
          default_guard: { budget_usd: 1 },
          agents: { "research-bot": { guard: { budget_usd: 0.5, max_repeat_calls: 3 } } },
        },
      },
    };
    writeFileSync(join(dir, "daemon.json"), JSON.stringify(config));
    const socket = join(dir, "leash.sock");
    daemon = await serve([
      ...["--config", join(dir, "daemon.json"), "--store", store.url!, "--key-file", join(dir, "daemon.key")],
      ...["--socket", socket, "--grpc", "127.0.0.1:0", "--grpc-insecure"],
    ]);
    expect(daemon.listening.public_key).toBe(key.publicKeyHex);
    env = {
      LEASH_TEST_SOCKET: socket,
      LEASH_TEST_GRPC: String(daemon.listening.grpc),
      LEASH_TEST_HMAC_HEX: hmac.toString("hex"),
      LEASH_TEST_KEY_ID: "acme-k1",
      LEASH_TEST_PUBLIC_KEY: key.publicKeyHex,
      LEASH_TEST_DAEMON_PID: String(daemon.child.pid),
      LEASH_TEST_OUT: out,
    };
  }, 120_000);

  afterAll(async () => {
    if (daemon?.child.exitCode === null) daemon.child.kill("SIGKILL");
    await store?.close();
  });

  const decisions = (): Decision[] =>
    existsSync(out)
      ? readFileSync(out, "utf8")
          .trim()
          .split("\n")
          .map((l) => JSON.parse(l) as Decision)
      : [];

  it("the committed shackle_pb2.py is what protoc makes from the wire's proto (drift check)", async () => {
    const run = await python(["scripts/generate.py", "--check"]);
    expect(run.code, run.stderr).toBe(0);
  });

  it("the client's type hints hold (mypy --strict, the config in pyproject.toml)", async () => {
    const run = await python(["-m", "mypy", "--cache-dir=/dev/null", "src/leash_client"]);
    expect(run.code, run.stdout + run.stderr).toBe(0);
    expect(run.stdout).toContain("Success: no issues found");
  }, 120_000);

  it("installs from the repository path with pip (setuptools, the generated code and py.typed included)", async () => {
    // A copy, so pip's in-tree build leaves nothing in the checkout; --system-site-packages and
    // --no-index: the dependencies are Debian's, and no package index is needed.
    const copy = join(dir, "python-client");
    cpSync(CLIENT, copy, { recursive: true, filter: (src) => !src.includes("__pycache__") });
    const venv = join(dir, "venv");
    // --without-pip: the venv runs Debian's pip from the system site packages (no ensurepip copy to wait for).
    const made = await python(["-m", "venv", "--system-site-packages", "--without-pip", venv]);
    expect(made.code, made.stderr).toBe(0);
    const pip = await run(join(venv, "bin/python"), [
      ...["-m", "pip", "install", "-q", "--no-compile", "--no-build-isolation", "--no-index", copy],
    ]);
    expect(pip.code, pip.stderr).toBe(0);
    const script =
      "import leash_client, os; d = os.path.dirname(leash_client.__file__); print(d); print(sorted(f for f in os.listdir(d + '/_proto') if f != '__pycache__'), os.path.exists(d + '/py.typed'))";
    const shown = await run(join(venv, "bin/python"), ["-c", script], { cwd: dir, env: { PYTHONPATH: "" } });
    expect(shown.code, shown.stderr).toBe(0);
    const [where, contents] = shown.stdout.trim().split("\n");
    expect(where).toContain(join(venv, "lib"));
    expect(contents).toBe("['__init__.py', 'shackle_pb2.py', 'shackle_pb2.pyi'] True");
  }, 120_000);

  it("the client's own tests pass: wire pieces, and fail closed against misbehaving daemons", async () => {
    const run = await python(["-m", "unittest", "discover", "-s", "tests"]);
    expect(run.code, run.stderr).toBe(0);
    expect(ranCount(run)).toBeGreaterThanOrEqual(42);
  }, 120_000);

  it("Appendix A over the socket and gRPC: three ALLOWs ran, max_repeat_exceeded and circuit_open did not; every receipt verifies here too", async () => {
    const run = await python(["-m", "unittest", "-v", "live_daemon.AppendixA"], env);
    expect(run.code, run.stderr).toBe(0);
    expect(ranCount(run)).toBe(5);
    const flows = decisions().filter((d) => d.test === "appendix_a");
    for (const transport of ["socket", "grpc"]) {
      const mine = flows.filter((d) => d.transport === transport);
      expect(mine.map((d) => [d.verdict, d.reason])).toEqual([
        ["ALLOW", "within_thresholds"],
        ["ALLOW", "within_thresholds"],
        ["ALLOW", "within_thresholds"],
        ["DENY", "max_repeat_exceeded"],
        ["DENY", "circuit_open"],
      ]);
      expect(new Set(mine.map((d) => d.session_id)).size).toBe(1);
    }
    for (const d of decisions()) {
      const checked = await verifyReceipt(d.receipt, key.publicKeyHex);
      expect(checked.ok, JSON.stringify(checked)).toBe(true);
      if (!checked.ok) continue;
      expect([checked.entry_hash, checked.seq]).toEqual([d.entry_hash, d.entry_seq]);
      expect(checked.payload.data.reason).toBe(d.reason);
      if (d.params_hash !== null) expect(checked.payload.data.params_hash).toBe(d.params_hash);
    }
  }, 120_000);

  it("Appendix A over gRPC from protoc's generated messages and grpcio alone: every PreExecResponse field as the spec shows it", async () => {
    // No leash_client logic: the generated shackle_pb2 and a bare grpcio channel, as any Python team
    // that generates its own client from the proto would have.
    const script = `
import json, os, time, grpc
from leash_client._proto import shackle_pb2 as pb
from google.protobuf import empty_pb2
channel = grpc.insecure_channel(os.environ["LEASH_TEST_GRPC"])
md = (("leash-organization", "acme"),)
def call(method, request, response):
    return channel.unary_unary("/shackle.sp1.ShackleDaemon/" + method, request_serializer=type(request).SerializeToString,
                               response_deserializer=response.FromString)(request, metadata=md, timeout=10)
reg = call("Register", pb.RegisterRequest(agent_id="research-bot", framework="crewai", organization_id="acme"), pb.RegisterResponse)
params = '{"query":"leash sidecar"}'
import hashlib
digest = hashlib.sha256(params.encode()).digest()
out = []
for n in range(1, 5):
    before = time.time_ns()
    r = call("PreExec", pb.PreExecRequest(session_id=reg.session_id, call_number=n, tool_name="web_search",
             tool_params_hash=digest, tool_params_json=params, estimated_cost_usd=0.002), pb.PreExecResponse)
    after = time.time_ns()
    out.append({"session_ok": r.session_id == reg.session_id, "call_number": r.call_number,
                "verdict": pb.Verdict.Name(r.verdict), "deny_reason": pb.DenyReason.Name(r.deny_reason),
                "human_readable_reason": r.human_readable_reason, "budget_remaining_usd": r.budget_remaining_usd,
                "repeat_count": r.repeat_count, "time_ok": before - 10**9 <= r.daemon_time_ns <= after + 10**9,
                "probabilistic_deny": r.probabilistic_deny})
print(json.dumps(out))
`;
    const run = await python(["-c", script], env);
    expect(run.code, run.stderr).toBe(0);
    const answers = JSON.parse(run.stdout) as Record<string, unknown>[];
    expect(answers.map((a) => [a.verdict, a.repeat_count, a.budget_remaining_usd])).toEqual([
      ["ALLOW", 0, 0.498],
      ["ALLOW", 1, 0.496], // Appendix A, line 8
      ["ALLOW", 2, 0.494],
      ["DENY", 3, 0.494], // line 10: DENY MAX_REPEAT_EXCEEDED, repeat_count=3
    ]);
    expect(answers.map((a) => a.deny_reason)).toEqual(["NONE", "NONE", "NONE", "MAX_REPEAT_EXCEEDED"]);
    for (const [i, a] of answers.entries()) {
      expect(a).toMatchObject({
        session_ok: true,
        call_number: i + 1,
        time_ok: true,
        probabilistic_deny: false,
      });
      expect(a.human_readable_reason).toBe(i < 3 ? "ALLOW: within_thresholds" : "DENY: max_repeat_exceeded");
    }
  }, 120_000);

  it("tail over the socket and gRPC: the session's decisions with their seq and hash, resume, last, follow", async () => {
    const run = await python(["-m", "unittest", "-v", "live_daemon.Tail"], env);
    expect(run.code, run.stderr).toBe(0);
    expect(ranCount(run)).toBe(1);
  }, 120_000);

  it("Python's canonical digest of tricky params is @leash/wire's", async () => {
    const texts = [
      '{"q": "päris", "n": 10.0, "big": 1180591620717411303424, "e": 1e16, "z": -0.0}',
      '{"émoji": "😀", "a": "\\u2028", "ctl": "\\u0001\\t", "B": 1, "b": 2, "nested": [[{"ü": null}], true]}',
      '{"raw": 1.50, "x": 1E5, "neg": -1e-7}',
    ];
    const script =
      "import json,sys\nfrom leash_client.params import params_on_wire\nfor t in json.loads(sys.argv[1]): print(params_on_wire(t)[1])";
    const run = await python(["-c", script, JSON.stringify(texts)]);
    expect(run.code, run.stderr).toBe(0);
    const expected = texts.map((t) => Buffer.from(paramsDigest(paramsFromJson(t))).toString("hex"));
    expect(run.stdout.trim().split("\n")).toEqual(expected);
  });

  it("the daemon stopped: every call on both transports is DENY fail_closed:daemon_unavailable and the tool never runs; the chain verifies", async () => {
    const run = await python(["-m", "unittest", "-v", "live_daemon.DaemonStopped"], env);
    expect(run.code, run.stderr).toBe(0);
    expect(ranCount(run)).toBe(1);
    await new Promise<void>((resolve) => {
      if (daemon.child.exitCode !== null) resolve();
      else daemon.child.once("exit", () => resolve());
    });
    expect(daemon.child.exitCode).toBe(0);
    // Every verdict the Python client acted on is in the verified chain, as received.
    const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100_000));
    expect((await verifyChain(entries, { publicKeys: [key.publicKeyHex] })).ok).toBe(true);
    const received = decisions();
    expect(received.length).toBeGreaterThanOrEqual(16);
    for (const d of received) expect(entries[d.entry_seq]?.entry_hash).toBe(d.entry_hash);
  }, 120_000);
});

describe("the Python client keeps a post_exec until the daemon has it durably (SQLite)", () => {
  it("SIGSTOP after an ALLOW, no ack, SIGKILL, recover, restart: re-sent on reconnect, recorded once", async () => {
    ensureBuilt();
    const hmac = randomBytes(32);
    const key = generateKeyPair();
    const dir = scratchDir();
    const store = await openStore("sqlite");
    const children: ChildProcess[] = [];
    try {
      writeFileSync(join(dir, "acme-k1.hmac"), hmac.toString("hex"), { mode: 0o600 });
      writeFileSync(join(dir, "daemon.key"), key.privateKeyPem, { mode: 0o600 });
      const config = {
        organizations: {
          acme: {
            hmac_keys: { "acme-k1": { file: join(dir, "acme-k1.hmac") } },
            default_guard: { budget_usd: 1 },
          },
        },
      };
      writeFileSync(join(dir, "daemon.json"), JSON.stringify(config));
      const socket = join(dir, "leash.sock");
      const args = [
        ...[
          "--config",
          join(dir, "daemon.json"),
          "--store",
          store.url!,
          "--key-file",
          join(dir, "daemon.key"),
        ],
        ...["--socket", socket],
      ];
      const first = await serve(args);
      children.push(first.child);
      const script = spawn(PYTHON, [join(CLIENT, "tests/resend_after_kill.py")], {
        env: {
          ...process.env,
          PYTHONPATH: `${CLIENT}src`,
          PYTHONDONTWRITEBYTECODE: "1",
          LEASH_TEST_SOCKET: socket,
          LEASH_TEST_HMAC_HEX: hmac.toString("hex"),
          LEASH_TEST_KEY_ID: "acme-k1",
          LEASH_TEST_DAEMON_PID: String(first.child.pid),
        },
        stdio: ["ignore", "pipe", "pipe"],
      });
      children.push(script);
      let out = "";
      let err = "";
      script.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
        err += chunk;
      });
      const lines: string[] = [];
      const waiters: Array<() => void> = [];
      script.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
        out += chunk;
        const whole = out.split("\n");
        out = whole.pop()!;
        lines.push(...whole);
        for (const w of waiters.splice(0)) w();
      });
      const exited = new Promise<number | null>((resolve) => script.once("exit", resolve));
      const line = async (n: number): Promise<string> => {
        while (lines.length < n) {
          if (script.exitCode !== null) throw new Error(`the script exited early:\n${err}`);
          await Promise.race([new Promise<void>((r) => waiters.push(r)), exited]);
        }
        return lines[n - 1]!;
      };

      const [word, sessionId, unacked, pending] = (await line(1)).split(" ");
      expect([word, unacked, pending]).toEqual(["STOPPED", "timeout", "1"]);
      const gone = new Promise((resolve) => first.child.once("exit", resolve));
      first.child.kill("SIGKILL");
      await gone;
      const report = await recover(store.substrate, {
        publicKeys: [key.publicKeyHex],
        signer: key.signer,
        storeUrl: store.url!,
        repair: true,
      });
      expect(report.ok, formatReport(report)).toBe(true);
      const second = await serve(args);
      children.push(second.child);

      const seen = JSON.parse(await line(2)) as Record<string, unknown>;
      expect(await exited, err).toBe(0);
      expect(seen).toEqual({
        session_id: sessionId,
        pending: 0,
        after: ["DENY", false],
        spent: "0.6",
        again: 1,
      });
      const entries = await store.substrate.transaction((tx) => tx.chain.range(0, 100_000));
      const settlements = entries
        .filter((e) => e.kind === "post_exec")
        .map((e) => (JSON.parse(e.body) as { data: Record<string, unknown> }).data)
        .filter((d) => d.session_id === sessionId);
      expect(settlements.map((d) => [d.call_number, d.actual_usd])).toEqual([[1, "0.6"]]);
      expect((await verifyChain(entries, { publicKeys: [key.publicKeyHex] })).ok).toBe(true);
    } finally {
      for (const child of children)
        if (child.exitCode === null && child.signalCode === null) child.kill("SIGKILL");
      await store.close();
    }
  }, 120_000);
});

describe("the Python client over gRPC with mTLS (openssl-made certificates)", () => {
  const dir = scratchDir();
  let running: Running | undefined;

  beforeAll(async () => {
    const pki = makeTestPki(dir, {
      cas: ["ca"],
      leaves: [
        { name: "server", signedBy: "ca", subject: "/CN=localhost", san: "DNS:localhost,IP:127.0.0.1" },
        { name: "acme", signedBy: "ca", subject: "/CN=acme", san: "DNS:acme.example" },
        { name: "initech", signedBy: "ca", subject: "/CN=initech", san: "DNS:initech.example" },
      ],
    });
    const read = (name: string) => pki[name]!;
    running = await runDaemon("sqlite", {
      grpc: {
        listen: "127.0.0.1:0",
        tls: { cert: read("server.pem"), key: read("server.key"), clientCa: read("ca.pem") },
      },
    });
  }, 60_000);

  afterAll(async () => {
    await running?.stop();
  });

  it("a certificate of a configured organization is served, receipts verified; no certificate or an unknown organization fails closed", async () => {
    const run = await python(["-m", "unittest", "-v", "live_daemon.MutualTls"], {
      LEASH_TEST_TLS_DIR: dir,
      LEASH_TEST_TLS_GRPC: running!.daemon.grpcAddress!,
      LEASH_TEST_TLS_PUBLIC_KEY: running!.key.publicKeyHex,
    });
    expect(run.code, run.stderr).toBe(0);
    expect(ranCount(run)).toBe(2);
  }, 60_000);
});
