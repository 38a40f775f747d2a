// The wattsched dashboard: polls the controller's API with the user's token and draws power
// against the cap (and what its shedding did), the node map, the queue, budgets and limits with
// their use, energy by user and account, and a job's power.
// Plain JavaScript and SVG: the controller serves these files as they are, with no build step.
"use strict";

const POLL_MS = 2000;
const SVG = "http://www.w3.org/2000/svg";
let token = sessionStorage.getItem("wattsched-token") || "";
let timer = null;

function el(tag, attrs = {}, text = "") {
  const node = tag.startsWith("svg:") ? document.createElementNS(SVG, tag.slice(4)) : document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  if (text) node.textContent = text;
  return node;
}

async function api(path) {
  const response = await fetch(path, {headers: {Authorization: "Bearer " + token}});
  if (response.status === 401) { showLogin("The token was refused: " + (await response.text())); throw new Error("401"); }
  if (!response.ok) throw new Error(path + ": " + response.status + " " + (await response.text()));
  return response.json();
}

function showLogin(message) {
  document.getElementById("login").hidden = false;
  document.getElementById("overview").hidden = true;
  document.getElementById("job").hidden = true;
  document.getElementById("login-error").textContent = message || "";
}

const fmtTime = (t) => t ? new Date(t * 1000).toLocaleString() : "";
const fmtClock = (t) => new Date(t * 1000).toTimeString().slice(0, 5);
const fmtJoules = (j) => j == null ? "" : j >= 3.6e6 ? (j / 3.6e6).toFixed(2) + " kWh" : j >= 1000 ? (j / 1000).toFixed(1) + " kJ" : Math.round(j) + " J";

// --- a time chart: x = time, y = watts --------------------------------------------------------------

function chart(svg, x0, x1, yMax) {
  svg.replaceChildren();
  const W = 900, H = 260, L = 60, R = 10, T = 10, B = 25;
  const sx = (t) => L + (t - x0) / Math.max(1, x1 - x0) * (W - L - R);
  const sy = (w) => H - B - w / Math.max(1, yMax) * (H - T - B);
  const axis = el("svg:g", {class: "axis"});
  for (let i = 0; i <= 4; i++) {
    const w = yMax * i / 4;
    axis.append(el("svg:line", {x1: L, x2: W - R, y1: sy(w), y2: sy(w), class: "grid"}));
    axis.append(el("svg:text", {x: 4, y: sy(w) + 4}, Math.round(w) + " W"));
  }
  for (let i = 0; i <= 6; i++) {
    const t = x0 + (x1 - x0) * i / 6;
    axis.append(el("svg:text", {x: sx(t) - 15, y: H - 6}, fmtClock(t)));
  }
  svg.append(axis);
  return {sx, sy, add: (node) => svg.append(node)};
}

function line(points, c, cls, attrs = {}) {
  const d = points.map(([t, w], i) => (i ? "L" : "M") + c.sx(t).toFixed(1) + "," + c.sy(w).toFixed(1)).join("");
  return el("svg:path", {d, class: cls, ...attrs});
}

// --- the overview --------------------------------------------------------------------------------------

async function refreshPower() {
  const period = Number(document.getElementById("period").value);
  const data = await api("/v1/dashboard/power?period=" + period);
  const now = data.time, x0 = now - period, x1 = now + period * 0.15;
  const caps = data.series.map((s) => s[3]).filter((c) => c != null);
  const planned = data.power_reservations.filter((r) => r.end > x0 && r.start < x1);
  const yMax = 1.15 * Math.max(data.max_watts, ...data.series.map((s) => Math.max(s[1], s[2])), ...caps, 1);
  const svg = document.getElementById("power-chart");
  const c = chart(svg, x0, x1, yMax);
  c.add(el("svg:line", {x1: c.sx(now), x2: c.sx(now), y1: 10, y2: 235, class: "now"}));
  if (data.series.length) {
    const last = data.series[data.series.length - 1];
    c.add(line(data.series.map((s) => [s[0], s[2]]), c, "series modelled"));
    c.add(line(data.series.map((s) => [s[0], s[1]]), c, "series measured", {"data-last": last[0], "data-watts": last[1]}));
  }
  if (data.power_cap != null) {  // the cap over time, carried on to the right edge
    const pts = [];
    for (const s of data.series) if (s[3] != null) { if (pts.length) pts.push([s[0], pts[pts.length - 1][1]]); pts.push([s[0], s[3]]); }
    pts.push([x1, data.power_cap]);
    if (pts.length === 1) pts.unshift([x0, data.power_cap]);
    c.add(line(pts, c, "cap", {"data-watts": data.power_cap}));
    for (const r of planned) {  // what a power reservation leaves to other jobs while it holds its watts
      const left = Math.max(0, data.power_cap - r.watts), a = Math.max(r.start, x0), b = Math.min(r.end, x1);
      c.add(line([[a, left], [b, left]], c, "planned", {"data-name": r.name}));
      c.add(el("svg:text", {x: c.sx(b) - 2, y: c.sy(left) - 4, class: "axis", "text-anchor": "end"},
               r.name + " (" + r.watts + " W)"));
    }
  }
  for (const a of data.cap_actions) {  // what meeting a lowered cap did, marked where it happened
    c.add(el("svg:circle", {cx: c.sx(a.time), cy: c.sy(a.cap), r: 3, class: "cap-action", "data-job": a.job_id}));
  }
  const list = document.getElementById("cap-actions");
  list.replaceChildren(...data.cap_actions.slice(-20).reverse().map((a) => {
    const item = document.createElement("li");
    const what = a.khz ? `${a.action} to ${(a.khz / 1e6).toFixed(2)} GHz` : a.action;
    item.textContent = `${new Date(a.time * 1000).toLocaleTimeString()} job ${a.job_id}: ${what} ` +
      `(${a.watts >= 0 ? "-" : "+"}${Math.abs(a.watts)} W, cap ${a.cap} W)`;
    return item;
  }));
  document.getElementById("power-figures").textContent =
    `now ${Math.round(data.measured_watts)} W measured, ${data.modelled_watts} W modelled; cap ` +
    (data.power_cap == null ? "off" : data.power_cap + " W") + `; AdjustedMaxWatts ${data.adjusted_max_watts} W`;
  return data.time;
}

function nodeClass(n) {
  const power = String(n.power || "");
  if (power === "POWERED_DOWN") return "off";
  if (power.startsWith("POWERING")) return "switching";
  if (n.base_state === "DOWN" || n.not_responding) return "down";
  if (n.drain) return "drain";
  return {ALLOCATED: "busy", MIXED: "mixed"}[n.base_state] || "idle";
}

async function refreshNodes() {
  const data = await api("/v1/nodes");
  const map = document.getElementById("node-map"), counts = {};
  map.replaceChildren(...data.nodes.map((n) => {
    const cls = nodeClass(n);
    counts[cls] = (counts[cls] || 0) + 1;
    // a node its hardware holds to a limit (CapWatts) shows it beside its power
    const cap = n.cap_watts == null ? null : Math.round(n.cap_watts);
    const attrs = {class: "node " + cls, "data-name": n.name, "data-state": cls,
                   title: `${n.name}: ${n.state}, ${n.alloc_cpus}/${n.cpus} CPUs, ${n.current_watts} W` +
                          (cap == null ? "" : `, held to ${cap} W`)};
    if (cap != null) attrs["data-cap"] = String(cap);
    const box = el("div", attrs);
    box.append(el("b", {}, n.name), el("br"),
               document.createTextNode((n.metered ? n.current_watts + " W" : "–") + (cap == null ? "" : ` / ${cap} W`)));
    return box;
  }));
  document.getElementById("node-summary").textContent = Object.entries(counts).map(([k, v]) => `${v} ${k}`).join(", ");
}

// the keys the queue shows, as rows of values (the controller's cheap form: squeue's)
const QUEUE_KEYS = ["job_id", "display_id", "user", "partition", "state", "reason", "expected_start", "start_time",
                    "node_list", "consumed_energy_j"];

async function refreshQueue() {
  const data = await api("/v1/jobs?columns=true&" + QUEUE_KEYS.map((k) => "key=" + k).join("&"));
  const records = data.rows ? data.rows.map((row) => Object.fromEntries(data.columns.map((k, i) => [k, row[i]])))
                            : data.jobs;  // (an empty queue comes as records)
  const jobs = records.filter((j) => ["PENDING", "RUNNING", "CONFIGURING", "COMPLETING"].includes(j.state));
  const shown = jobs.slice(0, 200);
  document.getElementById("queue-rows").replaceChildren(...shown.map((j) => {
    const row = el("tr", {"data-job": j.job_id, "data-state": j.state});
    const link = el("a", {href: "#job=" + j.job_id}, j.display_id);
    const start = j.state === "PENDING" ? (j.expected_start ? fmtTime(j.expected_start) + " (expected)" : "") : fmtTime(j.start_time);
    row.append(el("td"), el("td", {}, j.user), el("td", {}, j.partition), el("td", {}, j.state),
               el("td", {}, j.state === "PENDING" ? j.reason : ""), el("td", {}, start), el("td", {}, j.node_list),
               el("td", {}, fmtJoules(j.consumed_energy_j)));
    row.firstChild.append(link);
    return row;
  }));
  document.getElementById("queue-summary").textContent =
    `${jobs.filter((j) => j.state === "PENDING").length} pending, ${jobs.filter((j) => j.state !== "PENDING").length} running` +
    (jobs.length > shown.length ? ` (first ${shown.length} shown)` : "");
}

async function refreshEnergy() {
  const period = Number(document.getElementById("energy-period").value);
  const data = await api("/v1/dashboard/energy?period=" + period);
  for (const [id, key, title] of [["energy-users", "users", "User"], ["energy-accounts", "accounts", "Account"]]) {
    const table = document.getElementById(id);
    const head = el("tr");
    head.append(el("th", {}, title), el("th", {}, "Energy"), el("th", {}, "Jobs"));
    table.replaceChildren(head, ...data[key].map((r) => {
      const row = el("tr", {"data-name": r.name});
      row.append(el("td", {}, r.name), el("td", {"data-joules": r.joules}, fmtJoules(r.joules)), el("td", {}, r.jobs));
      return row;
    }));
  }
}

const BUDGET_POLL_MS = 10000;  // the limits' use changes every PriorityCalcPeriod: no need to ask more often
let budgetsAt = 0;

function fmtTres(tres, value) {
  if (tres === "energy") return fmtJoules(value);
  if (tres === "power") return Math.round(value) + " W";
  if (tres === "mem") return Math.round(value) + " MB";
  return String(Math.round(value));
}

async function refreshBudgets() {
  if (Date.now() - budgetsAt < BUDGET_POLL_MS) return;
  budgetsAt = Date.now();
  let data;
  try {
    data = await api("/v1/assoc_mgr");
  } catch (error) {  // no accounting: no budgets to show
    document.getElementById("budgets").hidden = true;
    return;
  }
  const rows = [];
  const add = (owner, record) => {
    for (const [field, name, use] of [["grp_tres", "GrpTRES", "tres"], ["grp_tres_mins", "GrpTRESMins", "tres_mins"],
                                      ["grp_tres_run_mins", "GrpTRESRunMins", "tres_run_mins"]]) {
      for (const [tres, limit] of Object.entries(record.limits[field] || {})) {
        const used = record.usage[use][tres] || 0, share = limit > 0 ? Math.min(1, used / limit) : 1;
        const row = el("tr", {"data-owner": owner, "data-limit": name, "data-tres": tres, "data-used": used});
        const bar = el("td");
        bar.append(el("span", {class: "bar" + (share >= 1 ? " full" : ""), style: `width:${Math.round(share * 100)}px`}));
        row.append(el("td", {}, owner), el("td", {}, name), el("td", {}, tres),
                   el("td", {}, fmtTres(tres, used)), el("td", {}, fmtTres(tres, limit)),
                   el("td", {}, fmtTres(tres, Math.max(0, limit - used))), bar);
        rows.push(row);
      }
    }
  };
  for (const a of data.associations) add(a.user ? `${a.account} / ${a.user}` : a.account, a);
  for (const q of data.qos) add("QOS " + q.name, q);
  document.getElementById("budget-rows").replaceChildren(...rows);
  document.getElementById("budgets").hidden = rows.length === 0;
}

// --- a job's page --------------------------------------------------------------------------------------

// what its nodes' power limits let it draw now, and the lowest that has been (scontrol's CapWatts)
function fmtLimit(j) {
  if (j.min_cap_watts == null) return "";
  const now = j.cap_watts == null ? "none now" : `${Math.round(j.cap_watts)} W`;
  return `${now} (lowest ${Math.round(j.min_cap_watts)} W)`;
}

async function refreshJob(jobId) {
  const data = await api("/v1/dashboard/job/" + encodeURIComponent(jobId));
  const j = data.job;
  document.getElementById("job-title").textContent = `Job ${j.display_id} (${j.name})`;
  const fields = document.getElementById("job-fields");
  fields.replaceChildren();
  for (const [k, v] of [["User", j.user], ["Account", j.account], ["State", j.state], ["Reason", j.reason],
                        ["Nodes", j.node_list], ["Start", fmtTime(j.start_time)], ["End", fmtTime(j.end_time)],
                        ["Energy", fmtJoules(j.consumed_energy_j)], ["Power limit", fmtLimit(j)]])
    fields.append(el("dt", {}, k), el("dd", {}, v || ""));
  const series = Object.entries(data.power);
  const all = series.flatMap(([, pts]) => pts);
  const x0 = j.start_time || data.time, x1 = Math.max(x0 + 1, j.end_time || data.time);
  const c = chart(document.getElementById("job-chart"), x0, x1, 1.15 * Math.max(1, ...all.map((p) => p[1])));
  const colours = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"];
  series.forEach(([node, pts], i) => {
    if (pts.length) c.add(line(pts, c, "series node-power", {"data-node": node, stroke: colours[i % colours.length]}));
  });
  document.getElementById("job-note").textContent = series.length ?
    "Each line is one node's power (its energy counter's rate), over the job's run." :
    "No power samples: the job has not run, or its nodes are not metered (or the samples, kept for an hour, are gone).";
  return data.time;
}

// --- the loop ------------------------------------------------------------------------------------------

async function refresh() {
  const route = location.hash.match(/job=(\d+)/);
  document.getElementById("overview").hidden = !!route;
  document.getElementById("job").hidden = !route;
  document.getElementById("login").hidden = true;
  const status = document.getElementById("status");
  try {
    const at = route ? await refreshJob(route[1]) :
      (await Promise.all([refreshPower(), refreshNodes(), refreshQueue(), refreshEnergy(), refreshBudgets()]))[0];
    status.dataset.updated = at;
    status.className = "";
    status.textContent = "updated " + new Date(at * 1000).toLocaleTimeString();
  } catch (error) {
    status.className = "stale";
    status.textContent = "not updated: " + error.message;
  }
}

function start() {
  const fromUrl = location.hash.match(/token=([^&]+)/);
  if (fromUrl) {  // a link with the token: keep it for this tab only, and take it out of the address bar
    token = decodeURIComponent(fromUrl[1]);
    sessionStorage.setItem("wattsched-token", token);
    history.replaceState(null, "", location.pathname);
  }
  if (!token) return showLogin();
  api("/v1/ping").then((p) => { document.getElementById("cluster").textContent = p.cluster + " (" + p.user + ")"; }).catch(() => {});
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, POLL_MS);
}

document.getElementById("login").addEventListener("submit", (event) => {
  event.preventDefault();
  token = document.getElementById("token").value.trim().replace(/^SLURM_JWT=/, "");
  sessionStorage.setItem("wattsched-token", token);
  start();
});
for (const id of ["period", "energy-period"]) document.getElementById(id).addEventListener("change", refresh);
window.addEventListener("hashchange", refresh);
start();
