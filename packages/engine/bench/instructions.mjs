// Machine instructions per engine decision, counted by valgrind's callgrind (not a test): a cost figure that
// does not move with a shared machine's speed, which other tenants change from hour to hour and run to run.
//
// It runs the same fixed workload twice under callgrind, DECISIONS and 3 × DECISIONS evaluate() calls (the
// ALLOW path with a budget hold that `leash bench engine` measures, fixed clock and rng), and divides the
// difference of the two totals by the difference of the counts: start-up, imports and JIT warm-up cancel
// out. Node runs with --single-threaded (no concurrent compiler or GC threads) and fixed hash and random
// seeds, so that the same build counts nearly alike from run to run however busy the machine is (what
// varies comes from garbage collection and random ids, and a checkout at another path counts a little
// apart): between two builds only differences of a few per cent mean anything. Counts are instructions, not time: a change
// that saves instructions but stalls on memory or I/O (or the reverse) shows here only in part.
//
// It also reports how many of those instructions V8's optimizing compiler spent (compiler_*): it is
// still warming up between the two counts, and in a normal run it works on a thread of its own.
//
// Run after `tsc --build` (it imports dist):  node packages/engine/bench/instructions.mjs
// Environment: STORE=memory (default) or sqlite (a new file in the temp directory: SQLite's own work
// included, but group commit batches by time, so its count varies more) or none (no engine and no
// store: only a decision's signed chain entry, the part every store pays alike) or postgres (the
// server at PG_URL, default postgres://postgres@127.0.0.1:5432/test, in a schema of its own; only
// this process's instructions count, not the server's), DECISIONS (default 1600),
// ROOT (the checkout whose build is counted, default this one: to compare two builds, run it on each),
// POLICY=five or empty (the engine runs that policy of policy-rules.mjs; policy.mjs's five rules).
// Needs valgrind on PATH (Debian's package); each run takes about a minute, the two run side by side.

import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const STORE = process.env.STORE ?? "memory";
const DECISIONS = Number(process.env.DECISIONS ?? 1600);
const ROOT = resolve(process.env.ROOT ?? join(here, "..", "..", ".."));
const WORKLOAD = join(here, "instructions-workload.mjs");
const PG_URL = process.env.PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const POLICY = process.env.POLICY ?? "";

if (!["memory", "sqlite", "postgres", "none"].includes(STORE))
  fail(`STORE must be memory, sqlite, postgres or none, not ${JSON.stringify(STORE)}`);
if (!["", "five", "empty"].includes(POLICY) || (POLICY !== "" && STORE === "none"))
  fail(`POLICY must be five or empty (and STORE not none), not ${JSON.stringify(POLICY)}`);
// 16 callers take equal shares of each run.
// Fewer, and the JIT is still compiling between the two counts (160 gave 2.8 M on SQLite against 1.3 M).
if (!Number.isInteger(DECISIONS) || DECISIONS < 800 || DECISIONS % 16 !== 0) {
  fail(`DECISIONS must be a multiple of 16 of at least 800, not ${JSON.stringify(process.env.DECISIONS)}`);
}

let valgrind;
try {
  valgrind = execFileSync("valgrind", ["--version"], { encoding: "utf8" }).trim();
} catch {
  fail("valgrind is not on PATH (Debian: apt-get install valgrind)");
}

const outFile = (dir, decisions) => join(dir, `callgrind.${decisions}.out`);

function fail(message) {
  console.error(`instructions.mjs: ${message}`);
  process.exit(2);
}

/**
 * Instructions inside V8's optimizing compiler in one run, from callgrind's output (inclusive count of
 * Compiler::CompileOptimized, read with callgrind_annotate, which comes with valgrind). With Node
 * single-threaded the compiler runs on the main thread; in a normal run it runs on another thread.
 */
function compilerInstructions(outFile) {
  const text = execFileSync("callgrind_annotate", ["--inclusive=yes", "--threshold=100", outFile], {
    encoding: "utf8",
    maxBuffer: 256 * 1024 * 1024,
  });
  const line = text.split("\n").find((l) => l.includes("v8::internal::Compiler::CompileOptimized("));
  return line === undefined ? 0 : Number(line.trim().split(" ")[0].replaceAll(",", ""));
}

/** Total instructions callgrind counted for one run of `decisions` calls (all threads of the process). */
function count(decisions, dir) {
  return new Promise((resolveCount, reject) => {
    const args = [
      "--tool=callgrind",
      `--callgrind-out-file=${outFile(dir, decisions)}`,
      process.execPath,
      "--single-threaded",
      "--hash-seed=1",
      "--random-seed=1",
      WORKLOAD,
      ROOT,
      STORE,
      String(decisions),
      STORE === "postgres" ? PG_URL : join(dir, `store.${decisions}.db`),
    ];
    const child = spawn("valgrind", args, { stdio: ["ignore", "pipe", "pipe"] });
    let out = "";
    let err = "";
    child.stdout.setEncoding("utf8").on("data", (text) => (out += text));
    child.stderr.setEncoding("utf8").on("data", (text) => (err += text));
    child.on("error", reject);
    child.on("close", (code) => {
      const collected = /Collected : (\d+)/.exec(err);
      if (code !== 0 || collected === null || !out.includes(`decided ${decisions}`)) {
        // The program's own error, without callgrind's lines (prefixed ==PID==).
        const tail = err
          .split("\n")
          .filter((line) => line.trim() !== "" && !/^==\d+==/.test(line))
          .slice(0, 8)
          .join("\n");
        reject(new Error(`the run of ${decisions} decisions failed (exit ${code}):\n${out}${tail}`));
        return;
      }
      resolveCount({ total: Number(collected[1]), compiler: compilerInstructions(outFile(dir, decisions)) });
    });
  });
}

const dir = mkdtempSync(join(tmpdir(), "leash-instructions-"));
const counts = [DECISIONS, 3 * DECISIONS];
console.error(
  `counting instructions of ${counts.join(" and ")} decisions on the ${STORE} store under callgrind (about a minute)…`,
);
try {
  const runs = await Promise.all(counts.map((decisions) => count(decisions, dir)));
  const totals = runs.map((run) => run.total);
  const compiler = runs.map((run) => run.compiler);
  const perDecision = (totals[1] - totals[0]) / (counts[1] - counts[0]);
  const compilerPerDecision = (compiler[1] - compiler[0]) / (counts[1] - counts[0]);
  console.log(
    JSON.stringify({
      bench: "engine-instructions",
      store: STORE,
      ...(POLICY === "" ? {} : { policy: POLICY }),
      decisions: counts,
      instructions: totals,
      instructions_per_decision: Math.round(perDecision),
      // Of those, V8's optimizing compiler still at work between the two counts (late warm-up).
      compiler_instructions: compiler,
      compiler_instructions_per_decision: Math.round(compilerPerDecision),
      root: ROOT,
      node: process.version,
      valgrind,
    }),
  );
} catch (error) {
  fail(error instanceof Error ? error.message : String(error));
} finally {
  rmSync(dir, { recursive: true, force: true });
}
