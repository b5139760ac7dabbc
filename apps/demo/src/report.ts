// The demo's HTML report: one self-contained file (inline CSS and SVG, no scripts, no fetches) that
// opens offline. It renders what main.ts measured; it verifies nothing itself.
import { describeKind, explainReason } from "./explain.js";
import type { Agent, Step } from "./scenarios.js";

/** One point of an agent's budget line: after the chain entry `seq`, this much was spent or held. */
export interface SpendPoint {
  seq: number;
  used: number;
  /** The decision's verdict, or null for a settlement (post_exec) or the registration. */
  verdict: string | null;
  label: string;
}

export interface AgentReport {
  scene: string;
  agent: Agent;
  plainConfig: string[];
  budget: number | null;
  series: SpendPoint[];
}

export interface ReportData {
  generatedAt: string;
  keyId: string;
  publicKeyHex: string;
  agents: AgentReport[];
  steps: Array<Step & { receiptOk: boolean }>;
  verdicts: Array<{ verdict: string; reason: string; count: number }>;
  entryKinds: Array<[kind: string, count: number]>;
  entriesSentence: string;
  chain: { ok: boolean; count: number; headHash: string; failure?: string };
  tampered: { seq: number; failsAt: number | null; kind: string | null };
  forgedRejected: boolean;
  tryNext: Array<[command: string, why: string]>;
}

const escapeHtml = (text: string) =>
  text.replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] ?? c,
  );

const VERDICT_COLOUR: Readonly<Record<string, string>> = {
  ALLOW: "#1a7f37",
  DENY: "#cf222e",
  HITL: "#bf8700",
};
const usd = (n: number) => `$${n.toFixed(2)}`;

/** Spent-or-held against the budget, one step per chain entry of the agent's session. */
function spendChart(a: AgentReport): string {
  const W = 520;
  const H = 180;
  const pad = { left: 52, right: 12, top: 14, bottom: 30 };
  const budget = a.budget ?? Math.max(0.01, ...a.series.map((p) => p.used));
  const top = budget * 1.1;
  const n = Math.max(1, a.series.length - 1);
  const x = (i: number) => pad.left + (i / n) * (W - pad.left - pad.right);
  const y = (v: number) => pad.top + (1 - v / top) * (H - pad.top - pad.bottom);
  let path = "";
  a.series.forEach((p, i) => {
    path +=
      i === 0
        ? `M${x(i).toFixed(1)},${y(p.used).toFixed(1)}`
        : ` H${x(i).toFixed(1)} V${y(p.used).toFixed(1)}`;
  });
  const dots = a.series
    .map((p, i) =>
      p.verdict === null
        ? ""
        : `<circle cx="${x(i).toFixed(1)}" cy="${y(p.used).toFixed(1)}" r="4" fill="${VERDICT_COLOUR[p.verdict] ?? "#57606a"}"><title>${escapeHtml(`${p.label}: ${p.verdict}, ${usd(p.used)} used (entry ${p.seq})`)}</title></circle>`,
    )
    .join("");
  const threshold =
    a.agent.config.hitl_mode === "on_threshold" && typeof a.agent.config.hitl_budget_threshold === "number"
      ? budget * (1 - a.agent.config.hitl_budget_threshold)
      : null;
  const ticks = [0, budget / 2, budget]
    .map(
      (v) =>
        `<text x="${pad.left - 6}" y="${(y(v) + 4).toFixed(1)}" text-anchor="end" class="tick">${usd(v)}</text>`,
    )
    .join("");
  return `<svg class="chart" viewBox="0 0 ${W} ${H}" width="${W}" height="${H}" role="img" aria-label="${escapeHtml(`${a.agent.agent_id}: spend against a ${usd(budget)} budget`)}">
  <rect x="${pad.left}" y="${pad.top}" width="${W - pad.left - pad.right}" height="${H - pad.top - pad.bottom}" fill="#f6f8fa"/>
  ${ticks}
  ${a.budget === null ? "" : `<line x1="${pad.left}" x2="${W - pad.right}" y1="${y(budget).toFixed(1)}" y2="${y(budget).toFixed(1)}" stroke="#cf222e" stroke-dasharray="5 4"/><text x="${W - pad.right}" y="${(y(budget) - 4).toFixed(1)}" text-anchor="end" class="tick" fill="#cf222e">budget ${usd(budget)}</text>`}
  ${threshold === null ? "" : `<line x1="${pad.left}" x2="${W - pad.right}" y1="${y(threshold).toFixed(1)}" y2="${y(threshold).toFixed(1)}" stroke="#bf8700" stroke-dasharray="2 3"/><text x="${pad.left + 4}" y="${(y(threshold) - 4).toFixed(1)}" class="tick" fill="#bf8700">a human decides above this</text>`}
  <path d="${path}" fill="none" stroke="#0969da" stroke-width="2"/>
  ${dots}
  <text x="${(W + pad.left) / 2}" y="${H - 8}" text-anchor="middle" class="tick">the session's chain entries, in order (dots: verdicts; steps between: settled costs)</text>
</svg>`;
}

function agentSection(a: AgentReport): string {
  const last = a.series[a.series.length - 1];
  return `<section class="agent" data-agent="${escapeHtml(a.agent.agent_id)}">
  <h3>${escapeHtml(a.agent.agent_id)} <span class="scene">${escapeHtml(a.scene)}</span></h3>
  <p>${escapeHtml(a.agent.role)}. Its guard config <code>${escapeHtml(JSON.stringify(a.agent.config))}</code> says it:</p>
  <ul>${a.plainConfig.map((l) => `<li>${escapeHtml(l)}</li>`).join("")}</ul>
  ${spendChart(a)}
  <p class="muted">Spent or held at the end: ${usd(last?.used ?? 0)}${a.budget === null ? "" : ` of ${usd(a.budget)}`}.</p>
</section>`;
}

function verdictTable(data: ReportData): string {
  const most = Math.max(1, ...data.verdicts.map((v) => v.count));
  const rows = data.verdicts
    .map(
      (v) => `<tr data-reason="${escapeHtml(v.reason)}">
  <td><span class="verdict" style="background:${VERDICT_COLOUR[v.verdict] ?? "#57606a"}">${escapeHtml(v.verdict)}</span></td>
  <td><code>${escapeHtml(v.reason)}</code></td>
  <td class="num">${v.count}</td>
  <td><div class="bar" style="width:${Math.round((v.count / most) * 120)}px;background:${VERDICT_COLOUR[v.verdict] ?? "#57606a"}"></div></td>
  <td>${escapeHtml(explainReason(v.reason))}</td>
</tr>`,
    )
    .join("\n");
  return `<table class="verdicts"><thead><tr><th>verdict</th><th>rule (reason)</th><th>decisions</th><th></th><th>in plain words</th></tr></thead><tbody>
${rows}
</tbody></table>`;
}

function chainSection(data: ReportData): string {
  const { chain, tampered } = data;
  const kinds = data.entryKinds
    .map(
      ([kind, n]) =>
        `<tr><td><code>${escapeHtml(kind)}</code></td><td class="num">${n}</td><td>${escapeHtml(describeKind(kind))}</td></tr>`,
    )
    .join("");
  const tamperLine =
    tampered.failsAt === null
      ? `<p class="bad" id="tampered">A copy with entry ${tampered.seq} edited VERIFIED: this is a bug.</p>`
      : `<p class="ok" id="tampered">✗ A copy with one DENY rewritten to ALLOW (entry ${tampered.seq}) fails verification at entry ${tampered.failsAt}: <code>${escapeHtml(tampered.kind ?? "")}</code>. Editing the log afterwards is detected.</p>`;
  return `<p class="${chain.ok ? "ok" : "bad"}" id="chain-result">${
    chain.ok
      ? `✓ Chain verified: ${chain.count} signed entries, head <code>${escapeHtml(chain.headHash.slice(0, 16))}…</code>, every hash link and Ed25519 signature checked against key <code>${escapeHtml(data.keyId)}</code>.`
      : `✗ Chain FAILED to verify: ${escapeHtml(chain.failure ?? "")}`
  }</p>
${tamperLine}
<p>${escapeHtml(data.entriesSentence)}</p>
<table class="kinds"><thead><tr><th>entry kind</th><th>entries</th><th>what one records</th></tr></thead><tbody>${kinds}</tbody></table>`;
}

function receiptsSection(data: ReportData): string {
  const rows = data.steps
    .map(
      (s, i) => `<tr class="receipt" data-check="${s.receiptOk ? "ok" : "failed"}">
  <td class="num">${i + 1}</td><td>${escapeHtml(s.agent_id)}</td><td>${escapeHtml(s.label)}</td>
  <td><span class="verdict" style="background:${VERDICT_COLOUR[s.result.verdict] ?? "#57606a"}">${escapeHtml(s.result.verdict)}</span></td>
  <td><code>${escapeHtml(s.result.reason)}</code></td><td class="num">${s.result.entry_seq ?? "-"}</td>
  <td class="${s.receiptOk ? "ok" : "bad"}">${s.receiptOk ? "✓ signature valid" : "✗ does not verify"}</td>
</tr>`,
    )
    .join("\n");
  const good = data.steps.filter((s) => s.receiptOk).length;
  return `<p id="receipts-result">${good} of ${data.steps.length} receipts verified offline with the public key alone; an edited receipt was <strong class="${data.forgedRejected ? "ok" : "bad"}">${data.forgedRejected ? "rejected" : "ACCEPTED (bug)"}</strong>.</p>
<table class="receipts"><thead><tr><th>#</th><th>agent</th><th>call</th><th>verdict</th><th>reason</th><th>entry</th><th>receipt check</th></tr></thead><tbody>
${rows}
</tbody></table>`;
}

const STYLE = `
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;color:#1f2328;margin:24px auto;max-width:1040px;padding:0 16px}
h1{font-size:22px;margin:0 0 4px}h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #d0d7de;padding-bottom:4px}
h3{font-size:15px;margin:0 0 4px}.scene{font-weight:normal;color:#57606a;font-size:13px}
.muted{color:#57606a}.ok{color:#1a7f37}.bad{color:#cf222e;font-weight:bold}
code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace;background:#f6f8fa;padding:1px 4px;border-radius:4px}
.agents{display:grid;grid-template-columns:repeat(auto-fill,minmax(480px,1fr));gap:16px}
.agent code{word-break:break-all}
.agent{border:1px solid #d0d7de;border-radius:8px;padding:12px}.agent ul{margin:4px 0 8px;padding-left:18px}
.chart{max-width:100%;height:auto}.tick{font-size:10px;fill:#57606a}
table{border-collapse:collapse;width:100%}th,td{text-align:left;padding:3px 8px;border-bottom:1px solid #eaeef2;vertical-align:top}
th{font-weight:600;background:#f6f8fa}.num{text-align:right}
.verdict{color:#fff;border-radius:4px;padding:0 6px;font:600 12px ui-monospace,monospace}
.bar{height:10px;border-radius:2px;margin-top:5px}
`;

export function renderReport(data: ReportData): string {
  return `<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>Leash demo report</title>
<style>${STYLE}</style></head>
<body>
<h1>Leash demo report</h1>
<p class="muted">Generated ${escapeHtml(data.generatedAt)} by <code>pnpm demo</code>: ${data.agents.length} scripted agents in library mode on an embedded SQLite store. Signing key <code>${escapeHtml(data.keyId)}</code> (ephemeral, demo only), public key <code>${escapeHtml(data.publicKeyHex)}</code>.</p>
<h2>The agents: spend against budget</h2>
<div class="agents">${data.agents.map(agentSection).join("\n")}</div>
<h2>Verdicts per rule</h2>
${verdictTable(data)}
<h2>The audit chain</h2>
${chainSection(data)}
<h2>Receipts</h2>
${receiptsSection(data)}
<h2>What to try next</h2>
<ul>${data.tryNext.map(([command, why]) => `<li><code>${escapeHtml(command)}</code> — ${escapeHtml(why)}</li>`).join("")}</ul>
</body></html>
`;
}
