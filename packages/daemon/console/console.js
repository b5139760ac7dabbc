// The HITL console page: the live queue over the control WebSocket (JSON-encoded @leash/wire ConsoleEvent /
// ConsoleRequest), one request's details, and the operator's answer. It trusts nothing it renders (text only, never HTML).
const $ = (id) => document.getElementById(id);
const SVG = "http://www.w3.org/2000/svg";

const state = {
  requests: new Map(),
  selected: null,
  operator: null,
  readonly: true,
  clockOffsetMs: 0,
  editorFor: null,
  nextId: 1,
  waiting: new Map(),
};
let socket = null;

const STATUS_TEXT = {
  HITL_PENDING: "Pending",
  HITL_DECIDED: "Answered",
  HITL_CONSUMED: "Answered, used",
  HITL_EXPIRED: "Expired (hitl_timeout)",
};
const DECISION_TEXT = {
  HITL_DECISION_APPROVE: "approved",
  HITL_DECISION_REJECT: "rejected",
  HITL_DECISION_MODIFY: "modified",
  HITL_DECISION_DEFER: "deferred",
  HITL_DECISION_ESCALATE: "escalated",
};

const statusOf = (r) => r.status ?? "HITL_STATUS_UNSPECIFIED";
const isPending = (r) => statusOf(r) === "HITL_PENDING";
const nsToMs = (ns) => Number(BigInt(ns ?? "0") / 1000000n);
const short = (text, n) => (text.length > n ? `${text.slice(0, n - 1)}…` : text);

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") node.className = v;
    else if (k.startsWith("data-") || k.startsWith("aria-")) node.setAttribute(k, v);
    else node[k] = v;
  }
  for (const c of children) node.append(c);
  return node;
}

function pretty(json) {
  if (!json) return "";
  try {
    return JSON.stringify(JSON.parse(json), null, 2);
  } catch {
    return json;
  }
}

function banner(text) {
  const b = $("banner");
  b.hidden = text === null;
  b.textContent = text ?? "";
}

function describe(r) {
  const status = statusOf(r);
  if (status === "HITL_EXPIRED") return STATUS_TEXT.HITL_EXPIRED;
  if (status === "HITL_PENDING") return STATUS_TEXT.HITL_PENDING;
  const how = DECISION_TEXT[r.decision] ?? "answered";
  const by = r.operatorId ? ` by ${r.operatorId}` : "";
  return `${how[0].toUpperCase()}${how.slice(1)}${by}${status === "HITL_CONSUMED" ? " (used)" : ""}`;
}

/** The colour class: pending, a release (approve/modify), or a refusal (reject, expiry). */
function toneOf(r) {
  const status = statusOf(r);
  if (status === "HITL_PENDING") return "s-pending";
  if (status === "HITL_EXPIRED" || r.decision === "HITL_DECISION_REJECT") return "s-rejected";
  return "s-decided";
}

function ordered() {
  const all = [...state.requests.values()];
  const pending = all.filter(isPending).sort((a, b) => nsToMs(a.createdNs) - nsToMs(b.createdNs));
  const done = all
    .filter((r) => !isPending(r))
    .sort((a, b) => nsToMs(b.decidedNs ?? b.createdNs) - nsToMs(a.decidedNs ?? a.createdNs));
  return [...pending, ...done.slice(0, 50)];
}

function upsert(view) {
  if (!view?.requestId) return;
  const before = state.requests.get(view.requestId);
  state.requests.set(view.requestId, view);
  if (before && isPending(before) && !isPending(view) && state.selected === view.requestId) {
    const mine = view.operatorId === state.operator && state.waiting.size > 0;
    if (!mine) banner(`This request was ${describe(view).toLowerCase()} — it can no longer be answered.`);
  }
}

function renderQueue() {
  const list = $("queue");
  const items = ordered();
  list.replaceChildren(
    ...items.map((r) => {
      const button = el(
        "button",
        {
          type: "button",
          "data-request-id": r.requestId,
          "aria-current": String(r.requestId === state.selected),
        },
        el("span", { class: "tool" }, r.toolName ?? "(no tool)"),
        el("span", { class: `pill ${toneOf(r)}` }, describe(r)),
        el(
          "span",
          { class: "meta" },
          `${short(r.sessionId ?? "", 24)} · call ${r.callNumber ?? "?"} · ${r.reason ?? ""}`,
        ),
      );
      button.addEventListener("click", () => select(r.requestId));
      return el("li", {}, button);
    }),
  );
  const pending = items.filter(isPending).length;
  $("pending-count").textContent = String(pending);
  $("empty").hidden = items.length > 0;
  document.title = pending > 0 ? `(${pending}) Leash HITL console` : "Leash HITL console";
}

function budgetChart(r) {
  const box = $("d-budget");
  const b = r.budget ?? {};
  if (!b.limitUsdDecimal) {
    box.replaceChildren(el("p", {}, "No budget is set for this session."));
    return;
  }
  const limit = Number(b.limitUsdDecimal);
  // The request's figures are the budget when the call paused; the session's latest verdict says
  // what is left now (holds of calls not yet settled count against it, so it can be below limit − spent).
  const latest = (r.recentVerdicts ?? []).filter((v) => v.budgetRemainingUsdDecimal).at(-1);
  const nowText = latest?.budgetRemainingUsdDecimal ?? b.remainingUsdDecimal ?? "";
  const now = nowText === "" ? null : Number(nowText);
  const used = now === null ? Number(b.spentUsdDecimal ?? "0") : Math.max(0, limit - now);
  const width = 520;
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} 150`);
  svg.setAttribute("role", "img");
  svg.setAttribute(
    "aria-label",
    `${trimUsd(used)} of ${b.limitUsdDecimal} USD used, ${nowText || "?"} USD remaining; remaining after each recent verdict`,
  );
  const add = (tag, attrs, text) => {
    const n = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, String(v));
    if (text !== undefined) n.textContent = text;
    svg.append(n);
    return n;
  };
  const label = (x, y, text, anchor = "start") =>
    add("text", { x, y, "font-size": 12, fill: "#374151", "text-anchor": anchor }, text);
  label(0, 12, `Used ${trimUsd(used)} of ${b.limitUsdDecimal} USD (spent and held)`);
  add("rect", { x: 0, y: 18, width, height: 14, fill: "#e5e7eb", rx: 3 });
  add("rect", {
    x: 0,
    y: 18,
    width: limit > 0 ? (Math.min(used, limit) / limit) * width : 0,
    height: 14,
    fill: used >= limit ? "#a4161a" : "#1f4fd1",
    rx: 3,
  });
  // Remaining budget after each of the session's recent verdicts.
  const points = (r.recentVerdicts ?? [])
    .filter((v) => v.budgetRemainingUsdDecimal)
    .map((v) => Number(v.budgetRemainingUsdDecimal));
  label(0, 52, "Remaining after each recent verdict (USD)");
  const top = 60;
  const bottom = 140;
  add("line", { x1: 40, y1: bottom, x2: width, y2: bottom, stroke: "#9ca3af" });
  label(36, top + 4, b.limitUsdDecimal, "end");
  label(36, bottom + 4, "0", "end");
  if (points.length > 0 && limit > 0) {
    const step = points.length > 1 ? (width - 52) / (points.length - 1) : 0;
    const y = (p) => bottom - (Math.max(0, Math.min(p, limit)) / limit) * (bottom - top);
    add("polyline", {
      fill: "none",
      stroke: "#116b35",
      "stroke-width": 2,
      points: points.map((p, i) => `${i * step + 46},${y(p)}`).join(" "),
    });
    points.forEach((p, i) => add("circle", { cx: i * step + 46, cy: y(p), r: 4, fill: "#116b35" }));
  }
  box.replaceChildren(
    svg,
    el(
      "p",
      { id: "d-budget-now" },
      `Remaining now: ${nowText || "?"} of ${b.limitUsdDecimal} USD` +
        (latest === undefined ? "" : ` (after call ${latest.callNumber}'s verdict)`),
    ),
    el(
      "p",
      { id: "d-budget-paused" },
      `When this call paused: ${b.remainingUsdDecimal ?? "?"} USD remaining, ${b.spentUsdDecimal ?? "0"} USD settled`,
    ),
  );
}

/** A dollar figure without float noise (0.05, not 0.049999999999999822). */
function trimUsd(n) {
  return String(Number(n.toFixed(12)));
}

/** Line diff (longest common subsequence) of the original params and the edited ones. */
function diffLines(a, b) {
  const x = a.split("\n");
  const y = b.split("\n");
  const m = x.length;
  const n = y.length;
  const lcs = Array.from({ length: m + 1 }, () => new Array(n + 1).fill(0));
  for (let i = m - 1; i >= 0; i--)
    for (let j = n - 1; j >= 0; j--)
      lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < m && j < n) {
    if (x[i] === y[j]) {
      out.push(["same", `  ${x[i]}`]);
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push(["del", `- ${x[i++]}`]);
    else out.push(["add", `+ ${y[j++]}`]);
  }
  while (i < m) out.push(["del", `- ${x[i++]}`]);
  while (j < n) out.push(["add", `+ ${y[j++]}`]);
  return out;
}

function editedParams() {
  const text = $("editor").value.trim();
  try {
    const value = JSON.parse(text);
    if (typeof value !== "object" || value === null || Array.isArray(value))
      return { error: "The params must be a JSON object." };
    return { text, value };
  } catch (e) {
    return { error: `Not JSON: ${e.message}` };
  }
}

function renderDiff() {
  const r = state.requests.get(state.selected);
  if (!r) return;
  const edited = editedParams();
  $("editor-error").textContent = edited.error ?? "";
  const after = edited.error ? $("editor").value : JSON.stringify(edited.value, null, 2);
  const lines = diffLines(pretty(r.paramsJson), after);
  $("diff").replaceChildren(...lines.map(([kind, text]) => el("span", { class: kind }, text)));
  $("b-modify").disabled = !canAnswer(r) || Boolean(edited.error);
}

const canAnswer = (r) => !state.readonly && isPending(r) && state.waiting.size === 0;

function renderDetail() {
  const r = state.requests.get(state.selected);
  const box = $("detail");
  box.hidden = !r;
  if (!r) return;
  $("d-tool").textContent = r.toolName ?? "";
  $("d-status").textContent = describe(r) + (r.comment ? ` — “${r.comment}”` : "");
  $("d-status").className = `status ${toneOf(r)}`;
  $("d-reason").textContent = r.reason ?? "";
  // The operator's policy rule that asked for a human (policy_hitl:rule:<name>); none for SP/1.0's own.
  const rule = /^policy_hitl:rule:(.+)$/.exec(r.reason ?? "");
  $("d-rule").textContent = rule === null ? "—" : rule[1];
  $("d-session").textContent = r.sessionId ?? "";
  $("d-agent").textContent = [r.agentId, r.organizationId].filter(Boolean).join(" @ ");
  $("d-call").textContent = `${r.callNumber ?? "?"} (nonce ${r.nonce ?? "none"})`;
  $("d-policy").textContent = r.policy ?? "";
  $("d-digest").textContent = r.argsDigest ?? "";
  $("d-params").textContent =
    pretty(r.paramsJson) || "(the params are not known to this daemon; the digest binds them)";
  budgetChart(r);
  $("d-verdicts").replaceChildren(
    ...(r.recentVerdicts ?? [])
      .slice(-10)
      .map((v) =>
        el(
          "tr",
          {},
          el("td", {}, v.callNumber ?? ""),
          el("td", {}, v.toolName ?? ""),
          el("td", {}, v.verdict ?? ""),
          el("td", {}, v.reason ?? ""),
          el("td", {}, v.budgetRemainingUsdDecimal ?? ""),
        ),
      ),
  );
  if (state.editorFor !== r.requestId) {
    state.editorFor = r.requestId;
    $("editor").value = pretty(r.paramsJson) || "{}";
    $("comment").value = "";
    $("answer-error").textContent = "";
  }
  for (const button of document.querySelectorAll(".buttons button")) button.disabled = !canAnswer(r);
  $("editor").readOnly = !canAnswer(r);
  renderDiff();
  tick();
}

function render() {
  renderQueue();
  renderDetail();
}

function select(requestId) {
  state.selected = requestId;
  banner(null);
  render();
}

function tick() {
  const r = state.requests.get(state.selected);
  if (!r) return;
  if (!isPending(r)) {
    $("d-countdown").textContent = "—";
    return;
  }
  const left = Math.max(0, Math.round((nsToMs(r.expiresNs) - (Date.now() + state.clockOffsetMs)) / 1000));
  const m = Math.floor(left / 60);
  const s = left % 60;
  $("d-countdown").textContent = `${m}:${String(s).padStart(2, "0")}`;
}

function send(request) {
  const correlationId = `c${state.nextId++}`;
  socket?.send(JSON.stringify({ correlationId, ...request }));
  return correlationId;
}

function answer(kind) {
  const r = state.requests.get(state.selected);
  if (!r || !canAnswer(r)) return;
  const decision = { kind };
  const comment = $("comment").value.trim();
  if (comment) decision.comment = comment;
  if (kind === "HITL_DECISION_MODIFY") {
    const edited = editedParams();
    if (edited.error) {
      $("editor-error").textContent = edited.error;
      return;
    }
    decision.paramsJson = edited.text;
  }
  $("answer-error").textContent = "";
  state.waiting.set(send({ answer: { requestId: r.requestId, decision } }), r.requestId);
  render();
}

function onEvent(event) {
  if (event.correlationId) state.waiting.delete(event.correlationId);
  if (event.hello) {
    state.operator = event.hello.operatorId ?? "";
    state.readonly = Boolean(event.hello.readonly);
    state.clockOffsetMs = nsToMs(event.hello.daemonTimeNs) - Date.now();
    $("who").textContent = `Signed in as ${state.operator}${state.readonly ? " (read-only)" : ""}`;
  }
  if (event.list) for (const r of event.list.requests ?? []) upsert(r);
  if (event.request) upsert(event.request);
  if (event.update) upsert(event.update.request);
  if (event.error) {
    const e = event.error;
    $("answer-error").textContent = `${e.detail ?? "error"}: ${e.message ?? ""}`;
  }
  if (state.selected === null || !state.requests.has(state.selected)) {
    const first = ordered().find(isPending) ?? ordered()[0];
    state.selected = first?.requestId ?? null;
  }
  render();
}

function connect() {
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  socket = new WebSocket(`${scheme}://${location.host}/v1/control`);
  socket.addEventListener("open", () => banner(null));
  socket.addEventListener("message", (e) => onEvent(JSON.parse(e.data)));
  socket.addEventListener("close", () => {
    state.waiting.clear();
    banner("Disconnected from the daemon; reconnecting…");
    setTimeout(connect, 2000);
  });
}

function move(delta) {
  const items = ordered();
  if (items.length === 0) return;
  const at = items.findIndex((r) => r.requestId === state.selected);
  const next = items[Math.max(0, Math.min(items.length - 1, at + delta))];
  select(next.requestId);
  document.querySelector(`[data-request-id="${CSS.escape(next.requestId)}"]`)?.focus();
}

const KEYS = { a: "b-approve", r: "b-reject", d: "b-defer", e: "b-escalate" };
document.addEventListener("keydown", (e) => {
  if (e.ctrlKey || e.metaKey || e.altKey) return;
  const typing = e.target instanceof HTMLInputElement || e.target instanceof HTMLTextAreaElement;
  if (typing) {
    if (e.key === "Escape") e.target.blur();
    return;
  }
  if (e.key === "j" || e.key === "ArrowDown") move(1);
  else if (e.key === "k" || e.key === "ArrowUp") move(-1);
  else if (KEYS[e.key]) $(KEYS[e.key]).click();
  else if (e.key === "m") {
    $("modify").open = true;
    $("editor").focus();
  } else return;
  e.preventDefault();
});

for (const button of document.querySelectorAll(".buttons button")) {
  button.addEventListener("click", () => answer(button.dataset.decision));
}
$("b-modify").addEventListener("click", () => answer("HITL_DECISION_MODIFY"));
$("editor").addEventListener("input", renderDiff);
setInterval(tick, 1000);
connect();
