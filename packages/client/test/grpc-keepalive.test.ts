// gRPC keepalive against a real `leash serve`: a following tail survives quiet periods of many pings, and
// ends with daemon_unavailable soon after the daemon process is SIGSTOPped (the connection stays open).
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ServeProcess, serve, writeConfig } from "@leash/test-stores";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Client, type ClientOptions, createClient, type TailEntry } from "../src/index.js";

const dir = mkdtempSync(join(tmpdir(), "leash-client-keepalive-"));
let daemon: ServeProcess;
const clients: Client[] = [];

beforeAll(async () => {
  const config = writeConfig(dir, "daemon.json", {
    organizations: { acme: { hmac_keys: { a1: { hex: randomBytes(32).toString("hex") } } } },
  });
  daemon = await serve([
    ...["--config", config, "--store", `sqlite:${join(dir, "leash.db")}`, "--ephemeral-key"],
    ...["--socket", join(dir, "leash.sock"), "--grpc", "127.0.0.1:0", "--grpc-insecure"],
  ]);
}, 120_000);

afterAll(async () => {
  for (const c of clients) c.close();
  await daemon?.stop(); // SIGCONT first
  rmSync(dir, { recursive: true, force: true });
});

function connect(keepalive: NonNullable<ClientOptions["grpc"]>["keepalive"]): Client {
  const c = createClient({
    grpc: { address: daemon.listening.grpc as string, tls: false, keepalive },
    organizationId: "acme",
    agentId: "bot",
    timeoutMs: 5000,
    controlTimeoutMs: 5000,
    heartbeatIntervalMs: 0,
  });
  clients.push(c);
  return c;
}

type Settled = { entry: TailEntry | undefined } | { error: { code?: string; message?: string } };

/** The iterator's next step as a value; "pending" while it has not settled. */
function step(tail: AsyncGenerator<TailEntry>): {
  settled: () => Settled | "pending";
  done: Promise<Settled>;
} {
  let result: Settled | "pending" = "pending";
  const done = tail.next().then(
    (r) => (result = { entry: r.done ? undefined : r.value }),
    (error: { code?: string; message?: string }) => (result = { error }),
  );
  return { settled: () => result, done };
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe("gRPC keepalive", () => {
  it("a following tail outlives quiet pings, then ends with daemon_unavailable once the daemon is SIGSTOPped", async () => {
    const short = { timeMs: 200, timeoutMs: 3000 }; // room for a loaded host to ack in time
    const tail = connect(short).tail({ last: 0, follow: true, kinds: ["session_registered"] });
    const quiet = connect(false).tail({ last: 0, follow: true, kinds: ["session_registered"] });

    // Healthy: several ping periods without data, then an entry still arrives on both streams.
    let first = step(tail);
    let firstQuiet = step(quiet);
    await sleep(1500);
    expect(first.settled()).toBe("pending");
    const { session_id } = await connect(short).register();
    expect(await first.done).toMatchObject({ entry: { session_id, kind: "session_registered" } });
    expect(await firstQuiet.done).toMatchObject({ entry: { session_id } });

    // Hung: the process stops, its connections stay open. The pinging tail ends with a clear error.
    first = step(tail);
    firstQuiet = step(quiet);
    await sleep(300); // both streams waiting again
    process.kill(daemon.child.pid as number, "SIGSTOP");
    const ended = await Promise.race([first.done, sleep(30_000).then(() => "still waiting" as const)]);
    expect(ended).toMatchObject({ error: { code: "daemon_unavailable" } });
    expect((ended as { error: Error }).error.message).toMatch(
      /^lost the daemon at 127\.0\.0\.1:\d+: .*keepalive ping within 3000 ms/,
    );
    // Without keepalive nothing notices: that tail is still waiting on the hung daemon.
    expect(firstQuiet.settled()).toBe("pending");
    process.kill(daemon.child.pid as number, "SIGCONT");
  }, 60_000);

  it("refuses a bad keepalive option with a one-line invalid_argument", () => {
    expect(() => connect({ timeMs: 0 })).toThrow(/grpc\.keepalive\.timeMs must be a positive integer/);
    expect(() => connect({ timeoutMs: 1.5 })).toThrow(/grpc\.keepalive\.timeoutMs/);
  });
});
