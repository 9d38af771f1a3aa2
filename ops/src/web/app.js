"use strict";
const NA = "n/a";
const COLORS = ["#2563eb", "#16a34a", "#dc2626", "#9333ea", "#ea580c", "#0891b2", "#4d7c0f", "#be185d"];
let actionsAllowed = false;
let deadQueue = null;
let actionNote = "";
const $ = id => document.getElementById(id);
const tokenInput = $("token");
tokenInput.value = sessionStorage.getItem("redlease-token") || "";
tokenInput.addEventListener("change", () => sessionStorage.setItem("redlease-token", tokenInput.value));

function cell(tr, v, numeric) {
  const td = document.createElement("td");
  if (v === null || v === undefined) { td.textContent = NA; td.className = "na"; }
  else { td.textContent = String(v); if (numeric) td.className = "n"; }
  tr.appendChild(td);
  return td;
}
const enc = encodeURIComponent;
// Every action is confirmed in the page first: `ask` shows what it will do, "yes" runs it.
let pending = null;
function ask(text, run) { pending = run; $("confirm-text").textContent = text; $("confirm").hidden = false; }
$("confirm-yes").onclick = async () => { const run = pending; pending = null; $("confirm").hidden = true; if (run) await run(); };
$("confirm-no").onclick = () => { pending = null; $("confirm").hidden = true; };
async function post(path, what) {
  const r = await fetch(path, { method: "POST", headers: { "X-Redlease-Token": tokenInput.value } });
  const body = await r.json();
  $("action-note").textContent = r.ok
    ? `${what}: ${(body.done || []).join(", ") || "nothing"}${body.outcome ? " (" + body.outcome + ")" : ""}`
    : `refused: ${body.error}`;
  await refresh();
}
function button(td, label, cls, run) {
  const b = document.createElement("button");
  b.textContent = label; b.className = cls; b.disabled = !actionsAllowed; b.onclick = run;
  td.appendChild(b);
  return b;
}
function groupAction(verb) {
  const q = $("act-queue").value.trim(), g = $("act-group").value.trim(), id = $("act-id").value.trim();
  if (verb === "cancel") {
    if (!q || !id) { $("action-note").textContent = "cancel: give the queue and the job id"; return; }
    const gq = g ? `&group=${enc(g)}` : "";
    ask(`cancel job ${id}${g ? " of group " + g : ""} of queue ${q}?`, () => post(`/api/queues/${enc(q)}/cancel?id=${enc(id)}${gq}`, `cancel ${id}`));
  } else {
    if (!q || !g) { $("action-note").textContent = `${verb} group: give the queue and the group`; return; }
    ask(`${verb} group ${g} of queue ${q}?`, () => post(`/api/queues/${enc(q)}/${verb}?group=${enc(g)}`, `${verb} group`));
  }
}
$("pause-group").onclick = () => groupAction("pause");
$("resume-group").onclick = () => groupAction("resume");
$("cancel-job").onclick = () => groupAction("cancel");
function secs(ms) { return ms === null || ms === undefined ? null : (ms / 1000).toFixed(1) + "s"; }
function fill(tableId, rows, build) {
  const body = $(tableId).tBodies[0];
  body.replaceChildren();
  for (const r of rows) { const tr = document.createElement("tr"); build(tr, r); body.appendChild(tr); }
  if (!rows.length) { const tr = document.createElement("tr"); cell(tr, "(none)"); body.appendChild(tr); }
}

async function refresh() {
  let o;
  try { o = await (await fetch("/api/overview")).json(); } catch (e) { $("error").textContent = String(e); return; }
  actionsAllowed = !!o.actions_allowed;
  $("error").textContent = o.error || "";
  $("mode").textContent = actionsAllowed ? "actions allowed" : "read-only";
  for (const b of document.querySelectorAll("button.act")) b.disabled = !actionsAllowed;
  const s = o.server || {};
  $("server").textContent = `${s.url || ""} · ${s.version ? "Redis " + s.version : ""}`;
  fill("queues", o.queues || [], (tr, q) => {
    tr.dataset.queue = q.name;
    cell(tr, q.name);
    for (const k of ["ready", "delayed", "in_flight", "dead"]) cell(tr, q[k], true).dataset.field = k;
    cell(tr, secs(q.oldest_age_ms), true);
    cell(tr, q.per_minute ? q.per_minute.acked : null, true);
    cell(tr, q.per_minute ? q.per_minute.failed : null, true);
    cell(tr, q.paused === null ? null : (q.paused ? "yes" : "no")).dataset.field = "paused";
    cell(tr, q.grouped_jobs, true).dataset.field = "grouped_jobs";
    cell(tr, q.groups, true).dataset.field = "groups";
    cell(tr, q.paused_groups === null || q.paused_groups === undefined ? null
      : q.paused_groups + (q.paused_groups ? ` (${q.paused_group_ids.join(", ")})` : "")).dataset.field = "paused_groups";
    cell(tr, q.full_groups, true).dataset.field = "full_groups";
    cell(tr, q.rate_blocked_groups, true).dataset.field = "rate_blocked_groups";
    cell(tr, q.schedules ? q.schedules.map(s => `${s.name} ${s.next ? s.next.slice(5, 19).replace("T", " ") : "(none left)"}`).join(", ") : null).dataset.field = "schedules";
    const td = document.createElement("td");
    const b = document.createElement("button");
    b.textContent = "dead"; b.title = "its dead letters"; b.className = "show-dead";
    b.onclick = () => showDead(q.name);
    td.appendChild(b);
    if (q.paused !== null) {
      const verb = q.paused ? "resume" : "pause";
      button(td, verb, verb, () => ask(`${verb} queue ${q.name}?`, () => post(`/api/queues/${enc(q.name)}/${verb}`, `${verb} ${q.name}`)));
    }
    for (const g of q.paused_group_ids || []) {
      button(td, `resume ${g}`, "resume-group", () => ask(`resume group ${g} of queue ${q.name}?`,
        () => post(`/api/queues/${enc(q.name)}/resume?group=${enc(g)}`, `resume group ${g}`))).dataset.group = g;
    }
    tr.appendChild(td);
  });
  fill("locks", o.locks || [], (tr, l) => {
    tr.dataset.lock = l.name; tr.dataset.kind = l.kind;
    cell(tr, l.name); cell(tr, l.kind).dataset.field = "kind";
    cell(tr, l.holder !== null ? l.holder : (l.error ? `not read: ${l.error}` : null)); cell(tr, secs(l.ttl_ms), true); cell(tr, l.fence, true);
    const td = document.createElement("td");
    const b = button(td, "release", "release", () => ask(`release lock ${l.name} held by ${l.holder}?`,
      () => post(`/api/locks/${enc(l.name)}/release?token_prefix=${enc(l.holder)}`, `release ${l.name}`)));
    // One holder, by its prefix (readers share a read lock; a legacy lock has no forced release).
    if (!l.holder || l.holder.includes(",") || l.kind === "legacy") b.disabled = true;
    tr.appendChild(td);
  });
  fill("semaphores", o.semaphores || [], (tr, m) => {
    cell(tr, m.name); cell(tr, m.permits, true);
    cell(tr, m.holders ? m.holders.map(h => `${h.holder} ${secs(h.ttl_ms)}`).join(", ") : null);
    cell(tr, m.waiters ? m.waiters.join(", ") : null);
  });
  fill("status", [
    ["version", s.version], ["mode", s.mode], ["role", s.role], ["uptime", s.uptime_s === null ? null : s.uptime_s + "s"],
    ["connections", s.connected_clients], ["redlease connections", s.redlease_connections], ["live clients", s.live_clients],
    ["memory", s.used_memory], ["round trips per refresh", o.round_trips],
  ], (tr, [k, v]) => { cell(tr, k); cell(tr, v); });
  try { drawCharts(await (await fetch("/api/history")).json()); } catch (e) { $("error").textContent = String(e); }
  if (deadQueue !== null) await loadDead();
}

function drawCharts(h) {
  const samples = h.samples || [];
  const times = samples.map(s => s.at_ms);
  const names = new Set();
  for (const s of samples) for (const n in s.queues) names.add(n);
  const series = [...names].sort().slice(0, COLORS.length).map((n, i) => ({
    name: n, color: COLORS[i],
    values: samples.map(s => { const q = s.queues[n]; return q ? q.ready + q.delayed + q.in_flight : null; }),
  }));
  lineChart($("depth-chart"), times, series);
  const legend = $("depth-legend");
  legend.replaceChildren(...series.map(s => { const e = document.createElement("span"); e.style.color = s.color; e.textContent = "● " + s.name; return e; }));
  if (h.throughput && h.throughput.times.length) {
    lineChart($("rate-chart"), h.throughput.times, h.throughput.series);
    const legend = $("rate-legend");
    legend.replaceChildren(...h.throughput.series.map(s => { const e = document.createElement("span"); e.style.color = s.color; e.textContent = "● " + s.name; return e; }));
  } else { $("rate-chart").textContent = "no jobs counted in the last hour"; }
}

function showDead(name) { deadQueue = name; actionNote = ""; $("dead-section").hidden = false; $("dead-queue").textContent = name; loadDead(); }
$("dead-close").onclick = () => { deadQueue = null; $("dead-section").hidden = true; };

async function loadDead() {
  const name = deadQueue;
  const r = await (await fetch(`/api/queues/${encodeURIComponent(name)}/dead?limit=100`)).json();
  // The last action's outcome stays until the next one (a refresh does not wipe it).
  $("dead-note").textContent = r.error || actionNote || (actionsAllowed ? "" : "read-only: actions are off");
  fill("dead", r.jobs || [], (tr, d) => {
    tr.dataset.id = d.id;
    if (d.group !== null && d.group !== undefined) tr.dataset.group = d.group;
    cell(tr, d.id); cell(tr, d.group || "").dataset.field = "group"; cell(tr, d.deliveries, true); cell(tr, d.died_at_ms == null ? null : new Date(d.died_at_ms).toISOString()); cell(tr, d.cause); cell(tr, d.reason); cell(tr, d.payload_len, true); cell(tr, d.preview);
    const td = document.createElement("td");
    for (const verb of ["requeue", "delete"]) {
      const b = document.createElement("button");
      b.textContent = verb; b.className = verb; b.disabled = !actionsAllowed;
      b.onclick = () => ask(`${verb} dead job ${d.id}${d.group ? " of group " + d.group : ""} of queue ${name}?`, () => act(name, verb, d.id, d.group));
      td.appendChild(b);
    }
    tr.appendChild(td);
  });
}

async function act(name, verb, id, group) {
  const g = group ? `&group=${encodeURIComponent(group)}` : "";
  const r = await fetch(`/api/queues/${encodeURIComponent(name)}/dead/${verb}?id=${encodeURIComponent(id)}${g}`,
    { method: "POST", headers: { "X-Redlease-Token": tokenInput.value } });
  const body = await r.json();
  actionNote = r.ok ? `${verb}: ${body.done.join(", ") || "nothing"}` : `refused: ${body.error}`;
  $("dead-note").textContent = actionNote;
  await refresh();
}

refresh();
setInterval(refresh, 2000);
