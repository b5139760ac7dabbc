#!/usr/bin/env node
// Packs every public package as a user would get it, then lints the tarballs (publint, attw) and
// installs them into an empty project outside the workspace that type-checks strictly and runs on
// SQLite, PostgreSQL (only the URL changes) and memory. It publishes nothing.
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PNPM, packAll, publicPackages, root } from "./packages.mjs";

const PG_URL = process.env.LEASH_TEST_PG_URL ?? "postgres://postgres@127.0.0.1:5432/test";
const keep = process.argv.includes("--keep");

function run(cmd, args, options = {}) {
  return execFileSync(cmd, args, { stdio: ["ignore", "pipe", "pipe"], encoding: "utf8", ...options });
}

function step(what) {
  process.stdout.write(`check-packages: ${what}\n`);
}

const work = mkdtempSync(join(tmpdir(), "leash-packages-"));
const tarballs = join(work, "tarballs");
const failures = [];
try {
  step(`packing ${publicPackages().length} public packages into ${tarballs}`);
  const packed = packAll(tarballs);
  const tgz = readdirSync(tarballs);
  if (tgz.some((f) => f.includes("test-stores") || f.includes("demo"))) {
    failures.push(`a private package was packed: ${tgz.join(", ")}`);
  }

  for (const [name, file] of packed) {
    step(`publint ${name}`);
    try {
      const out = run(
        join(root, "node_modules/.bin/publint"),
        ["run", file, "--level", "warning", "--strict"],
        { cwd: root },
      );
      if (/error|warning/i.test(out.replace(/All good!/, ""))) failures.push(`publint ${name}:\n${out}`);
    } catch (error) {
      failures.push(`publint ${name}:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
    }
    step(`attw ${name}`);
    try {
      run(
        join(root, "node_modules/.bin/attw"),
        [file, "--profile", "esm-only", "--format", "ascii", "--no-emoji", "--no-color"],
        {
          cwd: root,
        },
      );
    } catch (error) {
      failures.push(`attw ${name}:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
    }
  }

  step("installing the tarballs into an empty project outside the workspace");
  const consumer = join(work, "consumer");
  run("mkdir", ["-p", consumer]);
  // Only what a library user names, plus the @leash packages those depend on (not yet on the registry,
  // so every one comes from its tarball); drivers and their types as the READMEs' install lines say.
  const wanted = [
    "@leash/core",
    "@leash/chain",
    "@leash/budget-guard",
    "@leash/outbox",
    "@leash/policy",
    "@leash/machine",
    "@leash/engine",
    "@leash/substrate-sqlite",
    "@leash/substrate-postgres",
    "@leash/substrate-memory",
  ];
  const overrides = Object.fromEntries(wanted.map((name) => [name, `file:${packed.get(name)}`]));
  writeFileSync(
    join(consumer, "package.json"),
    JSON.stringify(
      {
        name: "leash-consumer",
        private: true,
        type: "module",
        dependencies: {
          "@leash/engine": `file:${packed.get("@leash/engine")}`,
          "@leash/substrate-sqlite": `file:${packed.get("@leash/substrate-sqlite")}`,
          "@leash/substrate-postgres": `file:${packed.get("@leash/substrate-postgres")}`,
          "@leash/substrate-memory": `file:${packed.get("@leash/substrate-memory")}`,
          "@leash/chain": `file:${packed.get("@leash/chain")}`,
          "better-sqlite3": "^12.6.2",
          pg: "^8.23.1",
        },
        devDependencies: {
          "@types/better-sqlite3": "^7.6.13",
          "@types/node": "^20.19.0",
          "@types/pg": "^8.15.5",
          typescript: "5.9.3",
        },
      },
      null,
      2,
    ),
  );
  // pnpm reads its settings from pnpm-workspace.yaml; a one-project "workspace" of the consumer alone.
  writeFileSync(
    join(consumer, "pnpm-workspace.yaml"),
    `packages: ["."]\nallowBuilds:\n  better-sqlite3: true\n  sodium-native: true\noverrides:\n${Object.entries(
      overrides,
    )
      .map(([name, spec]) => `  "${name}": "${spec}"`)
      .join("\n")}\n`,
  );
  writeFileSync(
    join(consumer, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        target: "ES2022",
        module: "NodeNext",
        moduleResolution: "NodeNext",
        strict: true,
        skipLibCheck: false,
        outDir: "out",
        types: ["node"],
      },
      include: ["main.ts"],
    }),
  );
  writeFileSync(
    join(consumer, "main.ts"),
    `import { generateKeyPair } from "@leash/chain";
import { createEngine, openStore } from "@leash/engine";

const url = process.argv[2];
if (url === undefined) throw new Error("usage: main.ts STORE_URL");
const store = await openStore(url);
const engine = createEngine({ substrate: store, signer: generateKeyPair().signer });
const session = await engine.register({ agent_id: "bot", config: { budget_usd: 1, max_repeat_calls: 2 } });
const verdicts: string[] = [];
for (let i = 0; i < 3; i++) {
  const r = await engine.evaluate({
    session_id: session.session_id,
    tool_name: "search",
    params: { q: "same" },
    nonce: \`n\${i}\`,
    estimated_cost_usd: 0.1,
  });
  verdicts.push(\`\${r.verdict}:\${r.reason}\`);
}
await store.close();
console.log(JSON.stringify({ url: url.replace(/\\/\\/[^@]*@/, "//"), verdicts }));
`,
  );
  run("npx", [...PNPM, "install", "--prefer-offline"], {
    cwd: consumer,
    env: { ...process.env, npm_config_nodedir: process.env.npm_config_nodedir ?? "/usr" },
  });

  step("type-checking and compiling the consumer strictly (skipLibCheck: false, moduleResolution: NodeNext)");
  try {
    run(join(consumer, "node_modules/.bin/tsc"), ["-p", consumer]);
  } catch (error) {
    failures.push(`consumer type-check:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
  }

  const schema = `leash_consumer_${process.pid}`;
  const urls = [`sqlite:${join(consumer, "leash.db")}`, `${PG_URL}?schema=${schema}`, "memory:"];
  for (const url of urls) {
    step(`running the consumer on ${url.replace(/\/\/[^@]*@/, "//")}`);
    try {
      const out = run(process.execPath, [join("out", "main.js"), url], {
        cwd: consumer,
      });
      const { verdicts } = JSON.parse(out.trim().split("\n").pop());
      const expected = ["ALLOW:within_thresholds", "ALLOW:within_thresholds", "DENY:max_repeat_exceeded"];
      if (JSON.stringify(verdicts) !== JSON.stringify(expected)) {
        failures.push(
          `consumer on ${url}: verdicts ${JSON.stringify(verdicts)}, expected ${JSON.stringify(expected)}`,
        );
      }
    } catch (error) {
      failures.push(`consumer on ${url}:\n${error.stdout ?? ""}${error.stderr ?? ""}`);
    }
  }
  // A user who installed the engine but not the substrate a URL names hears which packages to add.
  step("opening a sqlite: URL in a project without @leash/substrate-sqlite");
  const bare = join(work, "bare");
  run("mkdir", ["-p", bare]);
  const bareDeps = [
    "@leash/core",
    "@leash/chain",
    "@leash/budget-guard",
    "@leash/outbox",
    "@leash/policy",
    "@leash/machine",
    "@leash/engine",
  ];
  writeFileSync(
    join(bare, "package.json"),
    JSON.stringify({
      name: "leash-bare",
      private: true,
      type: "module",
      dependencies: Object.fromEntries(bareDeps.map((name) => [name, `file:${packed.get(name)}`])),
    }),
  );
  writeFileSync(
    join(bare, "pnpm-workspace.yaml"),
    `packages: ["."]\nallowBuilds:\n  sodium-native: true\nautoInstallPeers: false\noverrides:\n${bareDeps
      .map((name) => `  "${name}": "file:${packed.get(name)}"`)
      .join("\n")}\n`,
  );
  writeFileSync(
    join(bare, "main.js"),
    `import { openStore } from "@leash/engine";\nawait openStore("sqlite:./x.db").then(() => console.log("opened"), (e) => console.log(e.code, e.message));\n`,
  );
  run("npx", [...PNPM, "install", "--prefer-offline"], { cwd: bare });
  const said = run(process.execPath, ["main.js"], { cwd: bare }).trim();
  if (
    !said.startsWith("missing_dependency") ||
    !said.includes("npm install @leash/substrate-sqlite better-sqlite3")
  ) {
    failures.push(`a missing substrate should name what to install; it said: ${said}`);
  }

  try {
    run("psql", [PG_URL, "-qc", `DROP SCHEMA IF EXISTS "${schema}" CASCADE`]);
  } catch {
    // the schema may not exist when the run above failed early
  }
} finally {
  if (!keep) rmSync(work, { recursive: true, force: true });
}

if (failures.length > 0) {
  process.stderr.write(`check-packages: ${failures.length} problem(s)\n\n${failures.join("\n\n")}\n`);
  process.exit(1);
}
step("all public packages pack, lint clean and work from their tarballs");
