#!/usr/bin/env node
// Reports source files over ~500 lines and functions over ~80 lines (the house layout rule).
// It reports only and always exits 0: it is a map for refactoring, not a gate.
//
// Ignored: dist/, node_modules/, tests (*.test.ts, test/ folders), generated code (a `generated` or
// `gen` path segment, or a file whose first 60 lines say "@generated"/"DO NOT EDIT"), declaration
// files (*.d.ts), and anything that is not .ts/.mts/.cts. Function sizes count the body's lines,
// braces included. The shared contract suite (packages/substrate-contract/src) is test code: its file
// sizes are reported, not its functions (a section is one function of `it` calls).
//
// Usage: node scripts/check-layout.mjs [--file-lines 500] [--function-lines 80] [--root REPO] [dir...]
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import ts from "typescript";

let root = fileURLToPath(new URL("..", import.meta.url));
const args = process.argv.slice(2);
let fileLimit = 500;
let functionLimit = 80;
const dirs = [];
for (let i = 0; i < args.length; i++) {
  if (args[i] === "--file-lines") fileLimit = Number(args[++i]);
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
