// The chat page at / (web/, built into ft) in Debian's Chromium, headless, driven by puppeteer-core,
// against `ft serve` on the demo model (FT_E2E_WEBUI_URL, started by e2e_test.cpp): a message gets a
// streamed reply (several content updates), Stop ends a long reply early, and after a reload the
// conversation is still in the list. A screenshot goes to $FT_SCREENSHOT_DIR (the build folder) or
// the OS temp folder. Fails when Chromium, puppeteer-core or the server is missing.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import puppeteer from 'puppeteer-core';

const URL_ = process.env.FT_E2E_WEBUI_URL;
const CHROMIUM = process.env.FT_CHROMIUM || '/usr/bin/chromium';
let browser;
let page;

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
});

after(async () => { await browser?.close(); });

/** The assistant bubbles' text and their data-updates / data-done attributes. */
async function replies() {
  return page.$$eval('.msg.assistant', (els) =>
    els.map((e) => ({ text: e.querySelector('.content').textContent, updates: Number(e.dataset.updates || 0),
                      done: e.dataset.done === '1', note: e.querySelector('.note')?.textContent || '' })));
}

async function setField(id, value) {
  await page.$eval(`#${id}`, (el, v) => { el.value = v; el.dispatchEvent(new Event('input')); el.dispatchEvent(new Event('change')); }, value);
}

test('the page loads with the served model and live stats', async () => {
  const res = await page.goto(URL_ + '/', { waitUntil: 'load' });
  assert.equal(res.status(), 200);
  assert.match(res.headers()['content-type'], /^text\/html/);
  await page.waitForFunction(() => document.getElementById('model-name').textContent === 'freetoken-demo', { timeout: 10000 });
  await page.waitForFunction(() => /tok\/s/.test(document.getElementById('stats').textContent), { timeout: 10000 });
  const stats = await page.$eval('#stats', (e) => e.textContent);
  assert.match(stats, /KV \d+\/64 pages/);
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
  await page.type('#input', 'A long one, please');
  await page.click('#send');
  // Wait for the reply to be streaming, then stop it.
  await page.waitForFunction(() => Number(document.querySelectorAll('.msg.assistant')[1]?.dataset.updates || 0) >= 3,
                             { timeout: 30000 });
  assert.equal(await page.$eval('#stop', (e) => e.disabled), false);
  await page.click('#stop');
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
