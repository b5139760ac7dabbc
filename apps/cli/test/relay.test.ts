// `leash relay` against real stores and real sinks: NDJSON files, a PostgreSQL table, stdout, a local webhook.
// Nothing is mocked: the webhook is a node:http server on 127.0.0.1 that checks the HMAC like a receiver would.
import { spawn } from "node:child_process";
import { createHash, createHmac } from "node:crypto";
import { existsSync, readFileSync } from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { join } from "node:path";
import { afterAll, afterEach, beforeEach, describe, expect, it } from "vitest";
import { run } from "../src/program.js";
import { CLI_BIN, expectOneLineError, leash, scratchDir, testKey } from "./helpers.js";
import { PG_URL, STORE_KINDS, type TestStore, testStore, withPg } from "./stores.js";

const keys = scratchDir();
afterAll(() => keys.cleanup());
const KEY = testKey(keys.dir);
/** Only the commands that write the chain get the key: the relay must run without one. */
const KEY_ENV = { LEASH_SIGNING_KEY: KEY.pem };
const SECRET = "s3cret-for-the-webhook";

const SUMMARY =
  /^leash relay: delivered (\d+), failed (\d+), dead (\d+), pending (\d+)(?:; (last error: .+|seq \d+ is dead: .+))?\n$/;

/** The summary line, which must be all of stderr. */
function summary(stderr: string) {
  const match = SUMMARY.exec(stderr);
  if (match === null) throw new Error(`no summary line in stderr:\n${stderr}`);
  const [, delivered, failed, dead, pending] = match.slice(0, 5).map(Number);
  return { delivered, failed, dead, pending, why: match[5] };
}

const ndjsonIds = (text: string) =>
  text
    .split("\n")
    .filter((l) => l !== "")
    .map((l) => JSON.parse(l).entry_id as string);

interface Receiver {
  readonly url: string;
  /** Accepted requests: the Idempotency-Key header and the entries of the body. */
  readonly received: { key: string; entries: { entry_id: string; body: string; entry_hash: string }[] }[];
  /** Requests refused for a bad signature. */
  rejected: number;
  /** The HMAC secret it checks; a test changes it to fix a misconfigured receiver. */
  secret: string;
  close(): Promise<void>;
}

/** A webhook receiver on 127.0.0.1 (random port) that refuses a request whose HMAC is not `secret`'s. */
async function receiver(secret = SECRET): Promise<Receiver> {
  const state: Receiver = {
    url: "",
    received: [],
    rejected: 0,
    secret,
    close: async () => undefined,
  };
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on("data", (chunk: Buffer) => chunks.push(chunk));
    req.on("end", () => {
      const body = Buffer.concat(chunks);
      const expected = `sha256=${createHmac("sha256", state.secret).update(body).digest("hex")}`;
      if (req.method !== "POST" || req.headers["x-leash-signature"] !== expected) {
        state.rejected++;
        res.writeHead(401).end("bad signature");
        return;
      }
      const key = String(req.headers["idempotency-key"]);
      state.received.push({ key, entries: JSON.parse(body.toString("utf8")).entries });
      res.writeHead(200).end("ok");
    });
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  return Object.assign(state, {
    url: `http://127.0.0.1:${port}/leash/audit`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  });
}

/** A URL on 127.0.0.1 where nothing listens: a port just opened and closed again. */
async function deadUrl(): Promise<string> {
  const r = await receiver();
  await r.close();
  return r.url;
}

async function until(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 15_000,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 25));
  }
}

describe.each(STORE_KINDS)("leash relay on %s", (kind) => {
  let store: TestStore;
  beforeEach(async () => {
    store = await testStore(kind);
  });
  afterEach(async () => {
    await store.cleanup();
  });

  /** `leash …` against this test's store, with no signing key. */
  const L = (argv: string[], env: Record<string, string> = {}) =>
    leash([...argv, "--store", store.url], "", env);
  const relay = (sink: string, ...flags: string[]) => L(["relay", "--sink", sink, ...flags]);

  /** Writes a chain: a session per agent, `calls` evaluations in each. */
  const fill = async (agents = ["bot"], calls = 3): Promise<void> => {
    for (const agent of agents) {
      const created = await L(["session", "create", "--agent", agent], KEY_ENV);
      expect(created.code).toBe(0);
      const session = JSON.parse(created.stdout).session_id;
      for (let n = 1; n <= calls; n++) {
        const r = await L(
          ["evaluate", "--session", session, "--tool", "search", "--nonce", `${agent}-${n}`],
          KEY_ENV,
        );
        expect(r.code).toBe(0);
      }
    }
  };
  /** The chain's entry ids in seq order, as `leash export --format jsonl` prints them. */
  const exportedIds = async (): Promise<string[]> => {
    const r = await L(["export", "--format", "jsonl"]);
    expect(r.code).toBe(0);
    return ndjsonIds(r.stdout);
  };

  it("--once into a file sink delivers every chain entry exactly once; a second run adds nothing", async () => {
    await fill(["a", "b"], 3);
    const ids = await exportedIds();
    expect(ids).toHaveLength(8);
    const out = join(store.dir, "audit.ndjson");

    const first = await relay(`file:${out}`, "--once", "--batch", "3");
    expect(first.stdout).toBe("");
    expect(first.stderr).toBe("leash relay: delivered 8, failed 0, dead 0, pending 0\n");
    expect(first.code).toBe(0);
    expect(ndjsonIds(readFileSync(out, "utf8"))).toEqual(ids);

    const again = await relay(`file:${out}`, "--once");
    expect(again.stderr).toBe("leash relay: delivered 0, failed 0, dead 0, pending 0\n");
    expect(again.code).toBe(0);
    expect(ndjsonIds(readFileSync(out, "utf8"))).toEqual(ids);

    // New entries: only they are shipped, and the file is still the whole chain, verifiable offline.
    await fill(["c"], 1);
    const more = await relay(`file:${out}`, "--once");
    expect(summary(more.stderr)).toMatchObject({ delivered: 2, pending: 0 });
    const all = await exportedIds();
    expect(ndjsonIds(readFileSync(out, "utf8"))).toEqual(all);
    const verified = await leash(["verify", "--file", out, "--pubkey", KEY.pubHex]);
    expect(verified.stdout).toMatch(/^OK: 10 entries verified/);
  });

  it("the postgres sink gets every entry once, in a fresh schema, bodies byte for byte", async () => {
    await fill(["a", "b"], 2);
    const ids = await exportedIds();
    const schema = `leash_sink_${process.pid}_${Math.floor(Math.random() * 1e9)}`;
    const sink = `${PG_URL}?schema=${schema}&table=central_audit`;
    try {
      const first = await relay(sink, "--once", "--batch", "4");
      expect(first.stderr).toBe(`leash relay: delivered ${ids.length}, failed 0, dead 0, pending 0\n`);
      expect(first.code).toBe(0);
      const again = await relay(sink, "--once");
      expect(summary(again.stderr).delivered).toBe(0);

      const rows = await withPg(
        async (client) =>
          (
            await client.query<{ entry_id: string; body: string; entry_hash: string }>(
              `SELECT entry_id, body, entry_hash FROM "${schema}".central_audit ORDER BY seq`,
            )
          ).rows,
      );
      expect(rows.map((r) => r.entry_id)).toEqual(ids);
      for (const row of rows) {
        expect(createHash("sha256").update(row.body, "utf8").digest("hex")).toBe(row.entry_hash);
      }
    } finally {
      await withPg((client) => client.query(`DROP SCHEMA IF EXISTS "${schema}" CASCADE`));
    }
  });

  it("the stdout sink prints the entries as NDJSON on stdout and the summary on stderr", async () => {
    await fill(["bot"], 2);
    const ids = await exportedIds();
    const r = await relay("stdout", "--once");
    expect(r.code).toBe(0);
    expect(r.stderr).toBe(`leash relay: delivered ${ids.length}, failed 0, dead 0, pending 0\n`);
    expect(r.stdout.endsWith("\n")).toBe(true);
    const lines = r.stdout.trimEnd().split("\n");
    expect(lines.map((l) => JSON.parse(l).entry_id)).toEqual(ids);
    expect(Object.keys(JSON.parse(lines[0]!))).toEqual([
      "seq",
      "entry_id",
      "kind",
      "session_id",
      "created_ns",
      "key_id",
      "prev_hash",
      "entry_hash",
      "signature",
      "body",
    ]);
    expect((await relay("stdout", "--once")).stdout).toBe("");
  });

  it("the webhook sink POSTs each entry HMAC-signed, keyed by its entry id", async () => {
    await fill(["a", "b"], 2);
    const ids = await exportedIds();
    const hook = await receiver();
    try {
      const r = await L(["relay", "--sink", hook.url, "--once"], { LEASH_WEBHOOK_SECRET: SECRET });
      expect(r.stderr).toBe(`leash relay: delivered ${ids.length}, failed 0, dead 0, pending 0\n`);
      expect(r.code).toBe(0);
      expect(hook.rejected).toBe(0);
      expect(hook.received.map((x) => x.key)).toEqual(ids);
      expect(hook.received.flatMap((x) => x.entries.map((e) => e.entry_id))).toEqual(ids);
      for (const { entries } of hook.received) {
        const [entry] = entries;
        expect(createHash("sha256").update(entry!.body, "utf8").digest("hex")).toBe(entry!.entry_hash);
      }
      const again = await L(["relay", "--sink", hook.url, "--once"], { LEASH_WEBHOOK_SECRET: SECRET });
      expect(summary(again.stderr).delivered).toBe(0);
      expect(hook.received).toHaveLength(ids.length);

      // The secret may live in a variable of the operator's choosing.
      await fill(["c"], 0);
      const named = await L(["relay", "--sink", hook.url, "--once", "--webhook-secret-env", "HOOK_KEY"], {
        HOOK_KEY: SECRET,
      });
      expect(summary(named.stderr).delivered).toBe(1);
      expect(named.code).toBe(0);
    } finally {
      await hook.close();
    }
  });

  it("a new HITL request reaches the webhook as a hitl_request entry: request id, tool, digest and expiry, not the params", async () => {
    const created = await L(["session", "create", "--agent", "bot", "--hitl", "always"], KEY_ENV);
    const session = JSON.parse(created.stdout).session_id;
    const paused = await L(
      [
        "evaluate",
        "--session",
        session,
        "--tool",
        "pay",
        "--nonce",
        "p1",
        "--params",
        '{"iban":"DE00 secret"}',
      ],
      KEY_ENV,
    );
    expect(paused.code).toBe(4);
    const { hitl_request_id: requestId, params_hash: digest } = JSON.parse(paused.stdout);
    const hook = await receiver();
    try {
      const r = await L(["relay", "--sink", hook.url, "--once"], { LEASH_WEBHOOK_SECRET: SECRET });
      expect(r.code).toBe(0);
      const bodies = hook.received.flatMap((x) => x.entries.map((e) => JSON.parse(e.body)));
      const announced = bodies.filter((b) => b.kind === "hitl_request");
      expect(announced).toHaveLength(1);
      expect(announced[0].data).toMatchObject({
        session_id: session,
        request_id: requestId,
        tool_name: "pay",
        args_digest: digest,
        reason: "hitl_all_calls",
      });
      expect(typeof announced[0].data.expires_ns).toBe("string"); // epoch ns, exact, as text
      // The announcement a chat channel posts names the request, not its params (`leash hitl show` has
      // them); the decision entry itself records the call's params, the input replay re-decides from.
      expect(JSON.stringify(announced[0])).not.toContain("secret");
      const decision = bodies.find((b) => b.kind === "decision" && b.data.verdict === "HITL");
      expect(decision?.data.params_json).toBe('{"iban":"DE00 secret"}');
    } finally {
      await hook.close();
    }
  });

  it("a receiver that refuses the signature (401) makes the entry DEAD, its session waiting behind it: exit 1", async () => {
    await fill(["bot"], 1);
    const hook = await receiver("another-secret");
    try {
      const r = await L(["relay", "--sink", hook.url, "--once"], { LEASH_WEBHOOK_SECRET: SECRET });
      expect(r.code).toBe(1);
      const s = summary(r.stderr);
      // The session's second entry is not sent while its first is DEAD (order holds).
      expect(s).toMatchObject({ delivered: 0, failed: 0, dead: 1, pending: 1 });
      expect(s.why).toBe("seq 0 is dead: HTTP 401 Unauthorized: bad signature");
      expect(hook.rejected).toBe(1);
      // DEAD stays DEAD: the next run still exits 1, and says so.
      const again = await L(["relay", "--sink", hook.url, "--once"], { LEASH_WEBHOOK_SECRET: SECRET });
      expect(summary(again.stderr)).toMatchObject({ delivered: 0, dead: 1, pending: 1 });
      expect(again.code).toBe(1);
      expect(hook.rejected).toBe(1);
    } finally {
      await hook.close();
    }
  });

  it("--requeue-dead: entries a 401 made DEAD are delivered once the receiver is fixed, each exactly once", async () => {
    await fill(["a", "b"], 2);
    const ids = await exportedIds();
    const env = { LEASH_WEBHOOK_SECRET: SECRET };
    const hook = await receiver("another-secret");
    try {
      const refused = await L(["relay", "--sink", hook.url, "--once"], env);
      expect(refused.code).toBe(1);
      // The first entry of each session is refused and DEAD; the rest of each waits behind it, untried.
      expect(summary(refused.stderr)).toMatchObject({ delivered: 0, dead: 2, pending: ids.length - 2 });
      expect(hook.rejected).toBe(2);

      // The receiver is fixed, but DEAD stays DEAD until asked, and holds its session: nothing is even sent.
      hook.secret = SECRET;
      const still = await L(["relay", "--sink", hook.url, "--once"], env);
      expect(still.code).toBe(1);
      expect(summary(still.stderr)).toMatchObject({ delivered: 0, dead: 2 });
      expect(hook.received).toEqual([]);

      const requeued = await L(["relay", "--sink", hook.url, "--once", "--requeue-dead"], env);
      expect(requeued.stdout).toBe("");
      expect(requeued.stderr).toBe(
        "leash relay: requeued 2 dead entries\n" +
          `leash relay: delivered ${ids.length}, failed 0, dead 0, pending 0\n`,
      );
      expect(requeued.code).toBe(0);
      // Each entry arrived exactly once, in chain order, its body intact; the refused tries were never accepted.
      expect(hook.received.map((x) => x.key)).toEqual(ids);
      expect(hook.received.flatMap((x) => x.entries.map((e) => e.entry_id))).toEqual(ids);
      for (const { entries } of hook.received) {
        const [entry] = entries;
        expect(createHash("sha256").update(entry!.body, "utf8").digest("hex")).toBe(entry!.entry_hash);
      }
      expect(hook.rejected).toBe(2);

      // Nothing is DEAD any more: asking again requeues and delivers nothing.
      const again = await L(["relay", "--sink", hook.url, "--once", "--requeue-dead"], env);
      expect(again.stderr).toBe(
        "leash relay: requeued 0 dead entries\nleash relay: delivered 0, failed 0, dead 0, pending 0\n",
      );
      expect(again.code).toBe(0);
      expect(hook.received).toHaveLength(ids.length);
    } finally {
      await hook.close();
    }
  });

  it("--requeue-dead with the sink still broken: the entries die again, exit 1, still requeueable", async () => {
    await fill(["bot"], 1);
    const env = { LEASH_WEBHOOK_SECRET: SECRET };
    const hook = await receiver("another-secret");
    try {
      expect((await L(["relay", "--sink", hook.url, "--once"], env)).code).toBe(1);
      const retried = await L(["relay", "--sink", hook.url, "--once", "--requeue-dead"], env);
      expect(retried.code).toBe(1);
      const [requeuedLine, summaryLine] = retried.stderr.split(/(?<=\n)/);
      const s = summary(summaryLine!);
      expect(requeuedLine).toBe("leash relay: requeued 1 dead entry\n");
      expect(s).toMatchObject({ delivered: 0, dead: 1, pending: 1 });
      // The newest refusal replaced the requeue stamp as the reason.
      expect(s.why).toBe("seq 0 is dead: HTTP 401 Unauthorized: bad signature");
      expect(hook.rejected).toBe(2);
      expect(hook.received).toEqual([]);
    } finally {
      await hook.close();
    }
  });

  it("an unreachable webhook leaves every entry pending (exit 0), delivered once it is back", async () => {
    await fill(["a", "b"], 2);
    const ids = await exportedIds();
    const failing = await L(["relay", "--sink", await deadUrl(), "--once"], { LEASH_WEBHOOK_SECRET: SECRET });
    expect(failing.stdout).toBe("");
    expect(failing.code).toBe(0);
    const s = summary(failing.stderr);
    // The endpoint does not answer: one try, and the rest go back untried (no attempts spent on them).
    expect(s).toMatchObject({ delivered: 0, failed: 1, dead: 0, pending: ids.length });
    expect(s.why).toMatch(/^last error: .*ECONNREFUSED 127\.0\.0\.1:\d+/);

    const hook = await receiver();
    try {
      const back = await L(["relay", "--sink", hook.url, "--once"], { LEASH_WEBHOOK_SECRET: SECRET });
      expect(back.stderr).toBe(`leash relay: delivered ${ids.length}, failed 0, dead 0, pending 0\n`);
      expect(back.code).toBe(0);
      expect(hook.received.map((x) => x.key)).toEqual(ids);
    } finally {
      await hook.close();
    }
  });

  it("--max-attempts 1: the first failure makes the entry DEAD (exit 1), the rest stay pending", async () => {
    await fill(["bot"], 2);
    const r = await L(["relay", "--sink", await deadUrl(), "--once", "--max-attempts", "1"], {
      LEASH_WEBHOOK_SECRET: SECRET,
    });
    expect(r.code).toBe(1);
    const s = summary(r.stderr);
    expect(s).toMatchObject({ delivered: 0, failed: 1, dead: 1, pending: 2 });
    expect(s.why).toMatch(/^last error: .*ECONNREFUSED/);
  });

  it("without --once it ships entries as they are written and stops cleanly on the signal", async () => {
    await fill(["a"], 1);
    const out = join(store.dir, "live.ndjson");
    let stop: ((signal: string) => void) | undefined;
    let stdout = "";
    let stderr = "";
    const running = run(
      ["relay", "--store", store.url, "--sink", `file:${out}`, "--progress-ms", "20", "--relay-id", "live-1"],
      {
        stdout: (text) => {
          stdout += text;
        },
        stderr: (text) => {
          stderr += text;
        },
        readStdin: async () => "",
        stderrIsTTY: true,
        stdinIsTTY: false,
        env: {},
        onStop: (handler) => {
          stop = handler;
          return () => {
            stop = undefined;
          };
        },
      },
    );
    const lines = () => (existsSync(out) ? ndjsonIds(readFileSync(out, "utf8")).length : 0);
    await until("the first entries", () => stop !== undefined && lines() === 2);
    await fill(["b"], 2);
    await until("the entries written later", () => lines() === 5);
    await until("a progress line", () => stderr.includes("leash relay: delivered 5, pending 0"));
    stop!("SIGTERM");
    expect(await running).toBe(0);
    expect(stop).toBeUndefined();
    expect(stdout).toBe("");
    expect(stderr).toContain("\r\x1b[K");
    // The progress line is cleared before the summary, which is the last line.
    expect(stderr.endsWith("\r\x1b[Kleash relay: delivered 5, failed 0, dead 0, pending 0\n")).toBe(true);
    expect(ndjsonIds(readFileSync(out, "utf8"))).toEqual(await exportedIds());
  });
});

describe("leash relay input", () => {
  const scratch = scratchDir();
  afterAll(() => scratch.cleanup());
  const db = () => `sqlite:${join(scratch.dir, "never.db")}`;

  it.each([
    [["--sink", "kafka:audit"], "bad --sink kafka:audit: expected file:PATH, http(s)://URL"],
    [["--sink", "file:"], "give the NDJSON file's path"],
    [["--sink", ""], "--sink"],
    [["--sink", "https://user:pw@example.com/hook"], "cannot carry credentials"],
    [["--sink", "https://example.com/hook"], "set LEASH_WEBHOOK_SECRET (or name another variable"],
    [["--sink", "https://example.com/hook", "--webhook-secret-env", "NOPE"], "set NOPE"],
    [["--sink", "stdout", "--webhook-secret-env", "X"], "http(s) sink only"],
    [["--sink", "postgres://u:hunter22@127.0.0.1/db?table=a-b"], "table must be a plain identifier"],
    [["--sink", "postgres://127.0.0.1/db?schema=a&schema=b"], "`schema` is given twice"],
    [["--sink", "file:/nonexistent-dir/audit.ndjson"], "cannot open sink file:/nonexistent-dir/audit.ndjson"],
    [["--once"], "required option '--sink <spec>'"],
    [["--sink", "stdout", "--batch", "0"], "--batch"],
    [["--sink", "stdout", "--max-attempts", "x"], "--max-attempts"],
    [["--sink", "stdout", "--relay-id", " "], "--relay-id"],
  ])("%j exits 2 in one line", async (argv, message) => {
    const store = argv.includes("file:/nonexistent-dir/audit.ndjson") ? "memory:" : db();
    const r = await leash(["relay", "--store", store, ...argv], "", {});
    expect(r.code).toBe(2);
    expect(r.stdout).toBe("");
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain(message);
    expect(r.stderr).not.toContain("hunter22");
    expect(existsSync(join(scratch.dir, "never.db"))).toBe(false);
  });

  it("refuses a store that does not exist instead of creating one", async () => {
    const r = await leash(["relay", "--store", db(), "--sink", "stdout", "--once"]);
    expect(r.code).toBe(2);
    expect(r.stderr).toContain("no store at");
    expect(existsSync(join(scratch.dir, "never.db"))).toBe(false);
  });

  it("names an unreachable postgres sink without its password", async () => {
    const created = await leash(["migrate", "--store", `sqlite:${join(scratch.dir, "s.db")}`]);
    expect(created.code).toBe(0);
    const r = await leash([
      "relay",
      "--store",
      `sqlite:${join(scratch.dir, "s.db")}`,
      "--sink",
      "postgres://leash:hunter22@127.0.0.1:1/db",
      "--once",
    ]);
    expect(r.code).toBe(2);
    expectOneLineError(r.stderr);
    expect(r.stderr).toContain("cannot open sink postgres://leash:***@127.0.0.1:1/db");
    expect(r.stderr).not.toContain("hunter22");
  });

  it("documents sinks, the summary line and the exit statuses in --help", async () => {
    const r = await leash(["relay", "--help"]);
    expect(r.code).toBe(0);
    for (const text of [
      "file:PATH",
      "X-Leash-Signature",
      "SIGTERM",
      "delivered N, failed M",
      "--requeue-dead",
      "Exit status",
    ]) {
      expect(r.stdout).toContain(text);
    }
    expect(r.stdout).not.toContain("--progress-ms");
  });
});

describe("the built binary's relay", () => {
  it.skipIf(process.platform === "win32")(
    "runs until SIGTERM, then finishes and exits 0 with the summary",
    async () => {
      if (!existsSync(CLI_BIN)) throw new Error(`${CLI_BIN} is missing: run \`npx tsc --build\` first`);
      const scratch = scratchDir();
      try {
        const url = `sqlite:${join(scratch.dir, "leash.db")}`;
        const created = await leash(["session", "create", "--agent", "bot", "--store", url], "", KEY_ENV);
        expect(created.code).toBe(0);
        const out = join(scratch.dir, "audit.ndjson");
        const { LEASH_STORE: _s, LEASH_SIGNING_KEY: _k, ...env } = process.env;
        const child = spawn(process.execPath, [CLI_BIN, "relay", "--store", url, "--sink", `file:${out}`], {
          env,
          stdio: ["ignore", "pipe", "pipe"],
        });
        let stderr = "";
        child.stderr.on("data", (chunk: Buffer) => {
          stderr += chunk.toString("utf8");
        });
        const exited = new Promise<number | null>((resolve) => child.on("exit", (code) => resolve(code)));
        await until("the relay to ship the entry", () => existsSync(out) && readFileSync(out, "utf8") !== "");
        child.kill("SIGTERM");
        expect(await exited).toBe(0);
        expect(stderr).toBe("leash relay: delivered 1, failed 0, dead 0, pending 0\n");
      } finally {
        scratch.cleanup();
      }
    },
  );
});
