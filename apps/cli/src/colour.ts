// Terminal colour for verdicts: on only when stdout is a terminal and NO_COLOR is unset (no-color.org).
// It styles text and nothing else; pipes, files and tests always get plain text.
import type { Io } from "./io.js";

export type Paint = (text: string, verdict: string) => string;

const CODES: Readonly<Record<string, string>> = { ALLOW: "32", DENY: "31", HITL: "33" };

/** The painter for this run: green ALLOW, red DENY, yellow HITL, or the text unchanged. */
export function verdictPainter(io: Io): Paint {
  const noColor = io.env.NO_COLOR;
  if (io.stdoutIsTTY !== true || (noColor !== undefined && noColor !== "")) return (text) => text;
  return (text, verdict) => {
    const code = CODES[verdict];
    return code === undefined ? text : `\x1b[${code}m${text}\x1b[39m`;
  };
}
