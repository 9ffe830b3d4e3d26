// The README's examples as a new user runs them (issue 41): every fenced block in README.md whose
// info string names a file (```js openai.mjs) or a shell example (```sh first-curl) is run against
// `ft serve` on the demo model, with the README's address (127.0.0.1:1919) replaced by the test
// server's. A JavaScript example runs with node from a scratch folder that sees tests/e2e/node_modules
// (the packages the README tells users to install); a shell example runs with bash -e. Each must exit 0
// and print a reply. Started by tests/e2e/e2e_test.cpp (ctest: E2E.ReadmeExamplesRunAsWritten), which
// passes FT_BINARY.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const FT = process.env.FT_BINARY;
if (!FT) throw new Error('run through ctest (E2E): FT_BINARY is not set');
const here = path.dirname(fileURLToPath(import.meta.url));
const README = readFileSync(path.join(here, '..', '..', 'README.md'), 'utf8');

/** The README's runnable examples: [{ lang, name, code }] from fences "```js NAME.mjs" / "```sh NAME". */
function examples(text) {
  const out = [];
  const re = /^```(js|sh) ([A-Za-z0-9._-]+)\n([\s\S]*?)^```$/gm;
  for (let m; (m = re.exec(text));) out.push({ lang: m[1], name: m[2], code: m[3] });
  return out;
}

let server, base, scratch;

before(async () => {
  scratch = mkdtempSync(path.join(tmpdir(), 'ft-readme-'));
  symlinkSync(path.join(here, 'node_modules'), path.join(scratch, 'node_modules'));
  // A fixed --seed: the examples sample (the SDKs' default temperatures) from random demo weights, and an
  // unseeded draw sometimes ended a reply at its first token, so an example printed nothing.
  server = spawn(FT, ['serve', '--port', '0', '--threads', '1', '--seed', '1919'], { stdio: ['ignore', 'pipe', 'pipe'] });
  server.stderr.resume();
  base = await new Promise((resolve, reject) => {
    let seen = '';
    const timer = setTimeout(() => reject(new Error(`ft serve did not start: ${seen}`)), 60_000);
    server.stdout.on('data', (d) => {
      seen += d.toString();
      const m = /listening on http:\/\/([0-9.]+:[0-9]+)\/v1/.exec(seen);
      if (m) {
        clearTimeout(timer);
        server.stdout.removeAllListeners('data');
        server.stdout.resume();
        resolve(m[1]);
      }
    });
    server.on('exit', (code) => reject(new Error(`ft serve exited ${code}: ${seen}`)));
  });
});

after(() => {
  server?.kill('SIGTERM');
  if (scratch) rmSync(scratch, { recursive: true, force: true });
});

const found = examples(README);

test('the README has the client examples issue 41 lists', () => {
  const names = found.map((e) => e.name);
  for (const n of ['first-curl', 'openai.mjs', 'anthropic.mjs', 'ai-sdk.mjs', 'langchain.mjs', 'open-webui',
                   'llama-completion'])
    assert.ok(names.includes(n), `README.md has no example named ${n} (found: ${names.join(', ')})`);
  for (const e of found) assert.match(e.code, /127\.0\.0\.1:1919/, `${e.name} does not use the README's address`);
});

for (const e of found) {
  test(`README example ${e.name} runs as written`, () => {
    const code = e.code.replaceAll('127.0.0.1:1919', base);
    let out;
    if (e.lang === 'js') {
      const file = path.join(scratch, e.name);
      writeFileSync(file, code);
      out = execFileSync('node', [file], { cwd: scratch, encoding: 'utf8', timeout: 60_000 });
    } else {
      out = execFileSync('bash', ['-e', '-o', 'pipefail', '-c', code], { cwd: scratch, encoding: 'utf8', timeout: 60_000 });
    }
    assert.ok(out.trim().length > 0, `${e.name} printed nothing`);
    if (e.lang === 'sh') {
      // Every JSON object or SSE event the server sent parses, and none is an error.
      for (const line of out.split('\n')) {
        const t = line.startsWith('data: ') ? line.slice(6) : line;
        if (!t.startsWith('{')) continue;
        const j = JSON.parse(t);
        assert.equal(j.error, undefined, `${e.name}: ${t}`);
      }
      assert.doesNotMatch(out, /"error"/, `${e.name}: ${out}`);
    }
  });
}
