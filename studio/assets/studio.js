// harness studio: one page, no dependencies. It reads the JSON API with the
// token from its URL and follows the store over server-sent events.
'use strict';

const token = new URLSearchParams(location.search).get('token') || '';
const $ = (sel) => document.querySelector(sel);
const SVG = 'http://www.w3.org/2000/svg';

const ui = {
  info: null,
  sessions: new Map(),
  selected: null,
  detail: null,
  timeline: null,
  seq: null, // the checkpoint whose state is shown; null: the latest
};

async function api(path, options = {}) {
  const headers = { 'x-studio-token': token };
  if (options.body !== undefined) headers['content-type'] = 'application/json';
  const response = await fetch(path, { method: options.method || 'GET', headers, body: options.body });
  let data;
  try { data = await response.json(); } catch (_) { data = { error: response.statusText }; }
  if (!response.ok) throw new Error(data.error || response.statusText);
  return data;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === 'class') node.className = v;
    else if (k === 'text') node.textContent = v;
    else node.setAttribute(k, v);
  }
  for (const c of children) node.append(c);
  return node;
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

const compact = (v) => JSON.stringify(v);

// ---- JSON as a tree ----

function leaf(value) {
  const type = value === null ? 'null' : typeof value;
  return el('span', { class: 't-' + type, text: JSON.stringify(value) });
}

function treeItem(key, value) {
  const li = el('li');
  const label = key === null ? [] : [el('span', { class: 'k', text: key }), ': '];
  if (value !== null && typeof value === 'object') {
    const entries = Array.isArray(value) ? value.map((v, i) => [String(i), v]) : Object.entries(value);
    const brackets = Array.isArray(value) ? `[${entries.length}]` : `{${entries.length}}`;
    const details = el('details');
    details.open = entries.length <= 20;
    details.append(el('summary', {}, ...label, el('span', { class: 'muted', text: brackets })));
    const ul = el('ul');
    for (const [k, v] of entries) ul.append(treeItem(k, v));
    details.append(ul);
    li.append(details);
  } else {
    li.append(...label, leaf(value));
  }
  return li;
}

function tree(value) {
  return el('ul', {}, treeItem(null, value));
}

// ---- sessions ----

function phaseBadge(phase) {
  const names = { waiting: 'waiting for a human' };
  return el('span', { class: 'phase phase-' + phase, text: names[phase] || phase });
}

function matches(s, q) {
  return [s.id, s.agent, s.phase, s.next_step, s.detail]
    .some((x) => x && x.toLowerCase().includes(q));
}

function renderList() {
  const q = $('#search').value.trim().toLowerCase();
  const phase = $('#phase-filter').value;
  const rows = [...ui.sessions.values()]
    .filter((s) => !phase || s.phase === phase)
    .filter((s) => !q || matches(s, q))
    .sort((a, b) => b.updated_at - a.updated_at || a.id.localeCompare(b.id));
  const body = $('#sessions tbody');
  body.replaceChildren(...rows.map((s) => {
    const tr = el('tr', { class: 'row' + (s.id === ui.selected ? ' selected' : ''), 'data-id': s.id, 'data-phase': s.phase },
      el('td', { class: 'id', title: s.id, text: s.id.slice(0, 8) }),
      el('td', { text: s.agent }),
      el('td', {}, phaseBadge(s.phase)),
      el('td', { text: String(s.steps) }),
      el('td', { class: 'muted', text: ago(s.updated_at) }));
    tr.addEventListener('click', () => select(s.id));
    return tr;
  }));
  $('#list-empty').hidden = rows.length > 0;
}

async function loadList() {
  try {
    const list = await api('/api/sessions');
    ui.sessions = new Map(list.map((s) => [s.id, s]));
    $('#list-error').textContent = '';
    renderList();
  } catch (e) {
    $('#list-error').textContent = e.message;
  }
}

// ---- the graph ----

function layout(graph) {
  const ids = graph.nodes.map((n) => n.id);
  const out = new Map(ids.map((i) => [i, []]));
  for (const e of graph.edges) if (out.has(e.from)) out.get(e.from).push(e.to);
  const layer = new Map();
  const start = ids.includes('$start') ? '$start' : ids[0];
  if (start !== undefined) {
    layer.set(start, 0);
    const queue = [start];
    while (queue.length) {
      const n = queue.shift();
      for (const m of out.get(n) || []) {
        if (m !== '$end' && !layer.has(m)) { layer.set(m, layer.get(n) + 1); queue.push(m); }
      }
    }
  }
  for (const i of ids) if (!layer.has(i) && i !== '$end') layer.set(i, 1);
  if (ids.includes('$end')) layer.set('$end', Math.max(0, ...layer.values()) + 1);
  const rows = [];
  for (const i of ids) (rows[layer.get(i)] ||= []).push(i);
  const size = new Map(graph.nodes.map((n) => {
    const round = n.kind === 'start' || n.kind === 'end';
    return [n.id, { w: round ? 56 : Math.max(90, n.id.length * 8 + 28), h: round ? 30 : 36 }];
  }));
  const gap = 40;
  const widths = rows.map((r) => (r || []).reduce((w, i) => w + size.get(i).w + gap, -gap));
  const width = Math.max(320, ...widths) + 200;
  const pos = new Map();
  rows.forEach((r, y) => {
    let x = (width - 160 - widths[y]) / 2 + 20;
    for (const i of r || []) {
      const s = size.get(i);
      pos.set(i, { x: x + s.w / 2, y: 30 + y * 90, w: s.w, h: s.h, layer: y });
      x += s.w + gap;
    }
  });
  return { pos, width, height: rows.length * 90 + 10 };
}

function drawGraph(detail) {
  const graph = detail.graph;
  const { pos, width, height } = layout(graph);
  const visited = new Set(detail.visited);
  const taken = new Set();
  let prev = '$start';
  for (const step of detail.visited) {
    const s = step === '$input' ? '$start' : step;
    if (s !== '$start') taken.add(prev + '\u0000' + s);
    prev = s;
  }
  const root = svg('svg', { viewBox: `0 0 ${width} ${height}`, width, height, role: 'img', 'aria-label': 'the loop' });
  const defs = svg('defs');
  const marker = svg('marker', { id: 'arrow', viewBox: '0 0 10 10', refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: 'auto-start-reverse' });
  marker.append(svg('path', { d: 'M0,0 L10,5 L0,10 z', fill: '#8793a0' }));
  defs.append(marker);
  root.append(defs);
  let bend = 0;
  for (const e of graph.edges) {
    const a = pos.get(e.from), b = pos.get(e.to);
    if (!a || !b) continue;
    const g = svg('g', { class: 'edge' + (taken.has(e.from + '\u0000' + e.to) ? ' taken' : ''), 'data-from': e.from, 'data-to': e.to });
    let d, lx, ly;
    if (b.layer > a.layer) {
      const x1 = a.x, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y - b.h / 2;
      d = `M${x1},${y1} C${x1},${(y1 + y2) / 2} ${x2},${(y1 + y2) / 2} ${x2},${y2}`;
      lx = (x1 + x2) / 2; ly = (y1 + y2) / 2;
    } else {
      // Back to an earlier step (or a step beside it): around the right.
      bend += 1;
      const x1 = a.x + a.w / 2, y1 = a.y, x2 = b.x + b.w / 2, y2 = b.y;
      const out = Math.max(x1, x2) + 40 + 22 * bend;
      d = `M${x1},${y1} C${out},${y1} ${out},${y2} ${x2 + 2},${y2}`;
      lx = out - 10; ly = (y1 + y2) / 2;
    }
    g.append(svg('path', { d, 'marker-end': 'url(#arrow)' }));
    if (e.label) {
      const t = svg('text', { x: lx, y: ly + 4 });
      t.textContent = e.label;
      const w = e.label.length * 6.5 + 8;
      g.append(svg('rect', { x: lx - w / 2, y: ly - 8, width: w, height: 15, rx: 3 }), t);
    }
    root.append(g);
  }
  for (const n of graph.nodes) {
    const p = pos.get(n.id);
    const cls = ['node', 'kind-' + n.kind];
    if (visited.has(n.id)) cls.push('visited');
    if (detail.current === n.id) cls.push('current');
    const g = svg('g', { class: cls.join(' '), 'data-step': n.id });
    if (n.kind === 'start' || n.kind === 'end') {
      g.append(svg('ellipse', { cx: p.x, cy: p.y, rx: p.w / 2, ry: p.h / 2 }));
    } else if (n.kind === 'router') {
      const { x, y, w, h } = p;
      g.append(svg('polygon', { points: `${x - w / 2},${y} ${x},${y - h / 2 - 4} ${x + w / 2},${y} ${x},${y + h / 2 + 4}` }));
    } else {
      g.append(svg('rect', { x: p.x - p.w / 2, y: p.y - p.h / 2, width: p.w, height: p.h, rx: 6 }));
    }
    const t = svg('text', { x: p.x, y: p.y });
    t.textContent = n.kind === 'start' ? 'start' : n.kind === 'end' ? 'end' : n.id;
    g.append(t);
    root.append(g);
  }
  $('#graph').replaceChildren(root);
  $('#graph-source').textContent = graph.source === 'declared'
    ? 'declared by the harness; blue: visited, orange: running or waiting now'
    : 'observed: the steps and transitions this session\u2019s checkpoints show';
}

// ---- a session ----

function renderDetail() {
  const d = ui.detail;
  const s = d.summary;
  $('#empty-pane').hidden = true;
  $('#session-pane').hidden = false;
  $('#session-id').textContent = s.id;
  $('#session-agent').textContent = s.agent;
  $('#phase').replaceChildren(phaseBadge(s.phase));
  $('#phase').dataset.phase = s.phase;
  $('#session-steps').textContent = String(s.steps);
  $('#session-next').textContent = s.next_step || '—';
  $('#session-detail').textContent = s.detail ? (s.phase === 'failed' ? 'error: ' : 'signal: ') + s.detail : '';
  drawGraph(d);
  const waiting = $('#waiting-panel');
  if (d.interrupt) {
    const fresh = waiting.dataset.interrupt !== d.interrupt.id;
    waiting.hidden = false;
    waiting.dataset.interrupt = d.interrupt.id;
    $('#interrupt-step').textContent = 'step ' + d.interrupt.step + ', interrupt ' + d.interrupt.id;
    $('#interrupt-payload').replaceChildren(tree(d.interrupt.payload));
    $('#answer-form').hidden = !d.writable;
    $('#answer-readonly').hidden = d.writable;
    if (fresh) {
      $('#answer').value = '';
      $('#answer-error').textContent = '';
      $('#answer-status').textContent = '';
      $('#answer-submit').disabled = false;
    }
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
    $('#fork-fields').textContent = 'fields of an update: ' + Object.keys(d.update_schema.properties).join(', ');
  }
}

function renderTimeline() {
  const t = ui.timeline;
  $('#timeline-note').textContent = t.merged
    ? 'each checkpoint and what it changed in the state'
    : 'each checkpoint as stored (what it changed needs the agent\u2019s reducers: serve the agent\u2019s own studio)';
  const latest = t.entries.length ? t.entries[t.entries.length - 1].seq : null;
  const shown = ui.seq === null ? latest : ui.seq;
  $('#timeline').replaceChildren(...t.entries.map((e) => {
    const li = el('li', { class: 'checkpoint' + (e.seq === shown ? ' selected' : ''), 'data-seq': String(e.seq), 'data-step': e.step },
      el('div', { class: 'cp-head' },
        el('span', { class: 'muted', text: '#' + e.index }),
        el('span', { class: 'step', text: e.step }),
        el('span', { class: 'muted', text: e.kind }),
        el('span', { class: 'muted', text: new Date(e.time).toLocaleTimeString() })));
    if (e.changes) {
      if (!e.changes.length) li.append(el('div', { class: 'change muted', text: e.kind === 'snapshot' ? 'the state at the start' : 'no change' }));
      for (const c of e.changes) {
        const text = c.op === 'changed' ? `${c.path}: ${compact(c.before)} → ${compact(c.after)}`
          : c.op === 'removed' ? `${c.path}: ${compact(c.before)}`
          : `${c.path}: ${compact(c.after)}`;
        li.append(el('div', { class: 'change op-' + c.op, text: (c.op === 'appended' ? '+ appended ' : c.op + ' ') + text }));
      }
    } else {
      li.append(el('div', { class: 'change', text: compact(e.value) }));
    }
    li.addEventListener('click', () => { ui.seq = e.seq; renderTimeline(); loadState(); });
    return li;
  }));
}

async function loadState() {
  const id = ui.selected;
  const q = ui.seq === null ? '' : '?seq=' + ui.seq;
  try {
    const s = await api(`/api/sessions/${encodeURIComponent(id)}/state${q}`);
    if (id !== ui.selected) return;
    $('#state-at').textContent = `after step ${s.index} (\`${s.step}\`, checkpoint ${s.seq})` + (s.merged ? '' : ' — as stored, not merged');
    const box = $('#state-tree');
    if (s.merged) {
      box.replaceChildren(tree(s.state));
    } else {
      box.replaceChildren();
      if (s.snapshot) box.append(el('div', { class: 'muted', text: `snapshot of checkpoint ${s.snapshot.seq} (step ${s.snapshot.index}, \`${s.snapshot.step}\`):` }), tree(s.snapshot.value));
      if (s.updates.length) box.append(el('div', { class: 'muted', text: 'updates after it, unmerged:' }));
      for (const u of s.updates) box.append(el('div', { class: 'muted', text: `checkpoint ${u.seq} (\`${u.step}\`)` }), tree(u.value));
    }
    $('#fork-form').dataset.index = String(s.index);
    $('#fork-form h4').textContent = `Fork after step ${s.index} (\`${s.step}\`)`;
  } catch (e) {
    $('#session-error').textContent = e.message;
  }
}

async function loadSession() {
  const id = ui.selected;
  if (!id) return;
  try {
    const [detail, timeline] = await Promise.all([
      api(`/api/sessions/${encodeURIComponent(id)}`),
      api(`/api/sessions/${encodeURIComponent(id)}/timeline`),
    ]);
    if (id !== ui.selected) return;
    ui.detail = detail;
    ui.timeline = timeline;
    $('#session-error').textContent = '';
    renderDetail();
    renderTimeline();
    await loadState();
  } catch (e) {
    $('#session-error').textContent = e.message;
  }
}

function select(id) {
  if (ui.selected !== id) ui.seq = null;
  ui.selected = id;
  history.replaceState(null, '', location.search + '#session=' + encodeURIComponent(id));
  renderList();
  loadSession();
}

// ---- writes ----

$('#answer-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const d = ui.detail;
  const error = $('#answer-error');
  error.textContent = '';
  let answer;
  try {
    answer = JSON.parse($('#answer').value);
  } catch (e) {
    error.textContent = 'not JSON: ' + e.message + ' (a text answer is quoted: "yes")';
    return;
  }
  $('#answer-submit').disabled = true;
  try {
    await api(`/api/sessions/${encodeURIComponent(d.summary.id)}/answer`, {
      method: 'POST',
      body: JSON.stringify({ interrupt: d.interrupt.id, answer }),
    });
    $('#answer-status').textContent = 'answered; following the run…';
  } catch (e) {
    error.textContent = e.message;
    $('#answer-submit').disabled = false;
  }
});

$('#fork-form').addEventListener('submit', async (ev) => {
  ev.preventDefault();
  const error = $('#fork-error');
  error.textContent = '';
  let update;
  try {
    update = JSON.parse($('#fork-update').value);
  } catch (e) {
    error.textContent = 'not JSON: ' + e.message;
    return;
  }
  try {
    const index = Number($('#fork-form').dataset.index);
    const r = await api(`/api/sessions/${encodeURIComponent(ui.selected)}/fork`, {
      method: 'POST',
      body: JSON.stringify({ index, update }),
    });
    $('#fork-status').textContent = 'forked: ' + r.session;
    await loadList();
    select(r.session);
  } catch (e) {
    error.textContent = e.message;
  }
});

$('#answer').addEventListener('input', () => { $('#answer-error').textContent = ''; });
$('#fork-update').addEventListener('input', () => { $('#fork-error').textContent = ''; });
$('#search').addEventListener('input', renderList);
$('#phase-filter').addEventListener('change', renderList);

// ---- live ----

function follow() {
  const events = new EventSource('/api/events?token=' + encodeURIComponent(token));
  events.addEventListener('open', () => { $('#live').textContent = 'live'; $('#live').classList.add('on'); });
  events.addEventListener('error', () => { $('#live').textContent = 'reconnecting…'; $('#live').classList.remove('on'); });
  events.addEventListener('sessions', (m) => {
    const list = JSON.parse(m.data);
    ui.sessions = new Map(list.map((s) => [s.id, s]));
    renderList();
    if (ui.selected) loadSession();
  });
  events.addEventListener('session', (m) => {
    const s = JSON.parse(m.data);
    ui.sessions.set(s.id, s);
    renderList();
    if (s.id === ui.selected) loadSession();
  });
  events.addEventListener('removed', (m) => {
    ui.sessions.delete(JSON.parse(m.data).id);
    renderList();
  });
}

async function start() {
  try {
    ui.info = await api('/api/info');
  } catch (e) {
    $('#list-error').textContent = e.message;
    return;
  }
  $('#title').textContent = ui.info.title;
  $('#mode').textContent = ui.info.writable ? 'answers and forks' : 'read-only';
  await loadList();
  const m = location.hash.match(/session=([^&]+)/);
  if (m) select(decodeURIComponent(m[1]));
  follow();
}

start();
