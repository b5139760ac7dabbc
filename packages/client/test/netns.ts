// Network faults for tests (Linux, root): a network namespace joined to the root one by a veth pair,
// iptables drops inside it (loss, partition), and a TCP forwarder to PostgreSQL on the root side.
import { execFileSync } from "node:child_process";
import { randomBytes } from "node:crypto";
import { createServer, type Server, type Socket, connect as tcpConnect } from "node:net";

const run = (cmd: string, args: readonly string[]) =>
  execFileSync(cmd, args, { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });

/** Why the file cannot run here, or null: it needs root, `ip` and `iptables` (apt: iproute2, iptables). */
export function netnsUnavailable(): string | null {
  if (process.platform !== "linux") return "network namespaces are Linux only";
  if (process.getuid?.() !== 0) return "ip netns needs root (CI runs the tests as root)";
  for (const [cmd, args] of [
    ["ip", ["-V"]],
    ["iptables", ["-V"]],
  ] as const) {
    try {
      run(cmd, args);
    } catch {
      return `${cmd} is not installed (.ci/run apt-installs it)`;
    }
  }
  return null;
}

export interface Netns {
  readonly name: string;
  /** The root side's address (the forwarder listens there) and the namespace side's. */
  readonly hostIp: string;
  readonly nsIp: string;
  /** argv prefix that runs a command inside the namespace. */
  readonly exec: readonly string[];
  /** Drops each packet in and out of the namespace's veth with this probability (0 removes the rule). */
  loss(probability: number): void;
  /** Drops every packet in and out: TCP connections hang, nothing is reset. */
  partition(): void;
  /** Removes every drop rule. */
  heal(): void;
  /** `tc netem` delay on the namespace's veth, when this kernel has netem; false when it has not. */
  netemDelay(ms: number, jitterMs: number): boolean;
  /** Removes the netem delay (nothing when there was none). */
  clearDelay(): void;
  destroy(): void;
}

/**
 * A namespace with a veth pair on a /30 of its own. Names and subnets are random, and an address
 * already in use on this machine is skipped, so parallel test files do not collide.
 */
export function createNetns(): Netns {
  // Random, not per process: vitest may run files as threads of one process (one pid, one counter each).
  const id = randomBytes(3).toString("hex");
  const name = `leashnf${id}`;
  const [vh, vn] = [`lnf${id}h`, `lnf${id}n`];
  const used = run("ip", ["-o", "-4", "addr", "show"]);
  let second = 100 + (randomBytes(1)[0]! % 100);
  let third = randomBytes(1)[0]! % 64;
  let hostIp = "";
  for (let tries = 0; tries < 256; tries++) {
    hostIp = `10.${second}.${third * 4}.1`;
    if (!used.includes(`10.${second}.${third * 4}.`)) break;
    third = (third + 1) % 64;
    if (third === 0) second = 100 + ((second - 99) % 100);
  }
  const nsIp = hostIp.replace(/\.1$/, ".2");
  const exec = ["ip", "netns", "exec", name];
  const inNs = (cmd: string, args: readonly string[]) => run("ip", ["netns", "exec", name, cmd, ...args]);
  const destroy = () => {
    for (const args of [
      ["link", "del", vh],
      ["netns", "del", name],
    ]) {
      try {
        run("ip", args);
      } catch {
        // already gone (deleting the namespace deletes its veth end, and the pair with it)
      }
    }
  };
  // Also on exit: a run cut short (Ctrl-C, a killed worker) must not leave the namespace and its veth behind.
  process.once("exit", destroy);
  try {
    run("ip", ["netns", "add", name]);
    run("ip", ["link", "add", vh, "type", "veth", "peer", "name", vn]);
    run("ip", ["link", "set", vn, "netns", name]);
    run("ip", ["addr", "add", `${hostIp}/30`, "dev", vh]);
    run("ip", ["link", "set", vh, "up"]);
    inNs("ip", ["addr", "add", `${nsIp}/30`, "dev", vn]);
    inNs("ip", ["link", "set", vn, "up"]);
    inNs("ip", ["link", "set", "lo", "up"]);
  } catch (error) {
    destroy();
    throw error;
  }
  // The rules live in the namespace's own tables: flushing them touches no other test's or the host's.
  const drop = (extra: readonly string[]) => {
    inNs("iptables", ["-A", "INPUT", "-i", vn, ...extra, "-j", "DROP"]);
    inNs("iptables", ["-A", "OUTPUT", "-o", vn, ...extra, "-j", "DROP"]);
  };
  const flush = () => inNs("iptables", ["-F"]);
  return {
    name,
    hostIp,
    nsIp,
    exec,
    loss(probability) {
      flush();
      if (probability > 0)
        drop(["-m", "statistic", "--mode", "random", "--probability", String(probability)]);
    },
    partition() {
      flush();
      drop([]);
    },
    heal: flush,
    netemDelay(ms, jitterMs) {
      try {
        inNs("tc", ["qdisc", "replace", "dev", vn, "root", "netem", "delay", `${ms}ms`, `${jitterMs}ms`]);
        run("tc", ["qdisc", "replace", "dev", vh, "root", "netem", "delay", `${ms}ms`, `${jitterMs}ms`]);
        return true;
      } catch {
        return false; // CONFIG_NET_SCH_NETEM off: the forwarder delays instead
      }
    },
    clearDelay() {
      for (const [cmd, args] of [
        ["ip", ["netns", "exec", name, "tc", "qdisc", "del", "dev", vn, "root"]],
        ["tc", ["qdisc", "del", "dev", vh, "root"]],
      ] as const) {
        try {
          run(cmd, args);
        } catch {
          // no qdisc of ours there
        }
      }
    },
    destroy,
  };
}

export interface Forwarder {
  readonly port: number;
  /** Delay each chunk by ms ± jitter (in order: a chunk never overtakes the one before); 0 turns it off. */
  setDelay(ms: number, jitterMs: number): void;
  close(): Promise<void>;
}

/**
 * Listens on `host` (the veth's root-side address) and pipes each connection to `target`. PostgreSQL
 * listens on loopback only, and loopback is not reachable from another namespace: this is the way in.
 */
export async function startForwarder(
  host: string,
  target: { host: string; port: number },
): Promise<Forwarder> {
  const sockets = new Set<Socket>();
  let delay = { ms: 0, jitter: 0 };
  const pipe = (from: Socket, to: Socket) => {
    // One queue per direction, drained by one timer at a time: bytes leave in the order they came.
    const queue: Array<{ at: number; chunk: Buffer }> = [];
    let timer: NodeJS.Timeout | null = null;
    const drain = () => {
      timer = null;
      while (queue.length > 0 && queue[0]!.at <= Date.now())
        if (!to.destroyed) to.write(queue.shift()!.chunk);
      if (queue.length > 0) timer = setTimeout(drain, queue[0]!.at - Date.now());
    };
    from.on("data", (chunk: Buffer) => {
      if (delay.ms === 0 && queue.length === 0) {
        to.write(chunk);
        return;
      }
      const wanted = Date.now() + delay.ms + (Math.random() * 2 - 1) * delay.jitter;
      queue.push({ at: Math.max(wanted, queue.at(-1)?.at ?? 0), chunk });
      if (timer === null) timer = setTimeout(drain, queue[0]!.at - Date.now());
    });
  };
  const server: Server = createServer((inbound) => {
    const outbound = tcpConnect(target.port, target.host);
    for (const s of [inbound, outbound]) {
      sockets.add(s);
      s.on("error", () => undefined);
      s.on("close", () => {
        sockets.delete(s);
        inbound.destroy();
        outbound.destroy();
      });
    }
    pipe(inbound, outbound);
    pipe(outbound, inbound);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, host, () => resolve());
  });
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("the forwarder has no port");
  return {
    port: address.port,
    setDelay(ms, jitterMs) {
      delay = { ms, jitter: jitterMs };
    },
    close: () =>
      new Promise((resolve) => {
        for (const s of sockets) s.destroy();
        server.close(() => resolve());
      }),
  };
}
