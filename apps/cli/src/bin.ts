#!/usr/bin/env node
// The `leash` executable: hands process arguments and streams to run() and sets the exit status.
// It holds no command logic; the import is dynamic so even a broken install fails in one line, not a stack.

// `leash … | head` closes the pipe early; that is the reader's choice, not an error worth a trace.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  if (err.code !== "EPIPE") process.stderr.write(`leash: cannot write output: ${err.message}\n`);
  process.exit(err.code === "EPIPE" ? (process.exitCode ?? 0) : 70);
});

try {
  const { run } = await import("./program.js");
  process.exitCode = await run(process.argv.slice(2));
} catch (err) {
  process.stderr.write(
    `leash: internal error: ${err instanceof Error ? err.message.split("\n", 1)[0] : err}\n`,
  );
  process.exitCode = 70;
}
