#!/usr/bin/env node
// Reports source files over ~500 lines and functions over ~80 lines (the house layout rule).
// By default it reports only and exits 0 (a map for refactoring); --strict makes it a gate.
//
// Ignored: dist/, node_modules/, tests (*.test.ts, test/ folders), generated code (a `generated` or
// `gen` path segment, or a file whose first 60 lines say "@generated"/"DO NOT EDIT"), declaration
// files (*.d.ts), and anything that is not .ts/.mts/.cts. Function sizes count the body's lines,
// braces included. The shared contract suite (packages/substrate-contract/src) is test code: its file
// sizes are reported, not its functions (a section is one function of `it` calls).
//
// --strict exits 1 when something is over a limit and not named in the allow-list, or when the
// allow-list names something no longer over (so the list shrinks as code is split, never goes stale).
// The allow-list (scripts/layout-allow.txt, or --allow FILE) has one entry a line: a path for a file
// over the line limit, or `path#function` for a function, then two spaces and the reason; a line that
// starts with `#` is a comment.
//
// Usage: node scripts/check-layout.mjs [--strict] [--allow FILE] [--file-lines 500]
//          [--function-lines 80] [--root REPO] [dir...]
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

let root = fileURLToPath(new URL("..", import.meta.url));
const args = process.argv.slice(2);
let fileLimit = 500;
let functionLimit = 80;
const dirs = [];
let strict = false;
let allowPath;
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--strict") strict = true;
  else if (args[i] === "--allow") allowPath = args[++i];
  else if (args[i] === "--file-lines") fileLimit = Number(args[++i]);
  else if (args[i] === "--function-lines") functionLimit = Number(args[++i]);
  else if (args[i] === "--root") root = args[++i];
  else dirs.push(args[i]);
}
if (dirs.length === 0) dirs.push("packages", "apps", "scripts");

/** Test code outside test/ folders: files reported, functions not. */
const TEST_SUITE_DIRS = ["packages/substrate-contract/src/"];

const SKIP_DIRS = new Set(["node_modules", "dist", "test", "generated", "gen", "coverage", ".turbo"]);

function* sourceFiles(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) {
      if (!SKIP_DIRS.has(entry.name)) yield* sourceFiles(path);
    } else if (/\.(m|c)?ts$/.test(entry.name) && !/\.d\.(m|c)?ts$/.test(entry.name)) {
      if (!/\.test\.(m|c)?ts$/.test(entry.name)) yield path;
    }
  }
}

function functionName(node, sourceFile) {
  if (node.name) return node.name.getText(sourceFile);
  const parent = node.parent;
  if (parent && ts.isVariableDeclaration(parent)) return parent.name.getText(sourceFile);
  if (parent && ts.isPropertyAssignment(parent)) return parent.name.getText(sourceFile);
  if (parent && ts.isCallExpression(parent)) {
    return `<callback of ${parent.expression.getText(sourceFile).slice(0, 40)}>`;
  }
  return "<anonymous>";
}

function longFunctions(path, text) {
  const sourceFile = ts.createSourceFile(path, text, ts.ScriptTarget.Latest, true);
  const found = [];
  const visit = (node) => {
    if (ts.isFunctionLike(node) && node.body) {
      const start = sourceFile.getLineAndCharacterOfPosition(node.body.getStart(sourceFile)).line;
      const end = sourceFile.getLineAndCharacterOfPosition(node.body.getEnd()).line;
      const lines = end - start + 1;
      if (lines > functionLimit) {
        found.push({ name: functionName(node, sourceFile), line: start + 1, lines });
      }
    }
    ts.forEachChild(node, visit);
  };
  visit(sourceFile);
  return found;
}

const longFiles = [];
const functions = [];
for (const dir of dirs) {
  const abs = join(root, dir);
  if (!statSync(abs, { throwIfNoEntry: false })?.isDirectory()) continue;
  for (const path of sourceFiles(abs)) {
    const text = readFileSync(path, "utf8");
    if (/@generated|DO NOT EDIT/.test(text.split("\n", 60).join("\n"))) continue;
    const rel = relative(root, path);
    const lines = text.split("\n").length - (text.endsWith("\n") ? 1 : 0);
    if (lines > fileLimit) longFiles.push({ rel, lines });
    if (TEST_SUITE_DIRS.some((dir) => rel.startsWith(dir))) continue;
    for (const f of longFunctions(path, text)) functions.push({ rel, ...f });
  }
}

longFiles.sort((a, b) => b.lines - a.lines);
functions.sort((a, b) => b.lines - a.lines);
console.log(`Files over ${fileLimit} lines: ${longFiles.length}`);
for (const f of longFiles) console.log(`  ${String(f.lines).padStart(5)}  ${f.rel}`);
console.log(`Functions over ${functionLimit} lines: ${functions.length}`);
for (const f of functions) {
  console.log(`  ${String(f.lines).padStart(5)}  ${f.rel}:${f.line}  ${f.name}`);
}

if (!strict) process.exit(0);

/** Allow-list entries: key (`path` or `path#function`) → reason. */
function readAllowList(path) {
  const entries = new Map();
  const text = readFileSync(path, "utf8");
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    // Two spaces (or a tab) end the key: a function's name may hold one ("<callback of f>").
    const [key, ...reason] = line.split(/ {2,}|\t+/);
    if (reason.length === 0) throw new Error(`${path}: entry without a reason: ${line}`);
    entries.set(key, reason.join(" ").trim());
  }
  return entries;
}

const allowFile = allowPath ? resolve(allowPath) : join(root, "scripts", "layout-allow.txt");
const allowed = statSync(allowFile, { throwIfNoEntry: false }) ? readAllowList(allowFile) : new Map();
const over = new Set([...longFiles.map((f) => f.rel), ...functions.map((f) => `${f.rel}#${f.name}`)]);
const unlisted = [...over].filter((key) => !allowed.has(key));
const scanned = (key) => dirs.some((dir) => key.startsWith(`${relative(root, join(root, dir))}/`));
const stale = [...allowed.keys()].filter((key) => scanned(key) && !over.has(key));
for (const key of unlisted) console.log(`not allowed: ${key}`);
for (const key of stale) console.log(`stale allow-list entry (no longer over): ${key}`);
if (unlisted.length > 0 || stale.length > 0) {
  console.log(
    `--strict: ${unlisted.length} over the limits and not allowed, ${stale.length} stale (${allowFile})`,
  );
  process.exit(1);
}
console.log(`--strict: everything over the limits is in ${relative(root, allowFile)}`);
