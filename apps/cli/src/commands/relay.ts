// `leash relay`: ships the store's audit chain from the outbox to a sink (file, webhook, PostgreSQL, stdout).
// The delivery loop, retries and ordering are @leash/relay's; this opens store and sink, runs, and reports.
import type { Substrate } from "@leash/core";
import { OutboxError, outboxStats, requeueDead } from "@leash/outbox";
import { createRelay, type Relay, RelayError, type Sink } from "@leash/relay";
import { type Command, Option } from "commander";
import { nonEmpty, positiveInteger } from "../args.js";
import { addStoreOptions, loadSettings, type StoreOptions } from "../context.js";
import { CliError, EXIT_BAD_INPUT, EXIT_REFUSED, firstLine, type Io } from "../io.js";
import { openSink, parseSinkSpec, SINK_FORMS, WEBHOOK_SECRET_ENV, webhookSecret } from "../sinks.js";
import { openExistingStore, type StoreTarget, scrubSecrets, storeFailure } from "../store.js";

export interface RelayCommandOptions extends StoreOptions {
  readonly sink: string;
  readonly once?: boolean;
  readonly batch: number;
  readonly leaseMs: number;
  readonly maxAttempts: number;
  readonly relayId?: string;
  readonly webhookSecretEnv?: string;
  /** Move every DEAD entry back to PENDING before delivering (after the sink that refused them was fixed). */
  readonly requeueDead?: boolean;
  /** How often the running relay reads its stats (progress on a terminal, failures everywhere). */
  readonly progressMs: number;
}

/** What `relay` ends with: this run's deliveries and failures, the outbox's DEAD and PENDING at exit. */
export interface RelaySummary {
  readonly delivered: number;
  readonly failed: number;
  readonly dead: number;
  readonly pending: number;
  /** The last retryable failure of this run, when there was one. */
  readonly lastError: string | null;
  /** The oldest DEAD entry and why it was given up, when there is one. */
  readonly firstDead: { readonly seq: number; readonly error: string | null } | null;
}

export function summaryLine(summary: RelaySummary): string {
  const { delivered, failed, dead, pending, lastError, firstDead } = summary;
  const line = `leash relay: delivered ${delivered}, failed ${failed}, dead ${dead}, pending ${pending}`;
  // Why entries are still waiting, or were given up, is the first thing an operator asks.
  let why = "";
  if (failed > 0 && lastError !== null) why = `; last error: ${oneLine(lastError)}`;
  else if (firstDead !== null)
    why = `; seq ${firstDead.seq} is dead: ${oneLine(firstDead.error ?? "no reason kept")}`;
  return `${line}${why}\n`;
}

function oneLine(text: string): string {
  return text.replace(/\s*\r?\n\s*/g, " ");
}

/** A failure while relaying (not while starting): one line, exit 1, the store's password scrubbed. */
function relayFailure(err: unknown, target: StoreTarget): unknown {
  const store = storeFailure(err, target.url);
  if (store !== undefined) return store;
  if (OutboxError.isInstance(err) || RelayError.isInstance(err)) {
    const hint = err.code === "corrupt" ? "; run `leash verify`" : "";
    return new CliError(
      `relay: ${scrubSecrets(firstLine(err), target.url)} (${err.code})${hint}`,
      EXIT_REFUSED,
      { cause: err },
    );
  }
  return err;
}

async function summarize(relay: Relay, substrate: Substrate): Promise<RelaySummary> {
  const totals = await relay.stats();
  const { counts } = await outboxStats(substrate);
  const [dead] =
    counts.DEAD === 0
      ? []
      : await substrate.transaction((tx) => tx.outbox.list({ status: "DEAD", limit: 1 }));
  return {
    delivered: totals.delivered,
    failed: totals.failed,
    dead: counts.DEAD,
    pending: counts.PENDING,
    lastError: totals.lastError,
    firstDead: dead === undefined ? null : { seq: dead.seq, error: dead.last_error },
  };
}

function seconds(ms: number | null): string {
  return ms === null ? "0 s" : `${(ms / 1000).toFixed(1)} s`;
}

/**
 * Runs the relay loop until the first SIGINT/SIGTERM, then stops after the batch in flight. Every
 * `progressMs` it reads the stats: a terminal gets a progress line, and any stderr gets one line when
 * deliveries start failing and one when they recover (never a line per retry).
 */
async function runUntilStopped(relay: Relay, io: Io, progressMs: number): Promise<void> {
  let drawn = false;
  let failing = false;
  const clear = () => {
    if (drawn) io.stderr("\r\x1b[K");
    drawn = false;
  };
  let polling = false;
  const poll = async () => {
    if (polling) return;
    polling = true;
    try {
      const stats = await relay.stats();
      const nowFailing = stats.consecutiveFailures > 0;
      if (nowFailing !== failing) {
        clear();
        io.stderr(
          nowFailing
            ? `leash relay: warning: delivery to ${relay.sink.name} failing, retrying with backoff: ${oneLine(stats.lastError ?? "unknown error")}\n`
            : `leash relay: delivering to ${relay.sink.name} again\n`,
        );
        failing = nowFailing;
      }
      if (io.stderrIsTTY) {
        io.stderr(
          `\r\x1b[Kleash relay: delivered ${stats.delivered}, pending ${stats.lag.pending}, lag ${seconds(stats.lag.oldestPendingAgeMs)}${failing ? " (failing)" : ""}`,
        );
        drawn = true;
      }
    } catch (err) {
      // The store is unreachable; the loop backs off on its own, and says so through consecutiveFailures.
      if (!failing) {
        clear();
        io.stderr(`leash relay: warning: cannot read the outbox: ${firstLine(err)}\n`);
        failing = true;
      }
    } finally {
      polling = false;
    }
  };
  let off: () => void = () => undefined;
  const stopped = new Promise<string>((resolve) => {
    off = io.onStop(resolve);
  });
  relay.start();
  const timer = setInterval(() => void poll(), progressMs);
  try {
    await stopped;
  } finally {
    off();
    clearInterval(timer);
    // The round in flight is settled, never abandoned: its entries are acked or released for the next relay.
    await relay.stop();
    while (polling) await new Promise((resolve) => setTimeout(resolve, 10));
    clear();
  }
}

export async function runRelay(options: RelayCommandOptions, io: Io): Promise<number> {
  const { target } = await loadSettings(options, io);
  const spec = parseSinkSpec(options.sink);
  if (options.webhookSecretEnv !== undefined && spec.kind !== "webhook") {
    throw new CliError("--webhook-secret-env applies to an http(s) sink only", EXIT_BAD_INPUT);
  }
  // Everything the user can get wrong is checked before anything is opened.
  const secret = spec.kind === "webhook" ? webhookSecret(io, options.webhookSecretEnv) : undefined;
  const substrate = await openExistingStore(target);
  let sink: Sink | undefined;
  try {
    sink = await openSink(spec, io, secret);
    let relay: Relay;
    try {
      relay = createRelay({
        substrate,
        sink,
        batchSize: options.batch,
        leaseMs: options.leaseMs,
        maxAttempts: options.maxAttempts,
        ...(options.relayId === undefined ? {} : { relayId: options.relayId }),
      });
    } catch (err) {
      if (RelayError.isInstance(err)) throw new CliError(firstLine(err), EXIT_BAD_INPUT, { cause: err });
      throw err;
    }
    try {
      // After the relay is built, so bad flags have been refused; before it runs, so this run ships them.
      if (options.requeueDead) {
        const n = await requeueDead(substrate, { all: true });
        io.stderr(`leash relay: requeued ${n} dead ${n === 1 ? "entry" : "entries"}\n`);
      }
      if (options.once) await relay.drain();
      else await runUntilStopped(relay, io, options.progressMs);
      const summary = await summarize(relay, substrate);
      io.stderr(summaryLine(summary));
      return summary.dead === 0 ? 0 : EXIT_REFUSED;
    } catch (err) {
      throw relayFailure(err, target);
    }
  } finally {
    await sink?.close?.().catch(() => undefined);
    await substrate.close().catch(() => undefined);
  }
}

export function registerRelay(program: Command, io: Io, setExit: (code: number) => void): void {
  addStoreOptions(
    program
      .command("relay")
      .description(
        "ship the audit chain from the store's outbox to a sink; --once to deliver what is pending and exit",
      )
      .addOption(
        new Option("--sink <spec>", `where entries go: ${SINK_FORMS}`)
          .argParser(nonEmpty)
          .makeOptionMandatory(),
      )
      .option("--once", "deliver everything pending, print the summary and exit (for cron and scripts)")
      .option("--batch <n>", "entries per round", positiveInteger, 100)
      .option(
        "--lease-ms <n>",
        "how long a claimed batch is this relay's; longer than a round can take",
        positiveInteger,
        30_000,
      )
      .option(
        "--max-attempts <n>",
        "rounds an entry may fail (retryably) before it is made DEAD",
        positiveInteger,
        20,
      )
      .option(
        "--relay-id <id>",
        "lease holder name, unique per running relay (default: host:pid:random)",
        nonEmpty,
      )
      .option(
        "--requeue-dead",
        "first move every DEAD entry back to PENDING, attempts reset (once the sink that refused them is fixed)",
      )
      .option(
        "--webhook-secret-env <name>",
        `the environment variable holding the webhook's HMAC secret (default: ${WEBHOOK_SECRET_ENV})`,
        nonEmpty,
      )
      .addOption(
        new Option("--progress-ms <n>", "stats interval").argParser(positiveInteger).default(2000).hideHelp(),
      ),
  )
    .addHelpText("after", relayHelp())
    .action(async (options: RelayCommandOptions) => {
      setExit(await runRelay(options, io));
    });
}

/** The text after `leash relay --help`'s options: the sinks, the running relay, DEAD entries, output. */
function relayHelp(): string {
  return `
Sinks:
  file:PATH            NDJSON, one entry per line, fsynced before an entry counts as delivered;
                       entries already in the file are skipped (one relay per file)
  https://HOST/PATH    a webhook: one POST per entry, {"entries":[…]}, Idempotency-Key: <entry_id>,
                       X-Leash-Signature: sha256=<HMAC-SHA256 of the raw body> with the secret in
                       $${WEBHOOK_SECRET_ENV} (required); 2xx delivered, 408/429/5xx retried, other 4xx DEAD
  postgres://…         rows in a central audit table (?schema=S&table=T, default leash_audit_log),
                       created when absent; an entry_id already there is skipped
  stdout               NDJSON on stdout, for a log shipper (all messages go to stderr)
Every line and row carries the entry's signed body byte for byte: \`leash verify --file\` checks an NDJSON copy.

Without --once the relay runs until SIGINT or SIGTERM, then finishes the batch in flight and exits (a
second signal exits at once; that batch is then delivered again later, never lost). On a terminal it
shows progress (delivered, pending, lag) every few seconds; any stderr gets one line when deliveries
start failing and one when they recover. Failing entries stay PENDING and are retried with backoff;
a failing entry holds up only its own session, and only tries actually sent count toward --max-attempts.
Several relays may share a store: each batch is leased to one of them, and order per session is kept.
The relay only reads the chain and the outbox: it needs no signing key and migrates nothing.

A DEAD entry is never retried on its own, and its session's later entries wait behind it (order
holds). Once the cause is fixed (a webhook secret, say), run with
--requeue-dead: every DEAD entry goes back to PENDING with its attempts reset, its last error kept
(prefixed "requeued at <ns>:"), and "leash relay: requeued K dead entries" is printed on stderr first.

Output: one line on stderr at exit (after the requeued line, with --requeue-dead),
  leash relay: delivered N, failed M, dead D, pending P
with N and M counted by this run, D and P the whole outbox's DEAD and PENDING entries at exit;
then "; last error: …" when this run failed to deliver, else "; seq S is dead: …" when an entry is DEAD.
Exit status: 0 nothing in the outbox is DEAD, 1 some entry is DEAD (retried only after --requeue-dead)
or a store error, 2 bad flags, sink, secret or store URL.`;
}
