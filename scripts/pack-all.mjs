#!/usr/bin/env node
// `pnpm pack:all [DIR]`: every public package's tarball in one folder (default ./leash-tarballs), for
// installing Leash with npm before a registry release. It builds nothing (pnpm install did) and publishes nothing.
import { rmSync } from "node:fs";
import { basename, resolve } from "node:path";
import { packAll, root } from "./packages.mjs";

const destination = resolve(process.argv[2] ?? resolve(root, "leash-tarballs"));
// Old tarballs of another version would match the README's install globs too.
rmSync(destination, { recursive: true, force: true });
const packed = packAll(destination);
for (const file of packed.values()) process.stdout.write(`${basename(file)}\n`);
process.stdout.write(
  `pack:all: ${packed.size} tarballs in ${destination}\n` +
    `  a TypeScript agent: npm install ${destination}/leash-{core,chain,budget-guard,outbox,policy,machine,engine,substrate-sqlite}-*.tgz better-sqlite3\n`,
);
