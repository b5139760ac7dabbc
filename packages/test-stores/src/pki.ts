// A throwaway PKI for the gRPC TLS tests: certificate authorities and leaves made by the openssl command
// in a scratch directory. Test material only (two-day certificates, unencrypted keys); it validates nothing.
import { execFileSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** One leaf certificate: its file stem, the CA that signs it, its subject and subjectAltName. */
export interface TestLeaf {
  name: string;
  signedBy: string;
  /** An openssl subject, e.g. "/CN=acme". */
  subject: string;
  /** e.g. "DNS:localhost,IP:127.0.0.1" or "URI:leash:org:acme". */
  san: string;
}

/**
 * Makes `NAME.pem` and `NAME.key` in `dir` for every CA (self-signed) and leaf, and returns their
 * contents by file name. EC P-256 keys: as good as RSA for these tests and much faster to make.
 */
export function makeTestPki(
  dir: string,
  pki: { cas: readonly string[]; leaves: readonly TestLeaf[] },
): Record<string, Buffer> {
  const ssl = (...args: string[]) => execFileSync("openssl", args, { cwd: dir, stdio: "pipe" });
  const newKey = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"];
  for (const ca of pki.cas) {
    ssl(
      "req",
      "-x509",
      ...newKey,
      "-keyout",
      `${ca}.key`,
      "-out",
      `${ca}.pem`,
      ...["-days", "2"],
      "-subj",
      `/CN=${ca}`,
    );
  }
  for (const leaf of pki.leaves) {
    const { name, signedBy } = leaf;
    ssl("req", ...newKey, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", leaf.subject);
    writeFileSync(join(dir, `${name}.ext`), `subjectAltName=${leaf.san}\n`);
    ssl(
      ...["x509", "-req", "-in", `${name}.csr`, "-CA", `${signedBy}.pem`, "-CAkey", `${signedBy}.key`],
      ...["-CAcreateserial", "-out", `${name}.pem`, "-days", "2", "-extfile", `${name}.ext`],
    );
  }
  const files: Record<string, Buffer> = {};
  for (const name of [...pki.cas, ...pki.leaves.map((l) => l.name)]) {
    files[`${name}.pem`] = readFileSync(join(dir, `${name}.pem`));
    files[`${name}.key`] = readFileSync(join(dir, `${name}.key`));
  }
  return files;
}
