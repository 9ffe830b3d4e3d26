// The chat page at / (web/, built into ft) in Debian's Chromium, headless, driven by puppeteer-core,
// against `ft serve` on the demo model (FT_E2E_WEBUI_URL, started by e2e_test.cpp): a message gets a
// streamed reply (several content updates), Stop ends a long reply early, and after a reload the
// conversation is still in the list. A screenshot goes to $FT_SCREENSHOT_DIR (the build folder) or
// the OS temp folder. Against a second server started with --api-key (FT_E2E_WEBUI_KEY_URL, key
// FT_E2E_WEBUI_KEY): without a key the page does not poll /v1/stats, a wrong key is shown refused
// with the unsent message kept in the input (no chat left in the sidebar, the refused key not saved),
// and the right key is saved and sends it. No page request is a 404.
// Fails when Chromium, puppeteer-core or the server is missing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const URL_ = process.env.FT_E2E_WEBUI_URL;
const KEY_URL = process.env.FT_E2E_WEBUI_KEY_URL;
const KEY = process.env.FT_E2E_WEBUI_KEY;
const CHROMIUM = process.env.FT_CHROMIUM || '/usr/bin/chromium';
let browser;
let page;
const notFound = [];  // the URLs any page got a 404 for

/** Calls `on` with "METHOD /path STATUS" for each response `p` gets, and notes its 404s. */
function watch(p, on = () => {}) {
  p.on('response', (r) => {
    const line = `${r.request().method()} ${new URL(r.url()).pathname} ${r.status()}`;
    if (r.status() === 404) notFound.push(r.url());
    on(line);
  });
}

before(async () => {
  assert.ok(URL_, 'FT_E2E_WEBUI_URL is not set (run through test_e2e)');
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run \`make deps\` (apt-get install chromium)`);
  browser = await puppeteer.launch({
    executablePath: CHROMIUM,
    headless: true,
    args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage'],
  });
  page = await browser.newPage();
  await page.setViewport({ width: 1200, height: 800 });
  page.on('pageerror', (e) => console.log('page error:', e.message));
  watch(page);
});

after(async () => { await browser?.close(); });

/** The assistant bubbles' text and their data-updates / data-done attributes. */
async function replies() {
  return page.$$eval('.msg.assistant', (els) =>
    els.map((e) => ({ text: e.querySelector('.content').textContent, updates: Number(e.dataset.updates || 0),
                      done: e.dataset.done === '1', note: e.querySelector('.note')?.textContent || '' })));
}

async function setField(id, value, p = page) {
  await p.$eval(`#${id}`, (el, v) => { el.value = v; el.dispatchEvent(new Event('input')); el.dispatchEvent(new Event('change')); }, value);
}

test('the page loads with the served model and live stats', async () => {
  const res = await page.goto(URL_ + '/', { waitUntil: 'load' });
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /^text\/html/);
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'freetoken-demo', { timeout: 10000 });
  await page.waitForFunction(() => /KV \d+\/64 pages/.test(document.getElementById('stats').textContent), { timeout: 10000 });
  const stats = await page.$eval('#stats', (e) => e.textContent);
  assert.match(stats, /0 running/);
  assert.doesNotMatch(stats, /tok\/s/, 'no request runs: no rate in the header');
});

test('a message gets a streamed reply', async () => {
  await setField('max-tokens', '48');
  await setField('extra', '{"ignore_eos": true, "stream_options": {"include_usage": true}}');
  await page.type('#input', 'Hello from Chromium');
  await page.click('#send');
  await page.waitForFunction(() => document.querySelector('.msg.assistant')?.dataset.done === '1', { timeout: 30000 });
  const [r] = await replies();
  assert.ok(r.updates >= 2, `expected several streamed updates, got ${r.updates}`);
  assert.ok(r.text.length > 0, 'the reply is empty');
  assert.match(r.note, /48 tokens/);  // the stream's usage chunk: the whole reply arrived
  const user = await page.$eval('.msg.user', (e) => e.textContent);
  assert.equal(user, 'Hello from Chromium');
  const title = await page.$eval('#conv-list li.active .title', (e) => e.textContent);
  assert.equal(title, 'Hello from Chromium');
});

test('Stop ends a long reply early', async () => {
  await setField('max-tokens', '3900');
  // Stop is clicked by the page itself once the reply has streamed 3 updates: the demo model writes
  // thousands of tokens a second, faster than a round trip of puppeteer's polling on a busy machine.
  await page.evaluate(() => {
    window.stopClicked = null;
    const obs = new MutationObserver(() => {
      const d = document.querySelectorAll('.msg.assistant')[1];
      if (Number(d?.dataset.updates || 0) < 3) return;
      obs.disconnect();
      window.stopClicked = { enabled: !document.getElementById('stop').disabled };
      document.getElementById('stop').click();
    });
    obs.observe(document.getElementById('messages'), { attributes: true, subtree: true, attributeFilter: ['data-updates'] });
  });
  await page.type('#input', 'A long one, please');
  await page.click('#send');
  await page.waitForFunction(() => window.stopClicked, { timeout: 30000 });
  assert.deepEqual(await page.evaluate(() => window.stopClicked), { enabled: true });
  await page.waitForFunction(() => document.querySelectorAll('.msg.assistant')[1]?.dataset.done === '1', { timeout: 10000 });
  const r = (await replies())[1];
  assert.equal(r.note, 'stopped');
  const updatesAtStop = r.updates;
  assert.ok(updatesAtStop < 3900, `the reply ran to the end (${updatesAtStop} updates)`);
  await new Promise((res) => setTimeout(res, 500));
  assert.equal((await replies())[1].updates, updatesAtStop, 'the reply kept growing after Stop');
  assert.equal(await page.$eval('#send', (e) => e.disabled), false);
  // The server cancelled it: nothing is running once the disconnect is seen.
  let running = -1;
  for (let i = 0; i < 50 && running !== 0; i++) {
    running = (await (await fetch(URL_ + '/v1/stats')).json()).requests.running;
    if (running !== 0) await new Promise((res) => setTimeout(res, 100));
  }
  assert.equal(running, 0, 'the server still runs the stopped request');
  // Nothing runs: the header drops the rate (it does not keep the last one).
  await page.waitForFunction(() => /0 running/.test(document.getElementById('stats').textContent), { timeout: 10000 });
  assert.doesNotMatch(await page.$eval('#stats', (e) => e.textContent), /tok\/s/);
});

test('after a reload the conversation is still there', async () => {
  await page.reload({ waitUntil: 'load' });
  const titles = await page.$$eval('#conv-list .title', (els) => els.map((e) => e.textContent));
  assert.deepEqual(titles, ['Hello from Chromium']);
  const msgs = await page.$$eval('.msg', (els) => els.map((e) => e.className));
  assert.deepEqual(msgs, ['msg user', 'msg assistant', 'msg user', 'msg assistant']);
  assert.equal((await replies())[1].note, 'stopped');
  // A new conversation is added to the list, and deleting it leaves the first.
  await page.click('#new-chat');
  assert.equal((await page.$$('#conv-list li')).length, 2);
  assert.equal((await page.$$('.msg')).length, 0);
  await page.click('#conv-list li.active .delete');
  assert.equal((await page.$$('#conv-list li')).length, 1);
  assert.equal((await page.$$('.msg')).length, 4);

  const dir = process.env.FT_SCREENSHOT_DIR || os.tmpdir();
  const file = path.join(dir, 'webui.png');
  await page.screenshot({ path: file, fullPage: true });
  assert.ok(fs.statSync(file).size > 1000);
  console.log(`screenshot: ${file}`);
});

test('with --api-key: no stats poll without a key, a refused key is shown, the unsent message is kept', async () => {
  assert.ok(KEY_URL && KEY, 'FT_E2E_WEBUI_KEY_URL / FT_E2E_WEBUI_KEY are not set (run through test_e2e)');
  const p = await browser.newPage();  // another origin (port): its own localStorage, no key in it
  p.on('pageerror', (e) => console.log('page error:', e.message));
  const seen = [];
  watch(p, (line) => seen.push(line));
  const start = Date.now();
  await p.goto(KEY_URL + '/', { waitUntil: 'load' });
  await p.waitForFunction(() => document.getElementById('model-name').textContent === 'API key needed', { timeout: 10000 });
  assert.equal(await p.$eval('#auth-prompt', (e) => e.hidden), false);
  assert.equal(await p.$eval('#auth-error', (e) => e.hidden), true);  // no key was sent: nothing refused

  // Sent without a key: a 401, the message back in the input, nothing left in the conversation.
  const text = () => p.$eval('#error', (e) => (e.hidden ? '' : e.textContent));
  await p.type('#input', 'Keep this message');
  await p.click('#send');
  await p.waitForFunction(() => !document.getElementById('error').hidden, { timeout: 10000 });
  assert.match(await text(), /needs an API key: enter it above and send again/);
  assert.equal(await p.$eval('#input', (e) => e.value), 'Keep this message');
  assert.equal((await p.$$('.msg')).length, 0);
  assert.equal((await p.$$('#conv-list li')).length, 0, 'the unsent message left a chat in the sidebar');

  // A wrong key: refused next to the key box, which stays open; sending again keeps the message.
  await p.type('#auth-key', 'not-the-key');
  await p.click('#auth-form button');
  await p.waitForFunction(() => !document.getElementById('auth-error').hidden, { timeout: 10000 });
  assert.match(await p.$eval('#auth-error', (e) => e.textContent), /refused this API key \(401/);
  assert.equal(await p.$eval('#model-name', (e) => e.textContent), 'API key refused');
  assert.equal(await p.$eval('#auth-prompt', (e) => e.hidden), false);
  await p.click('#send');
  await p.waitForFunction(() => /refused the API key/.test(document.getElementById('error').textContent), { timeout: 10000 });
  assert.equal(await p.$eval('#input', (e) => e.value), 'Keep this message');
  assert.equal((await p.$$('.msg')).length, 0);
  const saved = await p.evaluate(() => JSON.parse(localStorage.getItem('ft.conversations')));
  assert.deepEqual(saved, [], 'a 401 left a saved conversation');
  assert.equal((await p.$$('#conv-list li')).length, 0, 'the unsent message left a chat in the sidebar');
  assert.equal(await p.evaluate(() => localStorage.getItem('ft.apiKey')), null, 'the refused key was saved');
  await p.setViewport({ width: 1000, height: 500 });
  await p.screenshot({ path: path.join(process.env.FT_SCREENSHOT_DIR || os.tmpdir(), 'webui-key.png') });

  // Past one poll interval (3 s) since the page loaded: still no /v1/stats request.
  const wait = 3300 - (Date.now() - start);
  if (wait > 0) await new Promise((res) => setTimeout(res, wait));
  assert.deepEqual(seen.filter((l) => l.includes('/v1/stats')), [], seen.join('\n'));
  assert.ok(seen.includes('GET /v1/models 401'), seen.join('\n'));

  // The right key: the box closes, the model and the stats poll come back, and the kept message sends.
  await p.$eval('#auth-key', (e) => { e.value = ''; });
  await p.type('#auth-key', KEY);
  await p.click('#auth-form button');
  await p.waitForFunction(() => document.getElementById('model-name').textContent === 'freetoken-demo', { timeout: 10000 });
  assert.equal(await p.$eval('#auth-prompt', (e) => e.hidden), true);
  await p.waitForFunction(() => /running/.test(document.getElementById('stats').textContent), { timeout: 10000 });
  assert.ok(seen.includes('GET /v1/stats 200'), seen.join('\n'));
  assert.equal(await p.evaluate(() => localStorage.getItem('ft.apiKey')), KEY, 'the key the server took is kept');
  await setField('max-tokens', '4', p);
  await p.click('#send');
  await p.waitForFunction(() => document.querySelector('.msg.assistant')?.dataset.done === '1', { timeout: 30000 });
  assert.equal(await p.$eval('.msg.user', (e) => e.textContent), 'Keep this message');
  assert.match(await p.$eval('.msg.assistant .note', (e) => e.textContent), /\b[1-4] tokens$/);
  assert.equal(await text(), '');
  assert.equal(await p.$eval('#input', (e) => e.value), '');
  assert.deepEqual(await p.$$eval('#conv-list .title', (els) => els.map((e) => e.textContent)), ['Keep this message']);
  await p.close();
  assert.deepEqual(notFound, [], 'pages asked for something that is not there');
});
