// `leash guard create ID --limit USD [--parent ID]`: a named budget that sessions (or child guards) draw on.
// Creation only, idempotent for the same limit and parent; spending against a guard happens through sessions.
import type { Command } from "commander";
import { moneyText, nonEmpty } from "../args.js";
import { addStoreOptions, loadSettings, printJson, type StoreOptions, withEngine } from "../context.js";
import type { Io } from "../io.js";
import { addKeyOptions, type KeyOptions, resolveSigner } from "../keys.js";

export interface GuardCreateOptions extends StoreOptions, KeyOptions {
  readonly limit: string;
  readonly parent?: string;
}

export async function runGuardCreate(id: string, options: GuardCreateOptions, io: Io): Promise<number> {
  const settings = await loadSettings(options, io);
  const guard = {
    guard_id: id,
    limit_usd: options.limit,
    ...(options.parent ? { parent_guard_id: options.parent } : {}),
  };
  const { signer } = resolveSigner(options, io);
  await withEngine(settings, signer, (engine) => engine.createGuard(guard));
  printJson(io, { ...guard, parent_guard_id: options.parent ?? null });
  return 0;
}

export function registerGuard(program: Command, io: Io, setExit: (code: number) => void): void {
  const guard = program
    .command("guard")
    .description("named budget guards that sessions draw on (nested budgets)");
  addKeyOptions(
    addStoreOptions(
      guard
        .command("create")
        .description("create a budget guard; a session joins it with `session create --parent-guard ID`")
        .argument("<id>", "guard id")
        .requiredOption("--limit <usd>", "the guard's budget in USD (exact decimal)", moneyText)
        .option("--parent <id>", "carve this guard's budget out of another guard's remaining", nonEmpty),
    ),
  )
    .addHelpText(
      "after",
      "\nCreating the same guard again with the same limit and parent is a no-op.\nExit status: 0 created (or already there), 1 refused (parent missing, limit exceeds the parent's remaining, a different guard of that id exists), 2 bad flags, config, signing key or store URL.",
    )
    .action(async (id: string, options: GuardCreateOptions) => {
      setExit(await runGuardCreate(id, options, io));
    });
}
