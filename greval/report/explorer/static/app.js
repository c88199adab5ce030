// greval's record explorer: filters, sorts and shows the rows Python wrote (data/*.js). Every string from the
// data is shown with textContent (never as markup). Data files are <script>s: the folder opens from disk.
"use strict";
(function () {
  const S = { meta: null, rows: {}, joined: {}, pending: {}, records: {}, statics: {}, prompts: {}, view: [], state: {} };
  const $ = (sel) => document.querySelector(sel);
  const FILTERS = ["system", "group", "status", "label", "value", "bin", "human", "agree", "changed"];
  // The table draws only the rows on screen and MARGIN more on each side (a window of the view, redrawn as the
  // page scrolls or focus moves); two spacers (tbody::before / ::after, heights --above / --below) stand for the
  // rows not drawn, so the page is as tall as the whole table and its scrollbar says where one is.
  const MARGIN = 8;
  const W = { lo: 0, hi: 0, rowH: 0, drawn: new Map(), widths: [], queued: false };

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "text") e.textContent = v; else e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k instanceof Node ? k : String(k));
    return e;
  }
  function load(src, key) {
    if (!S.pending[key]) {
      S.pending[key] = new Promise((resolve, reject) => {
        const s = el("script", { src: src });
        s.onerror = () => reject(new Error("cannot read " + src));
        document.body.append(s);
        S.waiters[key] = resolve;
      });
    }
    return S.pending[key];
  }
  S.waiters = {};
  window.GREVAL = {
    meta(m) { S.meta = m; S.col = Object.fromEntries(m.columns.map((c, i) => [c, i])); start(); },
    rows(metric, chunk, rows) { (S.rows[metric] = S.rows[metric] || [])[chunk] = rows; done("m" + metric + "-" + chunk); },
    records(chunk, recs) { Object.assign(S.records, recs); done("r" + chunk); },
    prompt(metric, byMethod) { S.statics[metric] = byMethod; done("p" + metric); },
    prompts(metric, chunk, recs) { S.prompts[metric] = Object.assign(S.prompts[metric] || {}, recs); done("q" + metric + "-" + chunk); },
  };
  function done(key) { if (S.waiters[key]) S.waiters[key](); }
  async function metricRows(m) {
    const meta = S.meta.metrics[m];
    const jobs = [];
    for (let k = 0; k < meta.chunks; k++) jobs.push(load("data/m" + m + "-" + k + ".js", "m" + m + "-" + k));
    await Promise.all(jobs);
    // the rows in record-id order (as sorting by "record" orders them): the order every unsorted view keeps
    if (!S.joined[m]) S.joined[m] = sortRows([].concat(...(S.rows[m] || [])), "id", "asc");
    return S.joined[m];
  }
  function recordChunk(rec) { const k = Math.floor(rec / S.meta.records_per_chunk); return load("data/r" + k + ".js", "r" + k); }
  async function allRecords() {
    const jobs = [];
    for (let k = 0; k * S.meta.records_per_chunk < S.meta.records; k++) jobs.push(load("data/r" + k + ".js", "r" + k));
    await Promise.all(jobs);
  }

  // ------------------------------------------------------------------------------------------------ address
  function readHash() {
    const st = {};
    for (const part of location.hash.replace(/^#/, "").split("&")) {
      if (!part) continue;
      const i = part.indexOf("=");
      st[decodeURIComponent(i < 0 ? part : part.slice(0, i))] = i < 0 ? "" : decodeURIComponent(part.slice(i + 1));
    }
    st.m = Math.max(0, Math.min(S.meta.metrics.length - 1, parseInt(st.m || "0", 10) || 0));
    return st;
  }
  function hashOf(st) {
    return "#" + Object.entries(st).filter(([, v]) => v !== "" && v !== undefined && v !== null)
      .map(([k, v]) => encodeURIComponent(k) + "=" + encodeURIComponent(v)).join("&");
  }
  function go(changes) {
    const st = Object.assign({}, S.state, changes);
    if (!("record" in changes)) delete st.record;
    navigate(hashOf(st));
  }
  function navigate(hash) {
    // a new history entry without a fragment navigation (which lays the page out to look for an anchor of
    // that name: a third of a filter's time at 10,000 records); back and forward still reach it (hashchange)
    if (hash === location.hash) return;
    history.pushState(null, "", hash);
    route();
  }

  // ------------------------------------------------------------------------------------------------ filtering
  function cell(r, c) { return r[S.col[c]]; }
  const TEXT = new WeakMap();
  function textOf(r) {
    // a row's searchable text, lower-cased once: its id, verdict, reason, human labels and its record's fields
    let t = TEXT.get(r);
    if (t === undefined) {
      const rec = S.records[r[S.col.rec]];
      t = [cell(r, "id"), cell(r, "verdict"), cell(r, "reason"), cell(r, "human"), rec ? JSON.stringify(rec.fields) : ""]
        .join("\n").toLowerCase();
      if (rec) TEXT.set(r, t);
    }
    return t;
  }
  function predicate(st) {
    // one test per filter set, each reading its column by index
    const tests = [];
    for (const f of FILTERS) {
      const want = st[f];
      if (want === undefined || want === "") continue;
      if (f === "label") { const i = S.col.labels; tests.push((r) => r[i].includes(want)); }
      else if (f === "value") { const i = S.col.labels, v = S.col.verdict; tests.push((r) => r[i].includes(want) || String(r[v]) === want); }
      else if (f === "human") { const i = S.col.human; tests.push((r) => String(r[i] || "").split("; ").includes(want)); }
      else if (f in S.col) { const i = S.col[f]; tests.push((r) => (r[i] === null || r[i] === undefined ? "" : String(r[i])) === want); }
    }
    if (st.q) { const q = st.q.toLowerCase(); tests.push((r) => textOf(r).includes(q)); }
    return (r) => { for (const t of tests) if (!t(r)) return false; return true; };
  }
  // text sorts as a person reads it ("r2" before "r10"); one collator, not one per comparison
  const COLLATE = new Intl.Collator(undefined, { numeric: true }).compare;
  // the sort a view without one asks for: a comparison's changed records first (then record-id order)
  function sortOf(st) { return st.sort || (S.meta.compare ? "changed" : ""); }
  function sortRows(rows, key, dir) {
    if (!key || !(key in S.col)) return rows;
    const i = S.col[key], sign = dir === "desc" ? -1 : 1;
    return rows.slice().sort((a, b) => {
      const x = a[i], y = b[i];
      if (x === y) return 0;
      if (x === null || x === "" || x === undefined) return 1;
      if (y === null || y === "" || y === undefined) return -1;
      return (typeof x === "number" && typeof y === "number" ? x - y : COLLATE(String(x), String(y))) * sign;
    });
  }

  // ------------------------------------------------------------------------------------------------ rendering
  const COLS = [
    ["id", "record"], ["verdict", "verdict"], ["score", "score"], ["human", "human label(s)"], ["agree", "agree?"],
    ["confidence", "confidence", "opt"], ["system", "system"], ["group", "group", "opt"], ["status", "status", "opt"],
    ["tokens", "judge tokens", "opt"], ["cost_text", "cost", "opt"], ["latency_ms", "judge ms", "opt"], ["reason", "reason"],
  ];
  const SORT_BY = { cost_text: "cost" };  // a column shown as text, sorted by its number
  const BOUND = "an upper bound: this record's cached prompt tokens were not recorded (judged before greval kept them)";
  function costTitle(text, m) { return text.startsWith("≤") ? BOUND : text === "—" ? m.cost_missing : null; }
  const USED = new WeakMap();
  function columns() {
    // the metric's columns that hold something in some row (no column of blanks), worked out once per metric
    const rows = S.all || [];
    if (USED.has(rows)) return USED.get(rows);
    const used = (c) => c === "id" || rows.some((r) => { const v = cell(r, c); return v !== null && v !== undefined && v !== ""; });
    let out = COLS.slice();
    if (S.meta.compare) {
      const [a, b] = S.meta.compare;
      out.splice(1, 1, ["changed", "changed?"], ["verdict", "A: " + a], ["verdict_b", "B: " + b]);
      out.splice(4, 1, ["score", "A score"], ["score_b", "B score"]);
    }
    out = out.filter(([c]) => used(c));
    USED.set(rows, out);
    return out;
  }
  function fmt(v, c) {
    if (v === null || v === undefined) return "";
    if (typeof v === "number") return c === "score" || c === "confidence" ? v.toFixed(3) : String(v);
    return String(v);
  }
  function renderNav(st) {
    const nav = $("#metrics"); nav.replaceChildren();
    S.meta.metrics.forEach((m, i) => {
      const twin = S.meta.metrics.some((o) => o !== m && o.name === m.name);
      const name = m.name + (twin ? "@" + m.spec_hash : "") + " · " + m.judge;
      nav.append(el("a", { href: hashOf({ m: i }), "aria-current": i === st.m ? "page" : null, text: name }));
    });
  }
  function renderFigures(st) {
    const m = S.meta.metrics[st.m], f = m.figures, box = $("#figures");
    const dist = el("dd", { class: "dist" });
    const key = m.labels.length ? "label" : (m.kind === "judge" ? "value" : "bin");
    for (const [k, v] of Object.entries(f.distribution)) {
      if (!v) continue;
      dist.append(el("a", { href: hashOf({ m: st.m, [key]: k }), "data-figure": key, "data-key": k, "data-count": v, text: k + ": " + v }));
    }
    const item = (t, d) => el("dl", {}, el("dt", { text: t }), d instanceof Node ? d : el("dd", { text: d }));
    const kids = [
      item("records", String(f.records)), item("ok", String(f.ok)), item("failed", String(f.failed)),
      item(m.labels.length && m.many ? "items by label" : "by label / value / score bin", dist),
      item(f.by_shares ? "label shares (95% CI)" : "dataset score (95% CI)", f.summary || "—"),
    ];
    if (f.cost) kids.push(item("cost of the judge's calls", f.cost + (f.cost === "—" ? " (" + m.cost_missing + ")" : f.cost.startsWith("≤") ? " (some records' cached tokens not recorded)" : "")));
    if (f.agreement) {
      const a = el("dd", {}, el("a", { href: hashOf({ m: st.m, agree: "disagree" }), text: f.agreement }));
      kids.push(item("judge–human agreement (disagreements →)", a));
    }
    box.replaceChildren(...kids);
  }
  function options(name, values, current) {
    const sel = el("select", { id: "f-" + name, "data-filter": name });
    sel.append(el("option", { value: "", text: "all" }));
    for (const v of values) sel.append(el("option", { value: v, text: v, selected: v === current }));
    sel.addEventListener("change", () => go({ [name]: sel.value }));
    return el("label", {}, name, sel);
  }
  function syncFilters(st) {
    // the same metric's filters: only their values follow the address
    for (const sel of $("#selects").querySelectorAll("select")) { const v = st[sel.dataset.filter] || ""; if (sel.value !== v) sel.value = v; }
    const q = $("#q"); if (document.activeElement !== q && q.value !== (st.q || "")) q.value = st.q || "";
  }
  function renderFilters(st) {
    const m = S.meta.metrics[st.m], box = $("#selects"); box.replaceChildren();
    const vals = m.values;
    if (vals.system.length) box.append(options("system", vals.system, st.system));
    if (vals.group.length) box.append(options("group", vals.group, st.group));
    box.append(options("status", vals.status, st.status));
    if (m.labels.length) box.append(options("label", m.labels, st.label));
    if (vals.agree.length) box.append(options("agree", vals.agree, st.agree));
    if (S.meta.compare) box.append(options("changed", ["changed", "same"], st.changed));
    const q = $("#q"); if (document.activeElement !== q) q.value = st.q || "";
  }
  function renderHead(st) {
    const tr = el("tr");
    const sort = sortOf(st) || "id";  // unsorted: record-id order, said on its column
    for (const [c, name, opt] of columns()) {
      const key = SORT_BY[c] || c, on = sort === key, dir = on ? (st.dir === "desc" ? " ↓" : " ↑") : null;
      const b = el("button", { type: "button", "data-sort": key, "data-dir": dir, "aria-label": "sort by " + name, text: name });
      b.addEventListener("click", () => go({ sort: key, dir: on && st.dir !== "desc" ? "desc" : "asc" }));
      tr.append(el("th", { class: opt || null, "data-col": c, "aria-sort": on ? (st.dir === "desc" ? "descending" : "ascending") : null }, b));
    }
    tr.setAttribute("aria-rowindex", 1);
    $("#table thead").replaceChildren(tr);
  }
  function rowOf(r, i, st, cols, m) {
    const tr = el("tr", { class: [cell(r, "agree"), S.meta.compare ? cell(r, "changed") : ""].join(" ").trim() || null, "data-rec": cell(r, "rec"), "aria-rowindex": i + 2 });
    for (const [c, , opt] of cols) {
      const v = cell(r, c), num = typeof v === "number" || c === "cost_text";
      const td = el("td", { class: [opt, num ? "num" : "", c === "reason" ? "reason" : "", c === "agree" ? "agree" : ""].join(" ").trim() || null });
      if (c === "id") td.append(el("a", { href: hashOf(Object.assign({}, st, { record: cell(r, "rec") })), text: String(v) }));
      else { td.textContent = fmt(v, c); if (c === "reason") td.title = fmt(v, c); if (c === "cost_text" && costTitle(fmt(v, c), m)) td.title = costTitle(fmt(v, c), m); }
      tr.append(td);
    }
    return tr;
  }
  // the rows [lo, hi) of the view drawn: rows still in the window are kept (a focused link keeps its focus),
  // the others dropped, the new ones added at either end; the spacers sized for the rows not drawn
  function drawWindow(lo, hi) {
    const body = $("#table tbody"), st = S.state, cols = columns(), m = S.meta.metrics[st.m];
    for (const [i, tr] of W.drawn) if (i < lo || i >= hi) { tr.remove(); W.drawn.delete(i); }
    const before = document.createDocumentFragment(), after = document.createDocumentFragment();
    for (let i = lo; i < hi; i++) {
      if (W.drawn.has(i)) continue;
      const tr = rowOf(S.view[i], i, st, cols, m);
      W.drawn.set(i, tr);
      (i < W.lo ? before : after).append(tr);
    }
    body.prepend(before); body.append(after);
    W.lo = lo; W.hi = hi;
    // a spacer only where rows are not drawn (a view that fits its window lays out as a plain table)
    body.toggleAttribute("data-above", lo > 0);
    body.toggleAttribute("data-below", hi < S.view.length);
    body.style.setProperty("--above", lo * W.rowH + "px");
    body.style.setProperty("--below", (S.view.length - hi) * W.rowH + "px");
  }
  // the rows on screen (from the table's place on the page and the row height), and MARGIN more each side
  function wanted(focus) {
    const n = S.view.length, h = W.rowH || 30;
    const top = $("#table tbody").getBoundingClientRect().top;  // where row 0 is (the spacer above counts)
    let a = Math.max(0, Math.floor(-top / h)), b = Math.max(a + 1, Math.ceil((window.innerHeight - top) / h));
    // a focused row off screen: a screenful ending (or starting) at it, where the browser will scroll to show it
    if (focus !== undefined && focus >= b) { a = focus + 1 - (b - a); b = focus + 1; }
    else if (focus !== undefined && focus < a) { b = focus + (b - a); a = focus; }
    return [Math.max(0, Math.min(n, a - MARGIN)), Math.max(0, Math.min(n, b + MARGIN))];
  }
  function rowHeight() {
    // one row's height (rows are one line: white-space nowrap), from the rows drawn
    const rows = $("#table tbody").rows;
    if (!$("#list").hidden && rows.length) W.rowH = (rows[rows.length - 1].getBoundingClientRect().bottom - rows[0].getBoundingClientRect().top) / rows.length;
  }
  function lockWidths() {
    // before the window first moves in a view: the columns' widths kept from narrowing as rows come and go
    // (a wider cell still widens its column; the reason column takes what is left)
    if (W.widths.length) return;
    for (const th of $("#table thead").rows[0].cells) {
      const w = th.getBoundingClientRect().width;
      W.widths.push(w);
      if (th.dataset.col !== "reason") th.style.minWidth = w + "px";
    }
  }
  function renderRows() {
    // a new view (filter, sort, metric): drawn anew around the current scroll position; the row height is
    // measured on the first (the browser lays the page out once, for the frame)
    const body = $("#table tbody");
    body.replaceChildren(); W.drawn = new Map(); W.widths = []; W.lo = W.hi = 0;
    $("#table").setAttribute("aria-rowcount", S.view.length + 1);
    drawWindow(...wanted());
    if (!W.rowH) { rowHeight(); drawWindow(...wanted()); }
    const st = S.state;
    $("#count").textContent = S.view.length + " of " + S.all.length + " records" + (st.q ? " matching “" + st.q + "”" : "");
  }
  function follow(focus) {
    // the window moved with the page (scroll, resize) or the focus (a row's link, Tab or the arrows)
    if ($("#list").hidden || !S.view.length) return;
    if (!W.rowH) rowHeight();
    const [lo, hi] = wanted(focus);
    if (lo < W.lo || hi > W.hi || (focus === undefined && (lo > W.lo + MARGIN || hi < W.hi - MARGIN))) {
      lockWidths();
      drawWindow(lo, hi);
    }
  }
  function onScroll() {
    if (W.queued) return;
    W.queued = true;
    requestAnimationFrame(() => { W.queued = false; follow(); });
  }
  function rowIndex(node) {
    const tr = node && node.closest && node.closest("#table tbody tr");
    return tr ? parseInt(tr.getAttribute("aria-rowindex"), 10) - 2 : -1;
  }
  function focusRow(i) {
    // move to the i-th row of the view (drawing it first) and focus its record link
    if (i < 0 || i >= S.view.length) return;
    follow(i);
    const tr = W.drawn.get(i), a = tr && tr.querySelector("a");
    if (a) a.focus();
  }
  function onScreen(tr) { const b = tr.getBoundingClientRect(); return b.top >= 0 && b.bottom <= window.innerHeight; }
  function scrollToRow(i) {
    const top = $("#table tbody").getBoundingClientRect().top + window.scrollY + i * (W.rowH || 30);
    window.scrollTo(0, Math.max(0, top - window.innerHeight / 3));
    follow();
  }
  async function showList(st) {
    $("#record").hidden = true; $("#list").hidden = false;
    S.all = await metricRows(st.m);
    if (st.q) { $("#count").textContent = "searching the records' text …"; await allRecords(); }
    const t0 = performance.now();
    S.view = sortRows(S.all.filter(predicate(st)), sortOf(st), st.dir);
    if (S.filtersFor !== st.m) { renderFilters(st); S.filtersFor = st.m; } else syncFilters(st);
    renderHead(st); renderRows();
    const back = S.back; S.back = undefined;  // back from a record: its row drawn, on screen and focused
    const at = back === undefined ? -1 : S.view.findIndex((r) => String(cell(r, "rec")) === String(back));
    if (at >= 0) { const tr = W.drawn.get(at); if (!tr || !onScreen(tr)) scrollToRow(at); focusRow(at); }
    window.GREVAL_LAST = { filter_ms: performance.now() - t0, shown: S.view.length, drawn: W.drawn.size };
    document.body.dataset.ready = "list";
  }

  // ------------------------------------------------------------------------------------------------ a record
  const ORDER = ["question", "expected_answer", "answer", "chunks", "triples", "turns", "trajectory", "expected_trajectory"];
  function fieldBlock(name, value) {
    const box = el("div", { class: "field", "data-field": name }, el("h3", { text: name.replace(/_/g, " ") }));
    box.append(el("div", { text: typeof value === "string" ? value : JSON.stringify(value, null, 2) }));
    return box;
  }
  function itemText(it) {
    if ("text" in it) return String(it.text);
    if ("subject" in it) return [it.subject, it.predicate, it.object].map(String).join(" — ");
    if ("content" in it) return (it.role ? it.role + ": " : "") + String(it.content);
    return JSON.stringify(it);
  }
  // an item's verdict (v: [item id, verdict, reason, status, samples]) and its people's labels, beside the item
  function itemSide(v, humans, id) {
    const said = humans.filter((h) => String(h[0]) === id).map((h) => h[1] + ": " + h[2]);
    return el("div", { class: "side" }, v ? el("div", { class: "verdict", text: "judge: " + v[1] + (v[3] !== "ok" ? " (" + v[3] + ")" : "") }) : null,
      v && v[2] ? el("div", { class: "note", text: v[2] }) : null,
      v && v[4] && v[4].length ? el("div", { class: "note samples", text: "samples: " + v[4].map(sampleText).join("; ") }) : null,
      said.length ? el("div", { class: "human", text: "human — " + said.join("; ") }) : null);
  }
  function itemsBlock(name, list, row) {
    const byItem = Object.fromEntries((cell(row, "items") || []).map((x) => [String(x[0]), x]));
    const humans = cell(row, "humans") || [];
    const ol = el("ol", { class: "items" });
    for (const it of list) {
      const id = String(it.id ?? "");
      ol.append(el("li", { "data-item": id }, el("div", {}, el("span", { class: "id", text: id }), " ", el("span", { text: itemText(it) })), itemSide(byItem[id], humans, id)));
    }
    return el("div", { class: "field", "data-field": name }, el("h3", { text: name + " (" + list.length + ")" }), ol);
  }
  // a trajectory (greval's steps {id, kind, …}): numbered, tool calls as code, tool results folded, each agent
  // step with its verdicts (a judged metric's item is the step id, a computed one's "step:<id>") and labels
  const KIND = { user: "user", system: "system", assistant: "agent message", tool_call: "tool call", tool_result: "tool result", final_answer: "final answer" };
  function isTrajectory(v) { return Array.isArray(v) && v.length > 0 && v.every((s) => s && typeof s === "object" && "kind" in s && "id" in s); }
  function stepText(v) { return v === null || v === undefined ? "" : typeof v === "string" ? v : JSON.stringify(v, null, 2); }
  function stepHead(s, n) {
    const head = el("span", { class: "step-head" }, el("span", { class: "n", text: "Step " + n }), " · " + (KIND[s.kind] || String(s.kind).replace(/_/g, " ")));
    if (s.kind === "tool_call") head.append(" ", el("code", { class: "tool", text: String(s.name ?? "") }));
    if (s.kind === "tool_result" && s.name) head.append(" (" + s.name + ")");
    head.append(" ", el("span", { class: "id", text: String(s.id) + (s.call_id ? " · call " + s.call_id : "") }));
    return head;
  }
  function stepBody(s, n) {
    if (s.kind === "tool_call") {
      const bad = s.arguments_error || typeof s.arguments === "string";
      const args = bad ? String(s.arguments ?? "") : JSON.stringify(s.arguments ?? {}, null, 2);
      return el("div", {}, stepHead(s, n), el("pre", { class: "args" }, el("code", { text: args })),
        s.arguments_error ? el("div", { class: "note", text: "arguments " + s.arguments_error }) : null);
    }
    if (s.kind === "tool_result") return el("details", {}, el("summary", {}, stepHead(s, n)), el("pre", { class: "result", text: stepText(s.content) }));
    return el("div", {}, stepHead(s, n), el("div", { class: "content", text: stepText(s.content) }));
  }
  function trajectoryBlock(name, steps, row) {
    const byItem = Object.fromEntries((cell(row, "items") || []).map((x) => [String(x[0]).replace(/^step:/, ""), x]));
    const humans = (cell(row, "humans") || []).map((h) => [String(h[0] ?? "").replace(/^step:/, "")].concat(h.slice(1)));
    const ol = el("ol", { class: "steps" });
    steps.forEach((s, i) => {
      const id = String(s.id), v = byItem[id], side = itemSide(v, humans, id);
      const sided = side.childNodes.length > 0;  // a step nobody judged takes the whole width
      ol.append(el("li", { "data-step": id, "data-kind": s.kind, class: [v ? "judged" : "", sided ? "sided" : ""].join(" ").trim() || null }, stepBody(s, i + 1), sided ? side : null));
    });
    return el("div", { class: "field", "data-field": name }, el("h3", { text: name.replace(/_/g, " ") + " (" + steps.length + " steps)" }), ol);
  }
  function sampleText(s) {
    if (s === null || s === undefined) return "";
    if (typeof s !== "object") return String(s);
    const said = s.label ?? s.value ?? "";
    return String(said) + (s.reason ? " — " + s.reason : "");
  }
  function verdictBlock(st, row) {
    const m = S.meta.metrics[st.m];
    const box = el("section", { class: "judge", "aria-label": "the judge's verdict" }, el("h2", { text: S.meta.compare ? "A: " + S.meta.compare[0] : "Verdict — " + m.name }));
    const agree = cell(row, "agree");
    box.append(el("p", {}, el("span", { class: "verdict", text: cell(row, "verdict") || "(no verdict)" }),
      cell(row, "score") !== null ? " · score " + fmt(cell(row, "score"), "score") : "",
      " · " + cell(row, "status"), agree ? " " : "", agree ? el("span", { class: "badge " + agree, text: agree + " with people" }) : null));
    // a per-item metric's headline is its items' verdicts counted (each item's reason is under the item)
    box.append(el("div", { class: "field", "data-field": "reason" }, el("h3", { text: m.many ? "the items' verdicts" : "reason" }), el("div", { text: cell(row, "reason") || "—" })));
    const spent = [];
    if (cell(row, "tokens")) spent.push(cell(row, "tokens") + " tokens");
    if (cell(row, "latency_ms")) spent.push(cell(row, "latency_ms") + " ms");
    const cost = cell(row, "cost_text");
    if (cost) spent.push("cost " + cost + (costTitle(cost, m) ? " (" + costTitle(cost, m) + ")" : ""));
    if (spent.length) box.append(el("p", { class: "note", "data-field": "cost", text: "The judge's calls: " + spent.join(" · ") }));
    const samples = cell(row, "samples");
    if (samples && samples.length) box.append(el("div", { class: "field", "data-field": "samples" }, el("h3", { text: "the judge's " + samples.length + " samples" }), el("div", { text: samples.map(sampleText).join("\n") })));
    const humans = cell(row, "humans") || [];
    if (humans.length) {
      // a record-level metric's labels have no item: no column of blanks
      const items = m.many || humans.some((h) => h[0] !== "" && h[0] !== null && h[0] !== undefined);
      const head = (items ? ["item"] : []).concat(["annotator", "human label", "comment"]);
      const t = el("table", { class: "humans" }, el("tr", {}, ...head.map((x) => el("th", { text: x }))));
      for (const h of humans) t.append(el("tr", {}, ...(items ? h : h.slice(1)).map((x) => el("td", { text: String(x ?? "") }))));
      box.append(el("h3", { text: "Human labels" }), t);
    } else box.append(el("p", { class: "note", text: "No human label." }));
    const counts = el("p", { class: "note" }, "Counts in: ");
    const links = [["its metric", {}], ["status " + cell(row, "status"), { status: cell(row, "status") }]];
    if (cell(row, "system")) links.push([S.meta.metrics[st.m].system_column + " " + cell(row, "system"), { system: cell(row, "system") }]);
    for (const lab of cell(row, "labels") || []) links.push([m.labels.length ? "label " + lab : "value " + lab, m.labels.length ? { label: lab } : { value: lab }]);
    if (agree) links.push([agree + "ments", { agree: agree }]);
    links.forEach(([t, f], i) => { if (i) counts.append(" · "); counts.append(el("a", { href: hashOf(Object.assign({ m: st.m }, f)), text: t })); });
    box.append(counts);
    return box;
  }
  function otherBlock(row) {
    const [a, b] = S.meta.compare, ch = cell(row, "changed");
    const box = el("section", { class: "judge other", "aria-label": "side B's verdict" }, el("h2", { text: "B: " + b }));
    box.append(el("p", {}, el("span", { class: "verdict", text: cell(row, "verdict_b") || "(no verdict)" }),
      cell(row, "score_b") !== null && cell(row, "score_b") !== undefined ? " · score " + fmt(cell(row, "score_b"), "score") : "",
      " · " + (cell(row, "status_b") || "not judged"), " ", el("span", { class: "badge " + (ch === "changed" ? "disagree" : "agree"), text: ch ? ch + " from A (" + a + ")" : "not on side B" })));
    box.append(el("div", { class: "field", "data-field": "reason_b" }, el("h3", { text: "reason" }), el("div", { text: cell(row, "reason_b") || "—" })));
    return box;
  }
  // the messages the judge was sent, loaded when asked (data/p{m}.js: the static part, data/q{m}-{k}.js: records')
  function promptBlock(st, key) {
    const m = S.meta.metrics[st.m];
    const box = el("section", { class: "prompt", "aria-label": "the judge's prompt" }, el("h2", { text: "The prompt" }));
    if (m.prompt) { box.append(el("p", { class: "note", "data-prompt": "none", text: m.prompt })); return box; }
    const b = el("button", { type: "button", id: "show-prompt", text: "Show the prompt the judge was sent" });
    b.addEventListener("click", async () => {
      b.disabled = true; b.textContent = "loading the prompt …";
      try {
        const k = Math.floor(key / S.meta.records_per_chunk);
        await Promise.all([load("data/p" + st.m + ".js", "p" + st.m), load("data/q" + st.m + "-" + k + ".js", "q" + st.m + "-" + k)]);
        b.replaceWith(...promptCalls(st.m, (S.prompts[st.m] || {})[key]));
        const first = box.querySelector("h3"); if (first) first.focus();
        document.body.dataset.prompt = "shown";
      } catch (e) { b.replaceWith(el("p", { class: "note", text: String(e.message || e) })); }
    });
    box.append(el("p", { class: "note", text: "Exactly the messages sent to the judge for this record, rebuilt by greval's prompt code from the stored metric version, record and calls." }), b);
    return box;
  }
  function promptCalls(m, calls) {
    if (calls === undefined || (Array.isArray(calls) && !calls.length)) return [el("p", { class: "note", "data-prompt": "none", text: "No call to the judge is recorded for this record (it was not asked: skipped, or its inputs or dependencies were missing)." })];
    if (typeof calls === "string") return [el("p", { class: "note", "data-prompt": "none", text: calls })];
    return calls.map(([method, items, user, n], i) => {
      const head = "Call " + (i + 1) + " of " + calls.length + " · " + method + (items.length ? " · items " + items.join(", ") : "") + (n > 1 ? " · sent " + n + " times" : "");
      const box = el("div", { class: "call", "data-call": i }, el("h3", { tabindex: "-1", text: head }));
      for (const msg of [...S.statics[m][method], { role: "user", content: user }]) {
        box.append(el("div", { class: "msg", "data-role": msg.role }, el("div", { class: "role", text: msg.role }), el("pre", { text: msg.content })));
      }
      return box;
    });
  }
  async function showRecord(st) {
    const rows = await metricRows(st.m);
    // "id:ID": the record whose id is ID (how the report's reviewers page links a record); else its number
    const named = String(st.record).startsWith("id:") ? rows.find((r) => String(cell(r, "id")) === st.record.slice(3)) : undefined;
    const key = named ? cell(named, "rec") : parseInt(st.record, 10);
    const row = rows.find((r) => cell(r, "rec") === key);
    await recordChunk(key);
    const rec = S.records[key];
    const box = $("#record");
    $("#list").hidden = true; box.hidden = false;
    if (!row || !rec) { box.replaceChildren(el("p", { text: "No such record for this metric." })); return; }
    const back = el("a", { href: hashOf(Object.assign({}, S.state, { record: "" })), id: "back", text: "← back to the table (Esc)" });
    const fields = el("section", { class: "read", "aria-label": "what the judge read" }, el("h2", { text: "What the judge read" }));
    const f = rec.fields || {};
    const names = ORDER.filter((n) => n in f).concat(Object.keys(f).filter((n) => !ORDER.includes(n)));
    for (const n of names) {
      const v = f[n];
      if (isTrajectory(v)) fields.append(trajectoryBlock(n, v, row));
      else if (Array.isArray(v) && v.length && typeof v[0] === "object" && v[0] !== null && "id" in v[0]) fields.append(itemsBlock(n, v, row));
      else fields.append(fieldBlock(n, v));
    }
    const judged = [el("div", {}, verdictBlock(st, row), promptBlock(st, key))];
    if (S.meta.compare) judged.push(otherBlock(row));
    box.replaceChildren(back, el("h2", { text: "Record " + rec.id }), el("div", { class: "pair" }, fields, ...judged));
    document.title = "greval — " + rec.id;
    back.focus();
    document.body.dataset.ready = "record";
  }

  // ------------------------------------------------------------------------------------------------ wiring
  async function route() {
    if (location.hash === S.routed) return;  // once per address (navigate and hashchange may both ask)
    S.routed = location.hash;
    const was = S.state.record;
    S.state = readHash();
    if (was !== undefined && was !== "" && !(S.state.record !== undefined && S.state.record !== "")) S.back = was;
    document.body.dataset.ready = "";
    if (S.navFor !== S.state.m) {  // what depends on the metric alone is drawn when it changes
      renderNav(S.state); renderFigures(S.state);
      $("#title").textContent = S.meta.metrics[S.state.m].name;
      S.navFor = S.state.m;
    }
    try {
      if (S.state.record !== undefined && S.state.record !== "") await showRecord(S.state);
      else await showList(S.state);
    } catch (e) { $("#count").textContent = String(e.message || e); }
  }
  function start() {
    const priced = S.meta.metrics.some((m) => m.figures.cost && m.figures.cost !== "—");
    $("#store").textContent = "store " + S.meta.store + " · " + S.meta.records + " records" + (priced ? " · costs at " + S.meta.prices : "");
    let timer = null;
    $("#q").addEventListener("input", (e) => { clearTimeout(timer); timer = setTimeout(() => go({ q: e.target.value }), 150); });
    $("#clear").addEventListener("click", () => navigate(hashOf({ m: S.state.m })));
    window.addEventListener("hashchange", route);
    window.addEventListener("scroll", onScroll, { passive: true });
    window.addEventListener("resize", () => {
      W.rowH = 0; W.widths = [];
      for (const th of $("#table thead").rows[0]?.cells || []) th.style.minWidth = "";
      onScroll();
    });
    // Tab (or a click) onto a row's link draws the rows around it first, so the next Tab finds the next row;
    // the arrow keys move between the rows' links
    $("#table tbody").addEventListener("focusin", (e) => { const i = rowIndex(e.target); if (i >= 0) follow(i); });
    $("#table tbody").addEventListener("keydown", (e) => {
      const i = rowIndex(e.target);
      if (i < 0 || e.altKey || e.ctrlKey || e.metaKey) return;
      const to = { ArrowDown: i + 1, ArrowUp: i - 1, Home: 0, End: S.view.length - 1 }[e.key];
      if (to === undefined) return;
      e.preventDefault();
      focusRow(Math.max(0, Math.min(S.view.length - 1, to)));
    });
    document.addEventListener("keydown", (e) => {
      const typing = /INPUT|SELECT|TEXTAREA/.test((e.target && e.target.tagName) || "");
      if (e.key === "/" && !typing) { e.preventDefault(); $("#q").focus(); }
      else if (e.key === "Escape" && S.state.record) go({ record: "" });
      else if (!typing && (e.key === "j" || e.key === "k") && S.view.length) {
        const at = S.view.findIndex((r) => String(cell(r, "rec")) === String(S.state.record));
        const next = S.view[Math.max(0, Math.min(S.view.length - 1, at + (e.key === "j" ? 1 : -1)))];
        if (next) go({ record: cell(next, "rec") });
      }
    });
    route();
  }
})();
