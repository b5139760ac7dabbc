// `leash decide [FILE|-]`: validates one {config, state, call, inputs?} document and prints decide's verdict.
// It prints the decision only; it keeps no state, writes no audit record and applies no feedback.
import { decide } from "@leash/core";
import { validateDecideInput } from "@leash/core/schema";
import type { Command } from "commander";
import {
  CliError,
  EXIT_BAD_INPUT,
  type Io,
  parseJson,
  parseJsonKeepingText,
  readSource,
  sourceLabel,
} from "../io.js";

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export async function runDecideCommand(source: string | undefined, io: Io): Promise<number> {
  const label = sourceLabel(source);
  const text = await readSource(source, io);
  const document = parseJson(text, label);
  const checked = validateDecideInput(document);
  if (!checked.ok) {
    // One line however many problems: callers grep stderr, and the field names are what they need.
    throw new CliError(`${label}: invalid decide input: ${checked.errors.join("; ")}`, EXIT_BAD_INPUT);
  }
  const { config, state, inputs } = checked.value;
  // The params are hashed (rule 1, rule 4's digest), so they are read again with each number's
  // text kept where it matters; config, state and the call's other fields stay plain numbers.
  const kept = parseJsonKeepingText(text, label);
  const keptParams = isObject(kept) && isObject(kept.call) ? kept.call.params : undefined;
  const call = isObject(keptParams) ? { ...checked.value.call, params: keptParams } : checked.value.call;
  const { verdict, reason } = decide(config, state, call, inputs);
  // The verdict is data, not an error: DENY and HITL exit 0 like ALLOW.
  io.stdout(`${JSON.stringify({ verdict, reason })}\n`);
  return 0;
}

export function registerDecide(program: Command, io: Io, setExit: (code: number) => void): void {
  program
    .command("decide")
    .description("decide one call: read {config, state, call, inputs?} as JSON, print {verdict, reason}")
    .argument("[file]", "JSON file holding the input; `-` or nothing reads stdin")
    .addHelpText(
      "after",
      "\nExit status: 0 a verdict was printed (ALLOW, DENY or HITL alike), 2 unreadable or invalid input.",
    )
    .action(async (file: string | undefined) => {
      setExit(await runDecideCommand(file, io));
    });
}
