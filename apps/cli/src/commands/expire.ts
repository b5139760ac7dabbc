// `leash expire`: charges budget holds whose agent never called post-exec within the reservation TTL
// at their estimate (settled_by_expiry), and expires HITL requests nobody answered in time. Run it from cron or at startup.
import type { Command } from "commander";
import { positiveInteger } from "../args.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions, withEngine } from "../context.js";
import type { Io } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";

export interface ExpireOptions extends StoreOptions, KeyOptions {
  readonly limit: number;
}

export async function runExpire(options: ExpireOptions, io: Io): Promise<number> {
  const settings = await loadSettings(options, io);
  const { signer } = resolveSigner(options, io);
  const { expired, hitl } = await withEngine(settings, signer, async (engine) => ({
    expired: await engine.expireReservations(options.limit),
    hitl: await engine.expireHitl(),
  }));
  printJson(io, { expired, hitl_expired: hitl });
  return 0;
}

export function registerExpire(program: Command, io: Io, setExit: (code: number) => void): void {
  addKeyOptions(
    addStoreOptions(
      program
        .command("expire")
        .description(
          'charge budget holds older than the reservation TTL at their estimate and expire unanswered HITL requests past their expiry; print {"expired": N, "hitl_expired": M}',
        )
        .option("--limit <n>", "charge at most this many holds in one go", positiveInteger, 1000),
    ),
  )
    .addHelpText(
      "after",
      "\nA hold's TTL is fixed when evaluate places it: the reservation_ttl_s of the config in effect then (default 300 s).\nA HITL request expires hitl_timeout_s after it opened (default 900 s); the agent's next attempt is then DENY hitl_timeout.\nExit status: 0 done, 1 store error, 2 bad flags, config, signing key or store URL.",
    )
    .action(async (options: ExpireOptions) => {
      setExit(await runExpire(options, io));
    });
}
