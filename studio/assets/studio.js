// harness studio: one page, no dependencies. It reads the JSON API with the
// token from its URL and follows the store over server-sent events.
'use strict';

// The token comes in the URL the studio printed. It is kept in this tab's
// session storage and taken out of the address bar at once, so that it is
// neither in the history, nor in a link copied from the page, nor in what
// a bookmark or a screenshot shows; a reload finds it in the storage.
const token = (() => {
  const key = 'harness-studio-token ' + location.pathname;
  const params = new URLSearchParams(location.search);
  const given = params.get('token');
  if (given === null) {
    try { return sessionStorage.getItem(key) || ''; } catch (_) { return ''; }
  }
  try { sessionStorage.setItem(key, given); } catch (_) { /* kept for this page only */ }
  params.delete('token');
  const rest = params.toString();
  history.replaceState(null, '', location.pathname + (rest ? '?' + rest : '') + location.hash);
  return given;
})();
const $ = (sel) => document.querySelector(sel);
const SVG = 'http://www.w3.org/2000/svg';

const ui = {
  info: null,
  sessions: new Map(),
  next: null, // the `after` of the list's next page (percent-encoded); null at its end
  filter: { q: '', phase: '' }, // what the list was asked for: `q` lower case
  listRun: 0, // counts the list's first pages asked for: later answers win
  listing: false, // a first page is being asked for
  loadingMore: false,
  selected: null,
  detail: null,
  timeline: null,
  seq: null, // the checkpoint whose state is shown; null: the latest
  offset: null, // the timeline's page: its first entry; null: the last page
  picked: null, // the graph node of that checkpoint's step
  stateSeq: null, // the checkpoint of the state shown, for opening what was cut
  // Loads of the session shown and of its state are numbered: the answer
  // of one that a later one overtook is dropped, so that it never
  // replaces what the later one showed.
  sessionRun: 0,
  stateRun: 0,
  timelineRun: 0,
  loading: false, // the latest load of the session shown is under way
  shown: null, // the session whose panels are drawn; null: none (or cleared)
  // The session whose latest load failed: `{ id, version, gone }`, with
  // the newest version known when it was asked for, and whether it is
  // damaged or not found. The stream loads one gone again only for a newer
  // version (not at each of its events, its error blinking); one that
  // failed otherwise (the network, the store out of reach) at its next
  // event.
  failed: null,
};

// A call of the JSON API: its data and the response (for its headers).
async function call(path, options = {}) {
  const headers = { 'x-studio-token': token };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(path, { method: options.method || 'GET', headers, body: options.body });
  let data;
  try { data = await response.json(); } catch (_) { data = { error: response.statusText }; }
  if (!response.ok) {
    const error = new Error(data.error || response.statusText);
    error.status = response.status;
    // `damaged`: a record of the store does not read (the session's log
    // is broken, say); `parameter`, `route`, …
    error.kind = data.kind || null;
    // A refused tool-approval answer names each call's problem.
    error.problems = Array.isArray(data.problems) ? data.problems : [];
    throw error;
  }
  return { data, response };
}

async function api(path, options = {}) {
  return (await call(path, options)).data;
}

// Characters that change how text around them reads without showing
// themselves: controls, formatting (bidi embeddings, overrides and
// isolates, zero-width spaces and joiners, marks), line and paragraph
// separators. Text a model wrote could reorder the studio's own words
// with them (an approval's "always allow (…)"); they are shown as \uXXXX.
// Line feeds and tabs stay: they show as what they are.
const INVISIBLE = /(?![\n\t])[\p{Cc}\p{Cf}\p{Zl}\p{Zp}]/gu;

function visible(text) {
  if (typeof text !== 'string') return text;
  return text.replace(INVISIBLE, (c) => {
    const hex = c.codePointAt(0).toString(16).toUpperCase();
    return hex.length <= 4 ? '\\u' + hex.padStart(4, '0') : '\\u{' + hex + '}';
  });
}

// Text from the store (a model's, a step's, an error's) is always set as
// text, never markup, with its invisible characters shown; the stylesheet
// isolates each element holding it from the text around it (`m` wraps it
// inside a sentence of the studio's own words).
function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = visible(v);
    else if (k === 'title') node.setAttribute(k, visible(v));
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(visible(c));
  return node;
}

/** Text a model or a store wrote, inside a sentence of the studio's. */
const m = (text) => el('bdi', { text: String(text) });

/** Sets a node's text from the store. */
function setText(node, text) {
  node.textContent = visible(text);
}

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
  return node;
}

function ago(ms) {
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + ' s ago';
  if (s < 3600) return Math.round(s / 60) + ' min ago';
  if (s < 86400) return Math.round(s / 3600) + ' h ago';
  return new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
}

const compact = (v) => visible(JSON.stringify(v));

// ---- JSON as a tree ----

// A large state comes cut: the server lists each cut by its JSON pointer
// in `cuts` (a value: its beginning and size; an array or object: how
// many of its entries were sent). Each opens on demand: the value at its
// pointer, or the entries after those shown.

/** A key as a JSON pointer's segment. */
const segment = (key) => '/' + String(key).replace(/~/g, '~0').replace(/\//g, '~1');

/** The cuts of an answer, by pointer. */
const cutMap = (cuts) => new Map((Array.isArray(cuts) ? cuts : []).map((c) => [c.pointer, c]));

function leaf(value) {
  const type = value === null ? 'null' : typeof value;
  return el('span', { class: 't-' + type, text: compact(value) });
}

/** The value at `pointer` in the state shown (entries from `offset`). */
function stateAt(pointer, offset) {
  const params = new URLSearchParams({ seq: String(ui.stateSeq), pointer });
  if (offset) params.set('offset', String(offset));
  return api(`/api/sessions/${encodeURIComponent(ui.selected)}/state?` + params);
}

/** A value cut: its beginning and size, and (once) a way to see more. */
function cutValue(cut, openable) {
  const box = el('span', { class: 'cut', 'data-pointer': cut.pointer },
    el('span', { class: 'preview', text: cut.preview + '\u2026' }),
    ` (${cut.bytes.toLocaleString()} bytes, cut) `);
  if (openable) {
    const more = el('button', { type: 'button', class: 'open-cut', text: 'show more' });
    more.addEventListener('click', async () => {
      try {
        const r = await stateAt(cut.pointer);
        const cuts = cutMap(r.cuts);
        const again = cuts.get(cut.pointer);
        if (again && again.kind === 'value') box.replaceWith(cutValue(again, false));
        else if (r.value !== null && typeof r.value === 'object') box.replaceWith(tree(r.value, cut.pointer, cuts));
        else box.replaceWith(leaf(r.value));
      } catch (e) {
        setText($('#session-error'), e.message);
      }
    });
    box.append(more);
  }
  return box;
}

/** The entries of the array or object at `pointer` past those shown. */
function moreEntries(pointer, cut, ul) {
  const left = cut.total - cut.offset - cut.kept;
  const li = el('li', { class: 'cut', 'data-pointer': pointer },
    el('span', { class: 'muted', text: `\u2026 ${left.toLocaleString()} more of ${cut.total.toLocaleString()} (cut) ` }));
  const more = el('button', { type: 'button', class: 'open-cut', text: 'show more' });
  more.addEventListener('click', async () => {
    try {
      const r = await stateAt(pointer, cut.offset + cut.kept);
      const cuts = cutMap(r.cuts);
      const entries = Array.isArray(r.value)
        ? r.value.map((v, i) => [String(i + r.offset), v])
        : Object.entries(r.value || {});
      li.replaceWith(...entries.map(([k, v]) => treeItem(k, v, pointer + segment(k), cuts)));
      const again = cuts.get(pointer);
      if (again && again.kind === 'entries' && again.offset + again.kept < again.total) ul.append(moreEntries(pointer, again, ul));
    } catch (e) {
      setText($('#session-error'), e.message);
    }
  });
  li.append(more);
  return li;
}

function treeItem(key, value, pointer = '', cuts = new Map()) {
  const li = el('li');
  const label = key === null ? [] : [el('span', { class: 'k', text: key }), ': '];
  const cut = cuts.get(pointer);
  if (cut && cut.kind === 'value') {
    li.append(...label, cutValue(cut, true));
  } else if (value !== null && typeof value === 'object') {
    const first = cut && cut.kind === 'entries' ? cut.offset : 0;
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i + first), v]) : Object.entries(value);
    const count = cut && cut.kind === 'entries' ? cut.total : entries.length;
    const brackets = Array.isArray(value) ? `[${count}]` : `{${count}}`;
    const details = el('details');
    details.open = entries.length <= 20;
    details.append(el('summary', {}, ...label, el('span', { class: 'muted', text: brackets })));
    const ul = el('ul');
    for (const [k, v] of entries) ul.append(treeItem(k, v, pointer + segment(k), cuts));
    if (cut && cut.kind === 'entries' && cut.offset + cut.kept < cut.total) ul.append(moreEntries(pointer, cut, ul));
    details.append(ul);
    li.append(details);
  } else {
    li.append(...label, leaf(value));
  }
  return li;
}

/** `value` as a tree; `pointer` is where it is in an answer with `cuts`. */
function tree(value, pointer = '', cuts = new Map()) {
  return el('ul', {}, treeItem(null, value, pointer, cuts));
}

// ---- sessions ----

function phaseBadge(phase) {
  const names = { waiting: 'waiting for a human' };
  return el('span', { class: 'phase phase-' + phase, text: names[phase] || phase });
}

// Whether a session passes the list's filter: the server's rules
// (`Summary::matches`), for the sessions the event stream sends. `q` is
// lower case and trimmed; each field is matched as sent (secrets
// replaced), lower-cased.
function matches(s, q) {
  return [s.id, s.agent, s.phase, s.next_step, s.detail]
    .some((x) => x && x.toLowerCase().includes(q));
}

// A session whose head does not read (`unreadable`) passes every filter,
// as on the server: whether it matches cannot be told.
function listed(s) {
  if (s.unreadable) return true;
  const { q, phase } = ui.filter;
  return (!phase || s.phase === phase) && (!q || matches(s, q));
}

// A session whose head does not read: its id and the store's error, first
// in the list, with nothing to pick (its timeline does not read either).
function unreadableRow(s) {
  return el('tr', { class: 'unreadable', 'data-id': s.id, 'data-unreadable': 'true' },
    el('td', { class: 'id', title: s.id, text: s.id.slice(0, 8) }),
    el('td', { colspan: '4', class: 'unreadable-error' },
      el('span', { class: 'phase phase-unreadable', text: 'unreadable' }), ' ', m(s.error)));
}

function renderList() {
  const rows = [...ui.sessions.values()]
    .filter(listed)
    .sort((a, b) => (b.unreadable ? 1 : 0) - (a.unreadable ? 1 : 0)
      || (a.unreadable ? 0 : b.updated_at - a.updated_at) || a.id.localeCompare(b.id));
  const body = $('#sessions tbody');
  body.replaceChildren(...rows.map((s) => {
    if (s.unreadable) return unreadableRow(s);
    const tr = el('tr', { class: 'row' + (s.id === ui.selected ? ' selected' : ''), 'data-id': s.id, 'data-phase': s.phase },
      el('td', { class: 'id', title: s.id, text: s.id.slice(0, 8) }),
      el('td', { text: s.agent }),
      el('td', {}, phaseBadge(s.phase)),
      el('td', { text: String(s.steps) }),
      el('td', { class: 'muted', text: ago(s.updated_at) }));
    tr.addEventListener('click', () => select(s.id));
    return tr;
  }));
  const empty = $('#list-empty');
  empty.hidden = rows.length > 0;
  empty.textContent = ui.listing ? 'Looking\u2026'
    : ui.next ? 'No session matches among those looked at: load more to look further.'
      : 'No session matches.';
}

// The list's filter as the search box and the phase filter say.
function readFilter() {
  return { q: $('#search').value.trim().toLowerCase(), phase: $('#phase-filter').value };
}

// The first page of the list, or (`more`) the next, with the filter of
// the page before. The server filters (`q`, `phase`) and pages on the
// sessions' ids, and says in `x-next-after` where the next page starts.
// An answer to a request the list has moved on from (the filter changed
// since) is dropped.
async function loadList(more = false) {
  if (more && (!ui.next || ui.loadingMore)) return;
  const run = more ? ui.listRun : ++ui.listRun;
  const params = new URLSearchParams();
  if (ui.filter.q) params.set('q', ui.filter.q);
  if (ui.filter.phase) params.set('phase', ui.filter.phase);
  let query = params.toString();
  // The cursor comes percent-encoded.
  if (more) query += (query ? '&' : '') + 'after=' + ui.next;
  if (more) {
    ui.loadingMore = true;
    $('#list-more').disabled = true;
  } else {
    ui.next = null;
    ui.listing = true;
    $('#list-more').hidden = true;
  }
  try {
    const { data, response } = await call('/api/sessions' + (query ? '?' + query : ''));
    if (run !== ui.listRun) return;
    if (!more) ui.sessions = new Map();
    for (const s of data) ui.sessions.set(s.id, s);
    ui.next = response.headers.get('x-next-after');
    ui.listing = false;
    $('#list-more').hidden = !ui.next;
    $('#list-error').textContent = '';
    renderList();
  } catch (e) {
    if (run !== ui.listRun) return;
    ui.listing = false;
    setText($('#list-error'), e.message);
    renderList();
  } finally {
    if (more) {
      ui.loadingMore = false;
      $('#list-more').disabled = false;
    }
  }
}

// The search box (once typing pauses) and the phase filter ask the server
// again, from the first page.
const SEARCH_PAUSE_MS = 250;
let searchTimer = null;

function applyFilter() {
  clearTimeout(searchTimer);
  searchTimer = null;
  const filter = readFilter();
  if (filter.q === ui.filter.q && filter.phase === ui.filter.phase) return;
  ui.filter = filter;
  renderList();
  loadList();
}

// ---- the graph ----

// Lays out one loop (the run's, or a sub-agent's inside its box): layers
// by the longest path from its first node along forward transitions (a
// fork's join edge, and edges back to an earlier step, do not count), so
// that parallel branches sit side by side and their join below the
// longest. `size` gives each node's width and height.
function layoutLevel(ids, edges, entry, size) {
  const inLevel = new Set(ids);
  const isEnd = (i) => i === '$end' || i.endsWith('/$end');
  const out = new Map(ids.map((i) => [i, []]));
  for (const e of edges) {
    if (e.kind === 'join' || e.kind === 'enter') continue;
    if (inLevel.has(e.from) && inLevel.has(e.to) && !isEnd(e.to)) out.get(e.from).push(e.to);
  }
  // Depth-first from the entry: edges to a node on the stack go back.
  const back = new Set();
  const order = [];
  const state = new Map();
  const visit = (n) => {
    state.set(n, 1);
    for (const m of out.get(n)) {
      if (state.get(m) === 1) back.add(n + '\u0000' + m);
      else if (!state.has(m)) visit(m);
    }
    state.set(n, 2);
    order.push(n);
  };
  if (entry !== undefined && inLevel.has(entry)) visit(entry);
  const layer = new Map();
  if (entry !== undefined && inLevel.has(entry)) layer.set(entry, 0);
  for (const n of order.reverse()) {
    for (const m of out.get(n)) {
      if (back.has(n + '\u0000' + m) || !layer.has(n)) continue;
      layer.set(m, Math.max(layer.get(m) ?? 0, layer.get(n) + 1));
    }
  }
  for (const i of ids) if (!layer.has(i) && !isEnd(i)) layer.set(i, Math.min(1, layer.size));
  const last = Math.max(0, ...layer.values()) + 1;
  for (const i of ids) if (isEnd(i)) layer.set(i, last);
  const rows = [];
  for (const i of ids) (rows[layer.get(i)] ||= []).push(i);
  const gap = 36, vgap = 54;
  const widths = rows.map((r) => (r || []).reduce((w, i) => w + size.get(i).w + gap, -gap));
  const width = Math.max(160, ...widths);
  const pos = new Map();
  let y = 0;
  rows.forEach((r, l) => {
    if (!r) return;
    const h = Math.max(...r.map((i) => size.get(i).h));
    let x = (width - widths[l]) / 2;
    for (const i of r) {
      const s = size.get(i);
      pos.set(i, { x: x + s.w / 2, y: y + h / 2, w: s.w, h: s.h, layer: l });
      x += s.w + gap;
    }
    y += h + vgap;
  });
  return { pos, width, height: Math.max(0, y - vgap) };
}

function layout(graph) {
  const byParent = new Map();
  for (const n of graph.nodes) {
    const p = n.parent || '';
    if (!byParent.has(p)) byParent.set(p, []);
    byParent.get(p).push(n.id);
  }
  const size = new Map(graph.nodes.map((n) => {
    const round = n.kind === 'start' || n.kind === 'end';
    return [n.id, { w: round ? 56 : Math.max(90, n.label.length * 8 + 28), h: round ? 30 : 36 }];
  }));
  const pad = 14, title = 26;
  // Each sub-agent's box first: its loop laid out inside, the box sized
  // to hold it.
  const inner = new Map();
  for (const c of graph.clusters || []) {
    const ids = byParent.get(c.id) || [];
    if (!ids.length || !size.has(c.id)) continue;
    const enter = graph.edges.find((e) => e.kind === 'enter' && e.from === c.id);
    const l = layoutLevel(ids, graph.edges, enter ? enter.to : ids[0], size);
    const titleWidth = c.label.length * 7 + 2 * pad;
    l.width = Math.max(l.width, titleWidth);
    inner.set(c.id, l);
    size.set(c.id, { w: l.width + 2 * pad, h: l.height + 2 * pad + title });
  }
  const top = byParent.get('') || [];
  const root = layoutLevel(top, graph.edges, top.includes('$start') ? '$start' : top[0], size);
  const margin = { left: 90, top: 24, right: 150, bottom: 20 };
  const pos = new Map();
  for (const [id, p] of root.pos) pos.set(id, { ...p, x: p.x + margin.left, y: p.y + margin.top, level: '' });
  for (const [cid, l] of inner) {
    const box = pos.get(cid);
    if (!box) continue;
    const ox = box.x - box.w / 2 + pad + (box.w - 2 * pad - l.width) / 2;
    const oy = box.y - box.h / 2 + pad + title;
    for (const [id, p] of l.pos) pos.set(id, { ...p, x: p.x + ox, y: p.y + oy, level: cid });
  }
  return { pos, width: root.width + margin.left + margin.right, height: root.height + margin.top + margin.bottom };
}

function drawNode(n, p, cls) {
  const g = svg('g', { class: cls.join(' '), 'data-step': n.id });
  if (n.kind === 'start' || n.kind === 'end') {
    g.append(svg('ellipse', { cx: p.x, cy: p.y, rx: p.w / 2, ry: p.h / 2 }));
  } else if (n.kind === 'router') {
    const { x, y, w, h } = p;
    g.append(svg('polygon', { points: `${x - w / 2},${y} ${x},${y - h / 2 - 4} ${x + w / 2},${y} ${x},${y + h / 2 + 4}` }));
  } else {
    g.append(svg('rect', { x: p.x - p.w / 2, y: p.y - p.h / 2, width: p.w, height: p.h, rx: 6 }));
  }
  return g;
}

function drawGraph(detail) {
  const graph = detail.graph;
  const { pos, width, height } = layout(graph);
  const visited = new Set(detail.visited);
  const taken = new Set((detail.taken || []).map(([a, b]) => a + '\u0000' + b));
  const current = new Set();
  const waiting = new Set();
  for (const p of detail.positions || []) {
    if (!p.node) continue;
    current.add(p.node);
    if (p.waiting) waiting.add(p.node);
  }
  const forks = new Set(graph.edges.filter((e) => e.kind === 'branch' || e.kind === 'each').map((e) => e.from));
  const joins = new Set(graph.edges.filter((e) => e.kind === 'join').map((e) => e.to));
  const fanned = new Set(graph.edges.filter((e) => e.kind === 'each').map((e) => e.to));
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': 'the loop' });
  const defs = svg('defs');
  const marker = svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 10, markerHeight: 10, markerUnits: 'userSpaceOnUse', orient: 'auto-start-reverse' });
  marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#8793a0' }));
  defs.append(marker);
  root.append(defs);

  // Sub-agents' boxes (under everything), each holding its loop's nodes.
  const boxes = new Map();
  for (const n of graph.nodes) {
    if (n.kind !== 'sub-agent' || !pos.has(n.id)) continue;
    const p = pos.get(n.id);
    const cls = ['node', 'kind-sub-agent', 'cluster'];
    if (visited.has(n.id)) cls.push('visited');
    if (current.has(n.id)) cls.push('current');
    const g = drawNode(n, p, cls);
    const cluster = (graph.clusters || []).find((c) => c.id === n.id);
    const t = svg('text', { x: p.x - p.w / 2 + 10, y: p.y - p.h / 2 + 15, class: 'cluster-title' });
    setText(t, cluster ? cluster.label : n.label);
    g.append(t);
    root.append(g);
    boxes.set(n.id, g);
  }

  let right = 0, left = 0;
  for (const e of graph.edges) {
    if (e.kind === 'enter') continue; // the box holds its first step
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const cls = ['edge', 'kind-' + e.kind];
    if (taken.has(e.from + '\u0000' + e.to)) cls.push('taken');
    const g = svg('g', { class: cls.join(' '), 'data-from': e.from, 'data-to': e.to });
    let d, lx, ly;
    if (e.kind === 'join') {
      // From the forking step to its join, around the left of the branches.
      left += 1;
      const x1 = a.x - a.w / 2, y1 = a.y, x2 = b.x - b.w / 2, y2 = b.y;
      let leftmost = Math.min(x1, x2);
      for (const p of pos.values()) {
        if (p.level === a.level && p.layer > a.layer && p.layer < b.layer) leftmost = Math.min(leftmost, p.x - p.w / 2);
      }
      const out = leftmost - 24 - 12 * left;
      d = `M${x1},${y1} C${out},${y1} ${out},${y2} ${x2 - 2},${y2}`;
      lx = out + 6; ly = (y1 + y2) / 2;
    } else if (a.level === b.level && b.layer > a.layer) {
      const x1 = a.x, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y - b.h / 2;
      d = `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`;
      lx = (x1 + x2) / 2; ly = (y1 + y2) / 2;
    } else {
      // Back to an earlier step (or a step beside it): around the right.
      right += 1;
      const x1 = a.x + a.w / 2, y1 = a.y, x2 = b.x + b.w / 2, y2 = b.y;
      const out = Math.max(x1, x2) + 30 + 18 * right;
      d = `M${x1},${y1} C${out},${y1} ${out},${y2} ${x2 + 2},${y2}`;
      lx = out - 10; ly = (y1 + y2) / 2;
    }
    g.append(svg('path', { d, 'marker-end': 'url(#arrow)' }));
    if (e.label) {
      const t = svg('text', { x: lx, y: ly + 4 });
      setText(t, e.label);
      const w = e.label.length * 6.5 + 8;
      g.append(svg('rect', { x: lx - w / 2, y: ly - 8, width: w, height: 15, rx: 3 }), t);
    }
    root.append(g);
  }
  for (const n of graph.nodes) {
    if (n.kind === 'sub-agent' || !pos.has(n.id)) continue;
    const p = pos.get(n.id);
    const cls = ['node', 'kind-' + n.kind];
    if (visited.has(n.id)) cls.push('visited');
    if (current.has(n.id)) cls.push('current');
    if (waiting.has(n.id)) cls.push('waiting');
    if (joins.has(n.id)) cls.push('join');
    if (forks.has(n.id)) cls.push('fork');
    if (fanned.has(n.id)) cls.push('fanned');
    const g = drawNode(n, p, cls);
    if (fanned.has(n.id)) {
      // A fan-out's step runs once per item: drawn as a stack.
      for (const k of [2, 1]) {
        g.prepend(svg('rect', { class: 'stack', x: p.x - p.w / 2 + 4 * k, y: p.y - p.h / 2 - 4 * k, width: p.w, height: p.h, rx: 6 }));
      }
    }
    if (forks.has(n.id)) g.append(svg('rect', { class: 'bar fork-bar', x: p.x - p.w / 2 - 6, y: p.y + p.h / 2 + 3, width: p.w + 12, height: 4 }));
    if (joins.has(n.id)) g.append(svg('rect', { class: 'bar join-bar', x: p.x - p.w / 2 - 6, y: p.y - p.h / 2 - 8, width: p.w + 12, height: 4 }));
    const t = svg('text', { x: p.x, y: p.y });
    setText(t, n.label);
    g.append(t);
    (n.parent && boxes.get(n.parent) || root).append(g);
  }
  $('#graph').replaceChildren(root);
  markPicked();
  $('#graph-source').textContent = (graph.source === 'declared'
    ? 'declared by the harness'
    : 'observed: what this session\u2019s checkpoints show')
    + '; blue: visited, orange: running or waiting now; bold: parallel branches, dashed: their join; a box: a sub-agent\u2019s loop';
}

// ---- a session ----

function renderDetail() {
  const d = ui.detail;
  const s = d.summary;
  $('#empty-pane').hidden = true;
  $('#session-pane').hidden = false;
  $('#session-pane').dataset.damaged = 'false';
  setText($('#session-id'), s.id);
  setText($('#session-agent'), s.agent);
  $('#phase').replaceChildren(phaseBadge(s.phase));
  $('#phase').dataset.phase = s.phase;
  $('#session-steps').textContent = String(s.steps);
  setText($('#session-next'), s.next_step || '—');
  $('#session-detail').replaceChildren(...(s.detail ? [s.phase === 'failed' ? 'error: ' : 'signal: ', m(s.detail)] : []));
  drawGraph(d);
  const waiting = $('#waiting-panel');
  if (d.interrupt) {
    const fresh = waiting.dataset.interrupt !== d.interrupt.id;
    waiting.hidden = false;
    waiting.dataset.interrupt = d.interrupt.id;
    $('#interrupt-step').replaceChildren('step ', m(d.interrupt.step), ', interrupt ', m(d.interrupt.id));
    const where = $('#interrupt-path');
    const path = d.interrupt.path || '';
    where.dataset.path = path;
    where.replaceChildren();
    if (path) {
      const sub = (d.positions || []).find((p) => p.waiting && p.node && p.node.includes('/'));
      where.append('asked inside ', pathTag(path, sub ? 'sub-agent' : 'branch'),
        ...(sub ? [' (the sub-agent run by step \u201c', m(sub.node.split('/')[0]), '\u201d)'] : [' (a parallel branch)']),
        '; the answer resumes the run there.');
    } else {
      where.textContent = 'asked by the run\u2019s own loop.';
    }
    const approval = d.writable && isApproval(d.interrupt.payload);
    $('#interrupt-payload').replaceChildren(approval
      ? el('details', {}, el('summary', { text: 'the request, as JSON' }), tree(d.interrupt.payload))
      : tree(d.interrupt.payload));
    $('#answer-form').hidden = !d.writable;
    $('#answer-readonly').hidden = d.writable;
    if (fresh) {
      $('#answer').value = '';
      $('#answer-error').textContent = '';
      $('#answer-status').textContent = '';
      $('#answer-submit').disabled = false;
      $('#answer-advanced').checked = false;
      $('#approval-calls').replaceChildren(...(approval ? d.interrupt.payload.calls.map(approvalRow) : []));
    }
    $('#approval').hidden = !approval;
    // The run refused this studio's last answer to it (after the request
    // was answered): why, where the answer's error goes.
    if (d.refused && d.refused.interrupt === d.interrupt.id) {
      setText($('#answer-error'), 'the run refused the answer: ' + d.refused.reason + '; it still waits: answer again');
      $('#answer-status').textContent = '';
      $('#answer-submit').disabled = false;
    }
    showAdvanced();
    const shape = $('#answer-shape');
    shape.replaceChildren();
    if (d.answer_shape) {
      shape.append('expected: ', el('code', { text: d.answer_shape.type }), ' ',
        el('details', {}, el('summary', { text: 'JSON schema' }), el('pre', { text: JSON.stringify(d.answer_shape.schema, null, 2) })));
    } else {
      shape.textContent = 'The expected shape was not declared: any JSON is sent; the step refuses an answer it cannot read, and asks again.';
    }
  } else {
    waiting.hidden = true;
    delete waiting.dataset.interrupt;
  }
  $('#journal').replaceChildren(tree(d.journal));
  $('#fork-form').hidden = !d.writable;
  if (d.update_schema && d.update_schema.properties) {
    setText($('#fork-fields'), 'fields of an update: ' + Object.keys(d.update_schema.properties).join(', '));
  }
}

// ---- tool approval: the agent kit's request, one decision per call ----

function isApproval(payload) {
  return !!payload && typeof payload === 'object' && payload.kind === 'tool_approval'
    && Array.isArray(payload.calls) && payload.calls.length > 0
    && payload.calls.every((c) => c && typeof c.call_id === 'string' && typeof c.tool === 'string');
}

/** Whether the form answers with the widget (not the raw JSON). */
function byWidget() {
  return !$('#approval').hidden && !$('#answer-advanced').checked;
}

function showAdvanced() {
  const widget = byWidget();
  $('#approval-calls').hidden = !widget;
  $('#raw-answer').hidden = widget;
}

const DECISIONS = [
  ['approve', 'approve'],
  ['always_allow', 'always allow'],
  ['edit', 'edit'],
  ['reject', 'reject'],
  ['correct', 'correct'],
];

const pretty = (v) => visible(JSON.stringify(v, null, 2));

function approvalRow(call, i) {
  const row = el('div', { class: 'call', 'data-call-id': call.call_id });
  const choices = el('div', { class: 'choices' });
  for (const [value, label] of DECISIONS) {
    const key = value === 'always_allow' && call.allow_key ? [' (', m(call.allow_key), ')'] : [];
    choices.append(el('label', { class: 'choice' },
      el('input', { type: 'radio', name: 'decision-' + i, value }), ' ' + label, ...key));
  }
  const edit = el('textarea', { class: 'call-edit', rows: '4', spellcheck: 'false' });
  edit.value = pretty(call.arguments);
  const schema = call.schema && typeof call.schema === 'object'
    ? el('details', {}, el('summary', { text: 'the tool\u2019s schema' }), el('pre', { text: pretty(call.schema) }))
    : '';
  const message = el('input', { class: 'call-message', type: 'text', autocomplete: 'off' });
  row.append(
    el('div', { class: 'call-head' },
      el('b', { class: 'call-tool', text: call.tool }), ' ',
      el('code', { class: 'call-id', text: call.call_id })),
    el('pre', { class: 'call-args', text: pretty(call.arguments) }),
    choices,
    el('div', { class: 'call-edit-box', hidden: '' },
      el('label', { text: 'arguments to run it with, as JSON' }), edit, schema),
    el('div', { class: 'call-message-box', hidden: '' },
      el('label', { class: 'call-message-label' }), message),
    el('p', { class: 'call-error error' }),
  );
  const clear = () => {
    row.querySelector('.call-error').textContent = '';
    $('#answer-error').textContent = '';
  };
  choices.addEventListener('change', () => {
    const d = chosen(row);
    row.dataset.decision = d;
    row.querySelector('.call-edit-box').hidden = d !== 'edit';
    row.querySelector('.call-message-box').hidden = d !== 'reject' && d !== 'correct';
    row.querySelector('.call-message-label').textContent = d === 'reject'
      ? 'why, for the model (optional)' : 'what the model should do instead';
    clear();
  });
  edit.addEventListener('input', clear);
  message.addEventListener('input', clear);
  return row;
}

function chosen(row) {
  const picked = row.querySelector('.choices input:checked');
  return picked ? picked.value : '';
}

/**
 * The decisions the widget shows, each checked as far as the page can: a
 * decision for every call, edited arguments as JSON matching the call's
 * schema where it is simple (the studio checks it fully). Returns the
 * answer, or null after writing each problem in its call's row.
 */
function widgetAnswer(calls) {
  const rows = [...document.querySelectorAll('#approval-calls .call')];
  const decisions = [];
  let ok = true;
  calls.forEach((call, i) => {
    const row = rows[i];
    const error = row.querySelector('.call-error');
    const fail = (text) => { setText(error, text); ok = false; };
    error.textContent = '';
    const d = chosen(row);
    if (!d) return fail('choose a decision for this call');
    const decision = { call_id: call.call_id, decision: d };
    if (d === 'edit') {
      let args;
      try {
        args = JSON.parse(row.querySelector('.call-edit').value);
      } catch (e) {
        return fail('the edited arguments are not JSON: ' + e.message);
      }
      const problems = schemaProblems(call.schema, args, '');
      if (problems.length) return fail('the edited arguments do not match the tool\u2019s schema: ' + problems.join('; '));
      decision.arguments = args;
    } else if (d === 'reject' || d === 'correct') {
      decision.message = row.querySelector('.call-message').value;
      if (d === 'correct' && !decision.message.trim()) return fail('a correction needs a message for the model');
    }
    decisions.push(decision);
  });
  return ok ? { decisions } : null;
}

/** The widget's decisions as they stand, for the raw JSON form. */
function draftAnswer(calls) {
  const rows = [...document.querySelectorAll('#approval-calls .call')];
  return {
    decisions: calls.map((call, i) => {
      const row = rows[i];
      const d = chosen(row);
      const decision = { call_id: call.call_id, decision: d };
      if (d === 'edit') {
        try { decision.arguments = JSON.parse(row.querySelector('.call-edit').value); } catch (_) { decision.arguments = call.arguments; }
      }
      if (d === 'reject' || d === 'correct') decision.message = row.querySelector('.call-message').value;
      return decision;
    }),
  };
}

/** Where `value` does not match the simple parts of a JSON schema (types,
 * required and unknown fields, enums, items); the studio checks the rest. */
function schemaProblems(schema, value, at) {
  const out = [];
  if (!schema || typeof schema !== 'object') return out;
  const where = at || 'the arguments';
  const kinds = schema.type === undefined ? null : [].concat(schema.type);
  if (kinds && !kinds.some((k) => isType(value, k))) {
    out.push(where + ': expected ' + kinds.join(' or ') + ', found ' + typeOf(value));
    return out;
  }
  if (Array.isArray(schema.enum) && !schema.enum.some((e) => compact(e) === compact(value))) {
    out.push(where + ': must be one of ' + schema.enum.map(compact).join(', '));
  }
  if (isType(value, 'object')) {
    for (const k of Array.isArray(schema.required) ? schema.required : []) {
      if (!(k in value)) out.push(where + ': missing field `' + k + '`');
    }
    const props = schema.properties && typeof schema.properties === 'object' ? schema.properties : {};
    for (const [k, v] of Object.entries(value)) {
      if (props[k]) out.push(...schemaProblems(props[k], v, at + '/' + k));
      else if (schema.additionalProperties === false) out.push(where + ': unknown field `' + k + '`');
    }
  }
  if (Array.isArray(value) && schema.items && typeof schema.items === 'object' && !Array.isArray(schema.items)) {
    value.forEach((v, i) => out.push(...schemaProblems(schema.items, v, at + '/' + i)));
  }
  return out;
}

function isType(v, kind) {
  switch (kind) {
    case 'null': return v === null;
    case 'boolean': return typeof v === 'boolean';
    case 'integer': return Number.isInteger(v);
    case 'number': return typeof v === 'number';
    case 'string': return typeof v === 'string';
    case 'array': return Array.isArray(v);
    case 'object': return v !== null && typeof v === 'object' && !Array.isArray(v);
    default: return true;
  }
}

function typeOf(v) {
  if (v === null) return 'null';
  if (Array.isArray(v)) return 'an array';
  if (typeof v === 'object') return 'an object';
  return typeof v === 'number' && Number.isInteger(v) ? 'an integer' : 'a ' + typeof v;
}

/** Writes the studio's problems with a refused answer in their calls' rows. */
function showProblems(problems) {
  for (const p of problems) {
    const row = [...document.querySelectorAll('#approval-calls .call')].find((r) => r.dataset.callId === p.call_id);
    if (!row) continue;
    const error = row.querySelector('.call-error');
    error.textContent = (error.textContent ? error.textContent + '\n' : '') + visible(p.message);
  }
}

function pathTag(path, task) {
  return el('span', { class: 'path-tag task-' + (task || (path ? 'branch' : 'root')), text: path || 'root' });
}

function depth(path) {
  return path ? path.split('/').length : 0;
}

// A value as the timeline sends it: whole, or the beginning of a large
// one (`cut`), marked with its size.
function shown(value, cut) {
  if (cut) return el('bdi', { class: 'cut', text: `${cut.preview}\u2026 (${cut.bytes.toLocaleString()} bytes)` });
  return m(compact(value));
}

function changeLines(e) {
  const out = [];
  if (e.changes_of === 'branch' && e.changes.length) {
    out.push(el('div', { class: 'note muted' }, 'in branch ', m(e.path), '\u2019s own state (the run gets it at the join):'));
  }
  if (!e.changes.length) {
    out.push(el('div', { class: 'change muted', text: e.kind === 'snapshot' ? 'the state at the start' : e.kind === 'fork' ? 'no change: the branches start from this state' : 'no change' }));
  }
  for (const c of e.changes) {
    const before = shown(c.before, c.before_cut), after = shown(c.after, c.after_cut);
    const what = c.op === 'changed' ? [before, ' → ', after] : c.op === 'removed' ? [before] : [after];
    out.push(el('div', { class: 'change op-' + c.op }, (c.op === 'appended' ? '+ appended ' : c.op + ' '), m(c.path), ': ', ...what));
  }
  if (e.more_changes) out.push(el('div', { class: 'change muted', text: `\u2026 and ${e.more_changes} more changes` }));
  return out;
}

function renderPathFilter(t) {
  const select = $('#path-filter');
  const chosen = select.value;
  const options = [el('option', { value: '*', text: 'every task' }), el('option', { value: '', text: 'root: the run\u2019s own loop' })];
  for (const p of t.paths) if (p) options.push(el('option', { value: p, text: p }));
  select.replaceChildren(...options);
  select.value = [...select.options].some((o) => o.value === chosen) ? chosen : '*';
}

function renderTimeline() {
  const t = ui.timeline;
  $('#timeline-note').textContent = t.merged
    ? 'each checkpoint, its task, and what it changed in the state'
    : 'each checkpoint as stored (what it changed needs the agent\u2019s reducers: serve the agent\u2019s own studio)';
  renderPathFilter(t);
  // The entries come a page at a time; the last page holds the latest.
  const atEnd = t.offset + t.entries.length >= t.total;
  const latest = atEnd && t.entries.length ? t.entries[t.entries.length - 1].seq : null;
  const picked = ui.seq === null ? latest : ui.seq;
  $('#timeline-pager').hidden = t.total <= t.entries.length;
  $('#timeline-range').textContent = t.entries.length
    ? `${(t.offset + 1).toLocaleString()}\u2013${(t.offset + t.entries.length).toLocaleString()} of ${t.total.toLocaleString()}`
    : '';
  $('#timeline-earlier').disabled = t.offset === 0;
  $('#timeline-later').disabled = atEnd;
  const items = [];
  let group = null;
  for (const e of t.entries) {
    const li = el('li', {
      class: `checkpoint kind-${e.kind} task-${e.task}` + (e.seq === picked ? ' selected' : ''),
      'data-seq': String(e.seq), 'data-step': e.step, 'data-path': e.path, 'data-kind': e.kind,
    });
    // (Set through the DOM: the page's policy refuses inline styles.)
    li.style.marginLeft = (e.sub_agent ? 0 : Math.min(depth(e.path), 4) * 14) + 'px';
    if (e.node) li.dataset.node = e.node;
    li.append(el('div', { class: 'cp-head' },
      el('span', { class: 'muted', text: '#' + e.index }),
      el('span', { class: 'step', text: e.step }),
      pathTag(e.path, e.task),
      el('span', { class: 'muted', text: e.kind }),
      el('span', { class: 'muted', text: new Date(e.time).toLocaleTimeString() })));
    if (e.branches) {
      const names = [];
      e.branches.forEach((b, i) => {
        if (i) names.push(', ');
        names.push(m(b.path));
        if (b.input !== undefined || b.input_cut) names.push(' (', shown(b.input, b.input_cut), ')');
      });
      const count = e.branches.length + (e.more_branches || 0);
      if (e.more_branches) names.push(`, \u2026 and ${e.more_branches} more`);
      li.append(e.kind === 'fork'
        ? el('div', { class: 'branches' }, `forks ${count} branch${count === 1 ? '' : 'es'}: `, ...names, '; they join at ', m(e.join))
        : el('div', { class: 'branches' }, 'joins ', ...names, ', merged in this order'));
    }
    const record = shown(e.value, e.value_cut);
    if (e.sub_agent) {
      li.append(el('div', { class: 'change muted' }, 'the sub-agent\u2019s own update (its own state type): ', record));
      if (e.signal) li.append(el('div', { class: 'change muted' }, 'the sub-agent ends: ', m(e.signal)));
      else if (e.next) li.append(el('div', { class: 'change muted' }, 'next in the sub-agent: ', m(e.next)));
    } else if (e.changes) {
      li.append(...changeLines(e));
    } else {
      li.append(el('div', { class: 'change' }, record));
    }
    li.addEventListener('click', () => { ui.seq = e.seq; renderTimeline(); loadState(); });
    // A sub-agent's records, grouped under the step that runs it.
    if (e.sub_agent) {
      if (!group || group.dataset.subAgent !== e.sub_agent) {
        group = el('li', { class: 'sub-group', 'data-sub-agent': e.sub_agent },
          el('div', { class: 'sub-head' }, 'sub-agent ', pathTag(e.sub_agent, 'sub-agent'), ' \u2014 run by step \u201c', m(e.sub_agent.split('/').pop()), '\u201d'),
          el('ol', { class: 'sub-records' }));
        group.style.marginLeft = Math.min(depth(e.sub_agent) - 1, 4) * 14 + 'px';
        items.push(group);
      }
      group.querySelector('.sub-records').append(li);
    } else {
      group = null;
      items.push(li);
    }
  }
  $('#timeline').replaceChildren(...items);
  const entry = t.entries.find((e) => e.seq === picked);
  ui.picked = entry && entry.node ? entry.node : null;
  markPicked();
}

// The step of the checkpoint shown, marked on the graph.
function markPicked() {
  for (const n of document.querySelectorAll('#graph .node.picked')) n.classList.remove('picked');
  if (!ui.picked) return;
  for (const n of document.querySelectorAll('#graph .node')) {
    if (n.dataset.step === ui.picked) n.classList.add('picked');
  }
}

async function loadState() {
  const id = ui.selected;
  const run = ++ui.stateRun;
  const q = ui.seq === null ? '' : '?seq=' + ui.seq;
  // Marked while it loads: the state drawn is the one before.
  $('#state-panel').dataset.loading = 'true';
  try {
    const s = await api(`/api/sessions/${encodeURIComponent(id)}/state${q}`);
    if (id !== ui.selected || run !== ui.stateRun) return;
    delete $('#state-panel').dataset.loading;
    ui.stateSeq = s.seq;
    const cuts = cutMap(s.cuts);
    const where = s.path ? [s.sub_agent ? ' in sub-agent ' : ' in branch ', m(s.path)] : [];
    $('#state-at').replaceChildren(`after step ${s.index} (\``, m(s.step), '\`', ...where, `, checkpoint ${s.seq})` + (s.merged ? '' : ' — as stored, not merged'));
    const box = $('#state-tree');
    if (s.merged) {
      box.replaceChildren();
      if (s.task_state) {
        box.append(el('div', { class: 'muted' }, 'branch ', m(s.path), '\u2019s own state:'), tree(s.task_state, '/task_state', cuts),
          el('div', { class: 'muted', text: 'the run\u2019s state (it gets the branch\u2019s updates at the join):' }));
      } else if (s.sub_agent) {
        box.append(el('div', { class: 'muted', text: 'the run\u2019s state (a sub-agent\u2019s records change only its own state):' }));
      }
      box.append(tree(s.state, '/state', cuts));
    } else {
      box.replaceChildren();
      if (s.snapshot) box.append(el('div', { class: 'muted' }, `snapshot of checkpoint ${s.snapshot.seq} (step ${s.snapshot.index}, \``, m(s.snapshot.step), '\`):'), tree(s.snapshot.value, '/snapshot/value', cuts));
      if (s.updates.length) box.append(el('div', { class: 'muted', text: 'updates after it, unmerged:' }));
      s.updates.forEach((u, i) => box.append(el('div', { class: 'muted' }, `checkpoint ${u.seq} (\``, m(u.step), '\`)'), tree(u.value, `/updates/${i}/value`, cuts)));
      const left = cuts.get('/updates');
      if (left && left.kind === 'entries') box.append(el('div', { class: 'muted cut', text: `\u2026 ${left.total - left.kept} more updates, not sent (cut)` }));
    }
    $('#fork-form').dataset.index = String(s.index);
    $('#fork-form h4').replaceChildren(`Fork after step ${s.index} (\``, m(s.step), '\`)'
      + (s.path ? ' \u2014 from the run\u2019s state: a branch\u2019s or sub-agent\u2019s changes are in it only once merged' : ''));
  } catch (e) {
    if (id !== ui.selected || run !== ui.stateRun) return;
    delete $('#state-panel').dataset.loading;
    $('#state-at').textContent = '';
    $('#state-tree').replaceChildren();
    setText($('#session-error'), e.message);
  }
}

// The timeline's URL: the task chosen, and the page (the server filters
// and pages; without an offset it sends the last page).
function timelineUrl(id) {
  const params = new URLSearchParams();
  const filter = $('#path-filter').value;
  if (filter !== '*') params.set('path', filter);
  if (ui.offset !== null) params.set('offset', String(ui.offset));
  const q = params.toString();
  return `/api/sessions/${encodeURIComponent(id)}/timeline` + (q ? '?' + q : '');
}

async function loadTimeline() {
  const id = ui.selected;
  if (!id) return;
  // A later page asked for (or a later load of the session) wins.
  const run = ++ui.timelineRun;
  try {
    const timeline = await api(timelineUrl(id));
    if (id !== ui.selected || run !== ui.timelineRun) return;
    ui.timeline = timeline;
    renderTimeline();
  } catch (e) {
    if (id === ui.selected && run === ui.timelineRun) setText($('#session-error'), e.message);
  }
}

// Clears every panel drawn of a session, for session `id`: when another
// session is opened (nothing of the one before stays on screen while it
// loads), and when opening it fails (nothing of another session stays
// under its error: above all not its answer form). The header names `id`,
// with what the list knows of it (its head, which reads); the graph, the
// timeline, the state and the journal are empty, the state marked as
// loading while `loading`.
function clearSession(id, loading) {
  ui.detail = null;
  ui.timeline = null;
  ui.stateSeq = null;
  ui.picked = null;
  ui.shown = null;
  $('#empty-pane').hidden = true;
  $('#session-pane').hidden = false;
  $('#session-pane').dataset.loading = loading ? 'true' : 'false';
  $('#session-pane').dataset.damaged = 'false';
  const s = ui.sessions.get(id);
  const known = s && !s.unreadable ? s : null;
  setText($('#session-id'), id);
  setText($('#session-agent'), known ? known.agent : '');
  $('#phase').replaceChildren(...(known ? [phaseBadge(known.phase)] : []));
  if (known) $('#phase').dataset.phase = known.phase;
  else delete $('#phase').dataset.phase;
  $('#session-steps').textContent = known ? String(known.steps) : '';
  $('#session-next').textContent = '';
  $('#session-detail').replaceChildren();
  $('#session-error').textContent = '';
  // The question and its form, with whatever was typed in them.
  const waiting = $('#waiting-panel');
  waiting.hidden = true;
  delete waiting.dataset.interrupt;
  $('#interrupt-step').replaceChildren();
  $('#interrupt-path').replaceChildren();
  $('#interrupt-payload').replaceChildren();
  $('#answer-form').hidden = true;
  $('#answer-readonly').hidden = true;
  $('#answer').value = '';
  $('#answer-error').textContent = '';
  $('#answer-status').textContent = '';
  $('#approval-calls').replaceChildren();
  $('#approval').hidden = true;
  $('#answer-shape').replaceChildren();
  $('#graph').replaceChildren();
  $('#graph-source').textContent = loading ? 'loading\u2026' : '';
  $('#timeline').replaceChildren();
  $('#timeline-note').textContent = loading ? 'loading\u2026' : '';
  $('#timeline-pager').hidden = true;
  $('#timeline-range').textContent = '';
  $('#path-filter').replaceChildren(el('option', { value: '*', text: 'every task' }));
  $('#state-at').textContent = loading ? 'loading\u2026' : '';
  $('#state-tree').replaceChildren();
  if (loading) $('#state-panel').dataset.loading = 'true';
  else delete $('#state-panel').dataset.loading;
  $('#fork-form').hidden = true;
  $('#fork-status').textContent = '';
  $('#fork-error').textContent = '';
  $('#fork-fields').textContent = '';
  $('#journal').replaceChildren();
}

// Loads the session shown: its detail, timeline and state. Once loaded,
// it is loaded again if the event stream brought a newer version meanwhile
// (`refresh`).
async function loadSession() {
  const id = ui.selected;
  if (!id) return;
  const run = ++ui.sessionRun;
  // A page of the timeline asked for before this load is overtaken by it.
  const timelineRun = ++ui.timelineRun;
  ui.loading = true;
  let loaded = false;
  const version = knownVersion(id);
  // Another session's panels go at once: none of them stays while this
  // one loads (a large state takes seconds). A session whose load failed
  // keeps its error on screen while it is asked for again.
  const retry = ui.failed !== null && ui.failed.id === id;
  // What a load that succeeds after a failure clears: what the error was
  // shown over, unless it kept the panels drawn (a transient failure of the
  // session shown keeps them, and what is being typed in them).
  const clearAfter = retry && (ui.failed.gone || ui.shown !== id);
  if (ui.shown !== id && !retry) clearSession(id, true);
  try {
    const [detail, timeline] = await Promise.all([
      api(`/api/sessions/${encodeURIComponent(id)}`),
      api(timelineUrl(id)),
    ]);
    if (id !== ui.selected || run !== ui.sessionRun) return;
    ui.detail = detail;
    ui.failed = null;
    if (timelineRun === ui.timelineRun) ui.timeline = timeline;
    if (clearAfter) clearSession(id, false);
    $('#session-error').textContent = '';
    $('#session-pane').dataset.loading = 'false';
    renderDetail();
    // (A page asked for meanwhile draws itself when it comes.)
    if (ui.timeline) renderTimeline();
    ui.shown = id;
    await loadState();
    loaded = true;
  } catch (e) {
    if (id !== ui.selected || run !== ui.sessionRun) return;
    // Nothing drawn of another session stays under this one's error, nor
    // anything of this one when it is damaged or gone. A reload of the
    // session shown that failed otherwise (the network, the store out of
    // reach for a moment) keeps what is drawn, and what is being typed,
    // under the error.
    const gone = e.kind === 'damaged' || e.status === 404;
    ui.failed = { id, version, gone };
    if (ui.shown !== id || gone) clearSession(id, false);
    else $('#session-pane').dataset.loading = 'false';
    setText($('#session-error'), e.message);
    $('#session-pane').dataset.damaged = e.kind === 'damaged' ? 'true' : 'false';
  } finally {
    if (run === ui.sessionRun) {
      ui.loading = false;
      if (loaded) refresh();
    }
  }
}

function select(id) {
  if (ui.selected !== id) {
    // (What failed is on screen no more.)
    ui.failed = null;
    ui.seq = null;
    ui.offset = null;
    $('#path-filter').value = '*';
  }
  ui.selected = id;
  history.replaceState(null, '', location.search + '#session=' + encodeURIComponent(id));
  renderList();
  loadSession();
  // The stream follows the session shown, wherever it is in the list.
  if (live.events) follow();
}

// ---- writes ----

$('#answer-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const d = ui.detail;
  // Only the question of the session shown is answered.
  if (!d || !d.interrupt || d.summary.id !== ui.selected) return;
  const error = $('#answer-error');
  error.textContent = '';
  let answer;
  if (byWidget()) {
    answer = widgetAnswer(d.interrupt.payload.calls);
    if (!answer) {
      error.textContent = 'nothing sent: see the calls above';
      return;
    }
  } else {
    try {
      answer = JSON.parse($('#answer').value);
    } catch (e) {
      setText(error, 'not JSON: ' + e.message + ' (a text answer is quoted: "yes")');
      return;
    }
  }
  for (const e of document.querySelectorAll('#approval-calls .call-error')) e.textContent = '';
  $('#answer-submit').disabled = true;
  try {
    const r = await api(`/api/sessions/${encodeURIComponent(d.summary.id)}/answer`, {
      method: 'POST',
      body: JSON.stringify({ interrupt: d.interrupt.id, answer }),
    });
    $('#answer-status').textContent = r.kept
      ? 'answered; following the run…'
      : 'answered; the run is still on the step (a refusal would show here)…';
  } catch (e) {
    setText(error, e.message);
    showProblems(e.problems || []);
    $('#answer-submit').disabled = false;
  }
});

$('#answer-advanced').addEventListener('change', () => {
  const d = ui.detail;
  if ($('#answer-advanced').checked && d && d.interrupt && isApproval(d.interrupt.payload)) {
    $('#answer').value = pretty(draftAnswer(d.interrupt.payload.calls));
  }
  $('#answer-error').textContent = '';
  showAdvanced();
});

$('#fork-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const error = $('#fork-error');
  error.textContent = '';
  let update;
  try {
    update = JSON.parse($('#fork-update').value);
  } catch (e) {
    setText(error, 'not JSON: ' + e.message);
    return;
  }
  try {
    const index = Number($('#fork-form').dataset.index);
    const r = await api(`/api/sessions/${encodeURIComponent(ui.selected)}/fork`, {
      method: 'POST',
      body: JSON.stringify({ index, update }),
    });
    setText($('#fork-status'), 'forked: ' + r.session);
    await loadList();
    select(r.session);
  } catch (e) {
    setText(error, e.message);
  }
});

$('#answer').addEventListener('input', () => { $('#answer-error').textContent = ''; });
$('#fork-update').addEventListener('input', () => { $('#fork-error').textContent = ''; });
$('#search').addEventListener('input', () => {
  clearTimeout(searchTimer);
  searchTimer = setTimeout(applyFilter, SEARCH_PAUSE_MS);
});
$('#list-more').addEventListener('click', () => loadList(true));
$('#phase-filter').addEventListener('change', applyFilter);
$('#path-filter').addEventListener('change', () => { ui.offset = null; loadTimeline(); });
$('#timeline-earlier').addEventListener('click', () => {
  const t = ui.timeline;
  ui.offset = Math.max(0, t.offset - t.limit);
  loadTimeline();
});
$('#timeline-later').addEventListener('click', () => {
  const t = ui.timeline;
  const next = t.offset + t.limit;
  // The last page is followed live as the session grows.
  ui.offset = next + t.limit >= t.total ? null : next;
  loadTimeline();
});

// ---- long-term memory ----

// A namespace as the API reads it: labels joined by '/', each encoded so
// that a label may hold a '/'.
const nsParam = (labels) => labels.map(encodeURIComponent).join('/');
// A label as shown: its `%` and `/` encoded as the API reads them, so that
// label `a/b` (`a%2Fb`) never reads as labels `a` and `b`; a namespace
// shown is its labels so written, joined by `/`, which the API reads back.
const nsLabel = (label) => label.replace(/%/g, '%25').replace(/\//g, '%2F');
const nsPath = (labels) => labels.map(nsLabel).join('/');
const nsText = (labels) => labels.length ? labels.map(nsLabel).join(' / ') : 'every namespace';

function until(ms) {
  const s = Math.round((ms - Date.now()) / 1000);
  if (s <= 0) return 'expired';
  if (s < 60) return 'in ' + s + ' s';
  if (s < 3600) return 'in ' + Math.round(s / 60) + ' min';
  if (s < 86400) return 'in ' + Math.round(s / 3600) + ' h';
  return new Date(ms).toISOString().slice(0, 16).replace('T', ' ');
}

const memory = {
  namespaces: [], // arrays of labels, as listed so far
  more: false,
  selected: [], // the namespace prefix shown
  offset: 0,
  limit: 20,
  q: '',
  filter: '',
};

function memoryQuery(extra) {
  const p = new URLSearchParams({ namespace: nsParam(memory.selected), ...extra });
  if (memory.filter) p.append('filter', memory.filter);
  return p.toString();
}

async function loadNamespaces(more) {
  try {
    const offset = more ? memory.namespaces.length : 0;
    const page = await api('/api/memory/namespaces?limit=500&offset=' + offset);
    memory.namespaces = (more ? memory.namespaces : []).concat(page.namespaces);
    memory.more = page.more;
    $('#ns-error').textContent = '';
    renderNamespaces();
  } catch (e) {
    setText($('#ns-error'), e.message);
  }
}

// The namespaces as a tree: each label a node, marked when the namespace
// itself holds items.
function renderNamespaces() {
  const root = { children: new Map(), holds: false };
  for (const labels of memory.namespaces) {
    let node = root;
    for (const label of labels) {
      if (!node.children.has(label)) node.children.set(label, { children: new Map(), holds: false });
      node = node.children.get(label);
    }
    node.holds = true;
  }
  const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
  const button = (labels, text, holds) => {
    const b = el('button', {
      type: 'button',
      class: 'ns' + (holds ? ' holds' : '') + (same(labels, memory.selected) ? ' selected' : ''),
      'data-ns': nsPath(labels), title: nsText(labels), text,
    });
    b.addEventListener('click', () => selectNamespace(labels));
    return b;
  };
  const branch = (node, labels) => {
    const ul = el('ul');
    for (const [label, child] of node.children) {
      const path = labels.concat([label]);
      const li = el('li', {}, button(path, nsLabel(label), child.holds));
      if (child.children.size) li.append(branch(child, path));
      ul.append(li);
    }
    return ul;
  };
  const top = el('ul', {}, el('li', {}, button([], 'every namespace', false), branch(root, [])));
  $('#ns-tree').replaceChildren(top);
  $('#ns-more').hidden = !memory.more;
  $('#ns-empty').hidden = memory.namespaces.length > 0;
  $('#ns-note').textContent = memory.namespaces.length + (memory.more ? '+' : '') + ' holding items';
}

// What the search form asks for, applied from the first page.
function readSearch() {
  memory.q = $('#memory-q').value.trim();
  memory.filter = $('#memory-filter').value.trim();
  memory.offset = 0;
}

function selectNamespace(labels) {
  memory.selected = labels;
  readSearch();
  renderNamespaces();
  loadItems();
}

function valueBox(item) {
  const box = el('div', { class: 'value-box' });
  if (item.truncated) {
    const more = el('button', { type: 'button', text: 'show all' });
    more.addEventListener('click', async () => {
      try {
        const whole = await api('/api/memory/item?' + new URLSearchParams({ namespace: nsParam(item.namespace), key: item.key }));
        box.replaceWith(valueBox(whole));
      } catch (e) {
        setText($('#memory-error'), e.message);
      }
    });
    box.append(el('pre', { class: 'value', text: item.preview + '\u2026' }),
      el('div', { class: 'cut' }, `truncated: the first ${item.preview.length.toLocaleString()} characters of ${item.value_bytes.toLocaleString()} bytes`, more));
  } else {
    box.append(el('pre', { class: 'value', text: JSON.stringify(item.value, null, 2) }));
  }
  return box;
}

function renderItems(page) {
  const rows = page.items.map((item) => {
    const head = el('div', { class: 'item-head' },
      el('span', { class: 'item-key', text: item.key }),
      el('span', { class: 'path-tag', text: nsPath(item.namespace) }),
      el('span', { class: 'muted', title: new Date(item.updated_at).toISOString(), text: 'updated ' + ago(item.updated_at) }),
      el('span', { class: 'muted', text: item.expires_at ? 'expires ' + until(item.expires_at) : 'no expiry' }));
    if (item.score !== undefined) head.append(el('span', { class: 'score', text: 'score ' + item.score.toFixed(3) }));
    return el('li', { class: 'item', 'data-key': item.key, 'data-namespace': nsPath(item.namespace) }, head, valueBox(item));
  });
  $('#items').replaceChildren(...rows);
  $('#items-empty').hidden = rows.length > 0;
  const first = page.offset + 1, last = page.offset + rows.length;
  setText($('#items-range'), memory.q ? `closest to \u201c${memory.q}\u201d` : '');
  $('#items-page').textContent = rows.length ? `${first}\u2013${last}${page.more ? ' of more' : ''}` : '';
  $('#items-prev').disabled = page.offset === 0;
  $('#items-next').disabled = !page.more;
}

async function loadItems() {
  setText($('#items-namespace'), nsText(memory.selected));
  const paging = { limit: String(memory.limit), offset: String(memory.offset) };
  const path = memory.q
    ? '/api/memory/search?' + memoryQuery({ q: memory.q, ...paging })
    : '/api/memory/items?' + memoryQuery(paging);
  try {
    const page = await api(path);
    $('#memory-error').textContent = '';
    renderItems(page);
  } catch (e) {
    setText($('#memory-error'), e.message);
    $('#items').replaceChildren();
    $('#items-empty').hidden = true;
    $('#items-page').textContent = '';
    $('#items-prev').disabled = true;
    $('#items-next').disabled = true;
  }
}

const VIEWS = ['sessions', 'memory', 'evals'];

function showView(view) {
  for (const v of VIEWS) $('#' + v + '-view').hidden = v !== view;
  for (const t of document.querySelectorAll('#views .tab')) t.classList.toggle('selected', t.dataset.view === view);
  if (view === 'memory') {
    history.replaceState(null, '', location.search + '#memory');
    loadNamespaces(false);
    loadItems();
  } else if (view === 'evals') {
    history.replaceState(null, '', location.search + '#evals');
    loadReports();
  } else if (location.hash === '#memory' || location.hash === '#evals') {
    history.replaceState(null, '', location.search);
  }
}

// ---- eval reports ----

const evals = { reports: [], selected: null, open: new Set(), stored: new Map() };

// Whether this studio's store holds a session a report names: asked of the
// server (`/summary`: 404 when it holds none), not read from the sessions
// the list has loaded, so that a session on a page of the list not loaded
// is linked too. The answer, true or false, is kept for the page's life; a
// failed question is asked again next time.
function stored(id) {
  if (!evals.stored.has(id)) {
    const asked = api(`/api/sessions/${encodeURIComponent(id)}/summary`).then(
      () => true,
      (e) => {
        if (e.status === 404) return false;
        evals.stored.delete(id);
        throw e;
      });
    evals.stored.set(id, asked);
  }
  return evals.stored.get(id);
}

async function loadReports() {
  try {
    evals.reports = await api('/api/evals');
    $('#reports-error').textContent = '';
  } catch (e) {
    setText($('#reports-error'), e.message);
    return;
  }
  $('#reports tbody').replaceChildren(...evals.reports.map((r) => {
    const tr = el('tr', { class: 'row' + (r.index === evals.selected ? ' selected' : ''), 'data-report': String(r.index) },
      el('td', { text: r.experiment }),
      el('td', { text: r.model || '' }),
      el('td', { text: `${r.passed}/${r.cases}` }));
    tr.addEventListener('click', () => loadReport(r.index));
    return tr;
  }));
  if (evals.selected === null && evals.reports.length > 0) loadReport(evals.reports[0].index);
}

function scoreCell(scored) {
  if (!scored) return el('td', { class: 'score', text: '-' });
  if (scored.error !== undefined) return el('td', { class: 'score error', title: scored.error, text: 'error' });
  const s = scored.score;
  const value = Number.isInteger(s.value) ? String(s.value) : s.value.toFixed(2);
  return el('td', { class: 'score ' + (s.passed ? 'pass' : 'fail'), title: s.reason || '', text: (s.passed ? '\u2714 ' : '\u2718 ') + value });
}

function caseDetail(c, columns) {
  const block = (title, value) => el('div', {}, el('h4', { text: title }), el('div', { class: 'tree' }, tree(value === undefined ? null : value)));
  const scores = el('ul', { class: 'case-scores' }, ...Object.entries(c.scores).map(([name, scored]) => {
    const li = el('li', { 'data-evaluator': name }, el('b', { text: name + ': ' }));
    if (scored.error !== undefined) li.append(el('span', { class: 'score error', text: 'could not score: ' + scored.error }));
    else li.append(
      el('span', { class: 'score ' + (scored.score.passed ? 'pass' : 'fail'), text: (scored.score.passed ? 'passed ' : 'failed ') + scored.score.value }),
      el('span', { class: 'reason', text: scored.score.reason || '' }));
    return li;
  }));
  const td = el('td', { colspan: String(columns) });
  if (c.failure) td.append(el('p', { class: 'case-failure', text: c.failure.kind + ': ' + c.failure.message }));
  td.append(
    el('div', { class: 'case-grid' }, block('input', c.input), block('expected', c.expected), block('output', c.output)),
    el('h4', { text: 'scores' }), scores,
    el('p', { class: 'muted', text: 'steps: ' + (c.steps.join(' \u2192 ') || 'none') }),
    el('p', { class: 'muted', text: 'tool calls: ' + (c.tool_calls.map((t) => `${t.name}(${compact(t.arguments)})`).join(', ') || 'none') }));
  const runs = el('p', { class: 'sessions' }, 'runs: ');
  for (const id of c.sessions) {
    const link = el('a', { href: '#session=' + encodeURIComponent(id), class: 'timeline-link', 'data-session': id, text: id.slice(0, 8) + ' (looking in this store\u2026)' });
    stored(id).then(
      (found) => setText(link, id.slice(0, 8) + (found ? ' (timeline)' : ' (not in this store)')),
      (e) => setText(link, id.slice(0, 8) + ' (could not look in this store: ' + e.message + ')'));
    link.addEventListener('click', (ev) => {
      ev.preventDefault();
      showView('sessions');
      select(id);
    });
    runs.append(link, ' ');
  }
  if (c.sessions.length === 0) runs.append('none recorded');
  td.append(runs);
  return el('tr', { class: 'case-detail', 'data-case': c.name }, td);
}

async function loadReport(index) {
  let r;
  try {
    r = await api('/api/evals/' + index);
    $('#report-error').textContent = '';
  } catch (e) {
    setText($('#report-error'), e.message);
    return;
  }
  if (evals.selected !== index) evals.open.clear();
  evals.selected = index;
  for (const tr of document.querySelectorAll('#reports tbody tr')) tr.classList.toggle('selected', tr.dataset.report === String(index));
  $('#report-title').replaceChildren(m(r.experiment), ' on ', m(r.dataset), ...(r.model ? [' (', m(r.model), ')'] : []));
  $('#report-title').classList.remove('muted');
  const means = r.evaluators.map((e) => `${e.name} ${e.mean.toFixed(2)}`).join(' \u00b7 ');
  $('#report-facts').replaceChildren(
    el('span', {}, 'passed ', el('b', { text: `${r.passed}/${r.cases.length}` })),
    el('span', {}, 'failed ', el('b', { text: String(r.failed) })),
    el('span', {}, 'model calls ', el('b', { text: String(r.model_calls) })),
    el('span', {}, 'tokens ', el('b', { text: String(r.tokens) })),
    el('span', { class: 'muted', text: means }));
  const names = r.evaluator_names;
  $('#report-cases thead').replaceChildren(el('tr', {}, el('th', { text: 'case' }), ...names.map((n) => el('th', { text: n })), el('th', { text: 'ms' }), el('th', { text: 'tokens' })));
  const rows = [];
  for (const c of r.cases) {
    const tr = el('tr', { class: 'row case' + (c.passed ? '' : ' failing'), 'data-case': c.name },
      el('td', { text: c.name }),
      ...names.map((n) => scoreCell(c.scores[n])),
      el('td', { text: String(Math.round(c.metrics.latency_ms)) }),
      el('td', { text: String(c.metrics.usage.input_tokens + c.metrics.usage.output_tokens) }));
    tr.addEventListener('click', () => {
      if (evals.open.has(c.name)) evals.open.delete(c.name); else evals.open.add(c.name);
      loadReport(index);
    });
    rows.push(tr);
    if (evals.open.has(c.name)) rows.push(caseDetail(c, names.length + 3));
  }
  $('#report-cases tbody').replaceChildren(...rows);
}

for (const t of document.querySelectorAll('#views .tab')) t.addEventListener('click', () => showView(t.dataset.view));
$('#ns-more').addEventListener('click', () => loadNamespaces(true));
$('#memory-form').addEventListener('submit', (ev) => {
  ev.preventDefault();
  readSearch();
  loadItems();
});
$('#items-prev').addEventListener('click', () => { memory.offset = Math.max(0, memory.offset - memory.limit); loadItems(); });
$('#items-next').addEventListener('click', () => { memory.offset += memory.limit; loadItems(); });

// ---- live ----

// The event stream follows the first page of the list, the sessions that
// appear, and the session shown (`watch`): it is opened again when the
// session shown changes. `seen` is the newest version of the session shown
// that it brought.
const live = { events: null, watched: null, seen: null };

// Notes the version of a session the stream sent, if it is the one shown.
function saw(s) {
  if (s.id !== ui.selected) return;
  // One whose head does not read has no version: the next that reads is
  // newer than any seen.
  if (s.unreadable) {
    live.seen = null;
    return;
  }
  if (!live.seen || live.seen.id !== s.id || live.seen.version < s.version) live.seen = { id: s.id, version: s.version };
}

// Loads the session shown again when the stream brought a newer version
// than the one shown. Never while a load of it is under way: the stream's
// first event comes while the page loads the session it opened with, and a
// second load would rebuild its state tree after the reader opened its
// cuts; the load under way calls this again when done, with the version
// it got.
function refresh() {
  const s = live.seen;
  if (!s || s.id !== ui.selected || ui.loading) return;
  const f = ui.failed;
  if (f && f.gone && f.id === s.id && f.version !== null && f.version >= s.version) return;
  const d = ui.detail;
  if (!d || d.summary.id !== s.id || d.summary.version < s.version) loadSession();
}

// The newest version of session `id` the page knows of: from the stream
// or from the list; null when neither has it.
function knownVersion(id) {
  const versions = [];
  if (live.seen && live.seen.id === id) versions.push(live.seen.version);
  const listed = ui.sessions.get(id);
  if (listed && !listed.unreadable && typeof listed.version === 'number') versions.push(listed.version);
  return versions.length ? Math.max(...versions) : null;
}

// A session the stream sent: in the list if it passes the list's filter,
// else out of it.
function keep(s) {
  if (listed(s)) ui.sessions.set(s.id, s);
  else ui.sessions.delete(s.id);
}

function follow() {
  if (live.events && live.watched === ui.selected) return;
  if (live.events) live.events.close();
  live.watched = ui.selected;
  const watch = ui.selected ? '&watch=' + encodeURIComponent(ui.selected) : '';
  const events = new EventSource('/api/events?token=' + encodeURIComponent(token) + watch);
  live.events = events;
  // A store read from a copy taken at start never changes: the badge says
  // so, whatever the stream does.
  if (ui.info && ui.info.snapshot) {
    showSnapshot(ui.info.snapshot);
  } else {
    events.addEventListener('open', () => { $('#live').textContent = 'live'; $('#live').classList.add('on'); });
    events.addEventListener('error', () => { $('#live').textContent = 'reconnecting…'; $('#live').classList.remove('on'); });
  }
  // The first page and the session shown, merged into those loaded; with
  // a search or a phase filter, only those that pass it (a session that
  // no longer passes leaves the list). The session shown is loaded again
  // only for a newer version (`refresh`): a reload rebuilds its state
  // tree, closing the cuts the reader opened.
  events.addEventListener('sessions', (m) => {
    for (const s of JSON.parse(m.data)) {
      saw(s);
      keep(s);
    }
    renderList();
    refresh();
  });
  events.addEventListener('session', (m) => {
    const s = JSON.parse(m.data);
    saw(s);
    keep(s);
    renderList();
    refresh();
  });
  events.addEventListener('removed', (m) => {
    ui.sessions.delete(JSON.parse(m.data).id);
    renderList();
  });
}

// The badge of a studio reading a copy of its store taken at start: what
// it shows is the store as it was then, not live.
function showSnapshot(snapshot) {
  const badge = $('#live');
  const at = new Date(snapshot.taken_at);
  badge.classList.remove('on');
  badge.classList.add('snapshot');
  badge.dataset.takenAt = String(snapshot.taken_at);
  badge.title = 'this studio reads a copy of the store taken when it started (' + at.toISOString()
    + '): later writes by other processes do not show; start it again to see them';
  badge.textContent = 'snapshot taken at ' + at.toLocaleString();
}

async function start() {
  try {
    ui.info = await api('/api/info');
  } catch (e) {
    setText($('#list-error'), e.message);
    return;
  }
  setText($('#title'), ui.info.title);
  $('#mode').textContent = ui.info.writable ? 'answers and forks' : 'read-only';
  $('#views').hidden = !ui.info.memory && !ui.info.evals;
  $('#views .tab[data-view="memory"]').hidden = !ui.info.memory;
  $('#views .tab[data-view="evals"]').hidden = !ui.info.evals;
  // A reload may find the search box and the filter as they were left.
  ui.filter = readFilter();
  await loadList();
  const linked = location.hash.match(/session=([^&]+)/);
  if (linked) select(decodeURIComponent(linked[1]));
  if (ui.info.memory && location.hash === '#memory') showView('memory');
  if (ui.info.evals && location.hash === '#evals') showView('evals');
  follow();
}

start();
