// FreeToken chat page: conversations in localStorage, streamed replies from /v1/chat/completions (SSE),
// a Stop button (aborting the fetch; the server cancels the request when the connection closes), and
// the served model and /v1/stats in the header. With `ft serve --api-key`, a 401 opens the key box
// (saying when a key that was sent was refused), stops the /v1/stats poll until a key is entered, and
// gives an unsent message back to the input (a conversation started by that message is dropped); a key is
// kept in localStorage only once the server took it. No dependencies, no build step.
'use strict';

const $ = (id) => document.getElementById(id);
const KEYS = { convs: 'ft.conversations', current: 'ft.current', settings: 'ft.settings', apiKey: 'ft.apiKey' };
const STATS_EVERY_MS = 3000;

let convs = load(KEYS.convs, []);
let currentId = localStorage.getItem(KEYS.current);
let settings = load(KEYS.settings, {});
let modelName = null;
let controller = null;  // the AbortController of the reply being streamed
// No /v1/stats polls before /v1/models answered, nor after a 401 until a key is entered (setKey).
let statsPaused = true;

function load(key, fallback) {
  try { return JSON.parse(localStorage.getItem(key)) ?? fallback; } catch { return fallback; }
}
function saveConvs() {
  localStorage.setItem(KEYS.convs, JSON.stringify(convs));
  if (currentId) localStorage.setItem(KEYS.current, currentId);
  else localStorage.removeItem(KEYS.current);
}
// The key in use: the stored one, or one entered and not yet taken by the server (stored once it is: storeKey).
let keyInUse = localStorage.getItem(KEYS.apiKey) || '';
function apiKey() { return keyInUse; }
/** Keeps the key in use in localStorage (none: removed); called once a request with it succeeded. */
function storeKey() {
  if (keyInUse) localStorage.setItem(KEYS.apiKey, keyInUse);
  else localStorage.removeItem(KEYS.apiKey);
}
function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (apiKey()) h.Authorization = 'Bearer ' + apiKey();
  return h;
}
function current() { return convs.find((c) => c.id === currentId) || null; }

// ---- Markdown: HTML is escaped first; then fenced code blocks, `code`, **bold** and paragraphs.
function escapeHtml(s) {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]);
}
function inline(s) {
  return s.replace(/`([^`\n]+)`/g, '<code>$1</code>').replace(/\*\*([^*\n]+)\*\*/g, '<strong>$1</strong>');
}
function markdown(text) {
  const parts = escapeHtml(text).split(/^```[^\n]*\n?/m);  // odd parts are inside a fence (an open one too)
  return parts.map((part, i) => {
    if (i % 2 === 1) return '<pre><code>' + part.replace(/\n$/, '') + '</code></pre>';
    return part.split(/\n{2,}/).filter((p) => p.trim() !== '')
      .map((p) => '<p>' + inline(p.trim()).replace(/\n/g, '<br>') + '</p>').join('');
  }).join('');
}

// ---- Conversations list.
function newConversation() {
  const c = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: 'New chat', messages: [] };
  convs.unshift(c);
  currentId = c.id;
  saveConvs();
  render();
  $('input').focus();
  return c;
}
function deleteConversation(id) {
  convs = convs.filter((c) => c.id !== id);
  if (currentId === id) currentId = convs[0]?.id ?? null;
  saveConvs();
  render();
}
function renderList() {
  const ul = $('conv-list');
  ul.replaceChildren();
  for (const c of convs) {
    const li = document.createElement('li');
    li.className = c.id === currentId ? 'active' : '';
    li.dataset.id = c.id;
    const title = document.createElement('span');
    title.className = 'title';
    title.textContent = c.title;
    title.title = c.title;
    title.onclick = () => { if (!controller) { currentId = c.id; saveConvs(); render(); } };
    const del = document.createElement('button');
    del.className = 'delete';
    del.type = 'button';
    del.textContent = '×';
    del.title = 'Delete this conversation';
    del.onclick = () => { if (!controller || c.id !== currentId) deleteConversation(c.id); };
    li.append(title, del);
    ul.append(li);
  }
}

// ---- Messages.
function fillBubble(div, m) {
  div.replaceChildren();
  if (m.reasoning) {
    const d = document.createElement('details');
    d.className = 'reasoning';
    d.innerHTML = '<summary>Reasoning</summary>';
    const body = document.createElement('div');
    body.textContent = m.reasoning;
    d.append(body);
    div.append(d);
  }
  for (const t of m.tool_calls || []) {
    const d = document.createElement('details');
    d.className = 'tool-call';
    d.open = true;
    const s = document.createElement('summary');
    s.textContent = 'Tool call: ' + (t.function?.name || '?');
    const body = document.createElement('div');
    body.textContent = t.function?.arguments || '';
    d.append(s, body);
    div.append(d);
  }
  const content = document.createElement('div');
  content.className = 'content';
  content.innerHTML = m.role === 'user' ? escapeHtml(m.content) : markdown(m.content || '');
  div.append(content);
  if (m.note) {
    const n = document.createElement('div');
    n.className = 'note';
    n.textContent = m.note;
    div.append(n);
  }
}
function bubble(m) {
  const div = document.createElement('div');
  div.className = 'msg ' + m.role;
  fillBubble(div, m);
  return div;
}
function renderMessages() {
  const box = $('messages');
  box.replaceChildren(...(current()?.messages ?? []).map(bubble));
  box.scrollTop = box.scrollHeight;
}
function render() { renderList(); renderMessages(); }

function showError(text) {
  $('error').textContent = text;
  $('error').hidden = !text;
}

// ---- Sending and streaming.
function requestBody(conv) {
  const messages = [];
  if (settings.system) messages.push({ role: 'system', content: settings.system });
  for (const m of conv.messages) {
    if (m.role === 'user') messages.push({ role: 'user', content: m.content });
    else if (m.content || m.tool_calls?.length) {
      const a = { role: 'assistant', content: m.content || '' };
      if (m.tool_calls?.length) a.tool_calls = m.tool_calls;
      messages.push(a);
    }
  }
  const body = { messages, stream: true, stream_options: { include_usage: true } };
  if (modelName) body.model = modelName;
  if (settings.temperature !== '' && settings.temperature != null) body.temperature = Number(settings.temperature);
  if (settings.top_p !== '' && settings.top_p != null) body.top_p = Number(settings.top_p);
  if (settings.max_tokens !== '' && settings.max_tokens != null) body.max_tokens = Number(settings.max_tokens);
  if (settings.extra) Object.assign(body, JSON.parse(settings.extra));
  return body;
}

/** Applies one chat.completion.chunk to the reply `m`. */
function applyChunk(m, chunk) {
  if (chunk.usage) m.usage = chunk.usage;
  const choice = chunk.choices?.[0];
  if (!choice) return;
  const d = choice.delta || {};
  if (d.reasoning_content) m.reasoning = (m.reasoning || '') + d.reasoning_content;
  if (d.content) m.content += d.content;
  for (const t of d.tool_calls || []) {
    m.tool_calls = m.tool_calls || [];
    const slot = (m.tool_calls[t.index ?? m.tool_calls.length] ||= { id: t.id, type: 'function', function: { name: '', arguments: '' } });
    if (t.id) slot.id = t.id;
    if (t.function?.name) slot.function.name += t.function.name;
    if (t.function?.arguments) slot.function.arguments += t.function.arguments;
  }
  if (choice.finish_reason) m.finish = choice.finish_reason;
}

async function send(text) {
  const before = currentId;
  const created = !current();  // this message starts a conversation: dropped again if it is not sent
  let conv = current() || newConversation();
  if (conv.messages.length === 0) conv.title = text.slice(0, 40);
  conv.messages.push({ role: 'user', content: text });
  const reply = { role: 'assistant', content: '' };
  conv.messages.push(reply);
  saveConvs();
  render();
  const div = $('messages').lastElementChild;
  let updates = 0;
  const update = () => {
    fillBubble(div, reply);
    div.dataset.updates = String(++updates);
    $('messages').scrollTop = $('messages').scrollHeight;
  };
  showError('');
  controller = new AbortController();
  setBusy(true);
  let unsent = false;
  try {
    const res = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(requestBody(conv)), signal: controller.signal,
    });
    if (res.status === 401) {
      // Not sent: the message leaves the conversation and goes back to the input, to be sent again.
      unsent = true;
      conv.messages.splice(conv.messages.indexOf(reply) - 1, 2);
      if (conv.messages.length === 0) conv.title = 'New chat';
      if (created && conv.messages.length === 0) {
        convs = convs.filter((c) => c !== conv);
        currentId = convs.some((c) => c.id === before) ? before : null;
      }
      if (!$('input').value) $('input').value = text;
      const refused = keyRefused();
      throw new Error(refused ? 'The server refused the API key (401): enter the right one above and send again.'
                              : 'The server needs an API key: enter it above and send again.');
    }
    if (!res.ok) {
      const err = await res.json().catch(() => null);
      throw new Error(err?.error?.message || `HTTP ${res.status}`);
    }
    storeKey();
    await readSse(res.body, (data) => { applyChunk(reply, JSON.parse(data)); update(); });
    reply.note = noteFor(reply);
  } catch (e) {
    if (e.name === 'AbortError') reply.note = 'stopped';
    else if (unsent) showError(e.message);
    else { reply.note = 'error'; showError(e.message); }
  } finally {
    controller = null;
    setBusy(false);
    if (unsent) render();
    else {
      fillBubble(div, reply);
      div.dataset.done = '1';
    }
    saveConvs();
    loadStats();  // the header's rate goes as the request ends, not at the next poll
  }
}

function noteFor(m) {
  const parts = [];
  if (m.finish && m.finish !== 'stop') parts.push('finish: ' + m.finish);
  if (m.usage) parts.push(`${m.usage.completion_tokens} tokens`);
  return parts.join(' · ');
}

/** Calls onData with each SSE event's data (until "[DONE]"). */
async function readSse(stream, onData) {
  const reader = stream.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value.replace(/\r\n/g, '\n');
    let end;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, end);
      buf = buf.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trimStart()).join('\n');
      if (data === '[DONE]') return;
      if (data) onData(data);
    }
  }
}

function setBusy(busy) {
  $('send').disabled = busy;
  $('stop').disabled = !busy;
}

// ---- API key.
/** After a 401: opens the key box, pauses the /v1/stats poll, and says whether the key sent was
 *  refused (true) or none was set (false). */
function keyRefused() {
  statsPaused = true;
  const refused = apiKey() !== '';
  localStorage.removeItem(KEYS.apiKey);  // a refused key is not kept for the next visit
  $('auth-prompt').hidden = false;
  $('auth-error').textContent = refused ? 'The server refused this API key (401 Unauthorized).' : '';
  $('auth-error').hidden = !refused;
  $('model-name').textContent = refused ? 'API key refused' : 'API key needed';
  $('auth-key').focus();
  return refused;
}

// ---- Model name and live stats.
/** Shows the served model; false when the server answered 401 (the key box is open then). */
async function loadModel() {
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    if (res.status === 401) { keyRefused(); return false; }
    const j = await res.json();
    modelName = j.data?.[0]?.id ?? null;
    if (res.ok) storeKey();
    $('model-name').textContent = modelName || 'no model';
  } catch { $('model-name').textContent = 'server unreachable'; }
  return true;
}
function bytes(n) {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(i ? 1 : 0)} ${units[i]}`;
}
async function loadStats() {
  if (statsPaused) return;  // a 401 came back: no key to poll with until one is entered
  try {
    const res = await fetch('/v1/stats', { headers: headers() });
    if (res.status === 401) { keyRefused(); return; }
    if (!res.ok) return;
    const s = await res.json();
    const parts = [];
    const tp = s.throughput;
    // The rate (a window's average) only while requests run: idle, an old figure would read as current.
    const busy = (s.requests?.running ?? 0) + (s.requests?.waiting ?? 0) > 0;
    if (tp && busy) parts.push(`${(tp.generation_tokens_per_s ?? 0).toFixed(1)} tok/s`);
    if (s.kv) parts.push(`KV ${s.kv.pages_used}/${s.kv.pages_total} pages`);
    if (s.moe && typeof s.moe === 'object' && s.moe.hit_rate != null) parts.push(`expert hits ${(100 * s.moe.hit_rate).toFixed(1)}%`);
    if (s.memory) parts.push(`memory ${bytes(s.memory.device_bytes || 0)} device, ${bytes(s.memory.host_bytes || 0)} host`);
    if (s.requests) parts.push(`${s.requests.running} running`);
    $('stats').textContent = parts.join(' · ');
  } catch { /* the next poll tries again */ }
}

// ---- Settings.
const FIELDS = { system: 'system', temperature: 'temperature', top_p: 'top-p', max_tokens: 'max-tokens', extra: 'extra' };
function bindSettings() {
  for (const [key, id] of Object.entries(FIELDS)) {
    $(id).value = settings[key] ?? '';
    $(id).addEventListener('input', () => {
      settings[key] = $(id).value;
      localStorage.setItem(KEYS.settings, JSON.stringify(settings));
    });
  }
  $('extra').addEventListener('change', () => {
    try { if ($('extra').value) JSON.parse($('extra').value); showError(''); } catch { showError('Extra request JSON is not valid JSON'); }
  });
  $('api-key').value = apiKey();
  $('api-key').addEventListener('change', () => setKey($('api-key').value));
}
/** Tries `key` on /v1/models: when it is taken it is stored, the key box closes and the stats poll
 *  resumes; on a 401 the box stays open, says the key was refused, and nothing is stored. */
async function setKey(key) {
  keyInUse = key;
  $('api-key').value = key;
  showError('');
  if (!(await loadModel())) return;
  $('auth-prompt').hidden = true;
  $('auth-error').hidden = true;
  statsPaused = false;
  loadStats();
}

// ---- Start.
function start() {
  bindSettings();
  $('new-chat').onclick = () => { if (!controller) newConversation(); };
  $('stop').onclick = () => controller?.abort();
  $('auth-form').onsubmit = (e) => { e.preventDefault(); setKey($('auth-key').value.trim()); };
  $('composer').onsubmit = (e) => {
    e.preventDefault();
    const text = $('input').value.trim();
    if (!text || controller) return;
    $('input').value = '';
    send(text);
  };
  $('input').addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) { e.preventDefault(); $('composer').requestSubmit(); }
  });
  if (!current()) currentId = convs[0]?.id ?? null;
  render();
  // The stats poll starts once /v1/models answered: after a 401 there is no key to poll with.
  loadModel().then((ok) => { if (ok) { statsPaused = false; loadStats(); } });
  setInterval(loadStats, STATS_EVERY_MS);
}
start();
