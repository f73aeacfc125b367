// Drives the demo page's harness (clients/web/page/app.ts, `?harness`) in Debian's headless
// Chromium with playwright-core from clients/web/node_modules (never a browser download): the
// simulated users of each task through the device role inside the page, a reload of the page
// halfway through with reports still in its IndexedDB outbox (and uploads racing the reload),
// then the rest, until the outbox is empty. Launched by privbandit/web_page.py's drive_page
// (tests/e2e/test_web_client.py, bench/web_client.py): `node page/drive.mjs JOB.json`; prints
// one JSON result.
//
// JOB: {url, webRoot, userDataDir, chromium, concurrency, reload, held, timing,
//       tasks: [{id, users: FILE}], checks?: {task, users: FILE}, screenshot?: {path, task},
//       handshake?: {ready: FILE, go: FILE}}   (halfway through the first task: write `ready`,
//       wait for `go`, e.g. while the caller restarts a service)
import { existsSync } from "node:fs";
import { readFile, writeFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { join } from "node:path";

const job = JSON.parse(await readFile(process.argv[2], "utf8"));
const require = createRequire(join(job.webRoot, "package.json"));
const { chromium } = require("playwright-core");

const ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
  "--disable-background-networking", "--disable-component-update", "--disable-sync"];
const deadline = (seconds) => Date.now() + seconds * 1000;

const context = await chromium.launchPersistentContext(job.userDataDir, {
  executablePath: job.chromium, headless: true, args: ARGS, viewport: { width: 1280, height: 800 },
});
const errors = [];
// Connections refused while a service restarts are expected (the page retries); anything else
// the page logs as an error, or throws, is reported in `errors`.
const unreachable = [];
const ids = [...job.tasks.map((t) => t.id), ...(job.checks ? [job.checks.task] : [])];
const out = { tasks: {} };
try {
  const page = context.pages()[0] ?? await context.newPage();
  page.on("pageerror", (err) => errors.push(String(err)));
  page.on("console", (msg) => {
    if (msg.type() !== "error") return;
    const text = msg.text();
    (/^Failed to load resource: net::ERR_CONNECTION_REFUSED/.test(text) ? unreachable : errors)
      .push(text);
  });
  const open = async () => {
    await page.goto(`${job.url}/?harness`);
    await page.waitForFunction(() => window.privbanditHarness !== undefined);
    await page.evaluate(([i, timing]) => window.privbanditHarness.open(i, timing),
      [ids, job.timing ?? {}]);
  };
  const run = (task, users) => page.evaluate(([t, u, c]) => window.privbanditHarness.run(t, u, c),
    [task, users, job.concurrency]);
  const state = (task) => page.evaluate((t) => window.privbanditHarness.state(t), task);
  await open();
  for (const task of job.tasks) {
    const users = JSON.parse(await readFile(task.users, "utf8"));
    const half = Math.floor(users.length / 2);
    const started = Date.now();
    const record = { users: users.length };
    if (job.reload) {
      // Up to halfway with uploads on, the last `held` users of the half with uploads held
      // (their reports wait in IndexedDB), then uploads on and the page reloaded at once.
      await run(task.id, users.slice(0, half - job.held));
      await page.evaluate(() => window.privbanditHarness.pause(true));
      await run(task.id, users.slice(half - job.held, half));
      record.beforeReload = await state(task.id);
      await page.evaluate(() => window.privbanditHarness.pause(false));
      await page.reload();
      await page.waitForFunction(() => window.privbanditHarness !== undefined);
      await page.evaluate(([i, timing]) => window.privbanditHarness.open(i, timing),
        [ids, job.timing ?? {}]);
      record.afterReload = await state(task.id);
      if (job.handshake && task === job.tasks[0]) {
        // Halfway: tell the caller (which restarts the analyzer), wait for its go, then until
        // the page follows the model stream again.
        await writeFile(job.handshake.ready, JSON.stringify(await state(task.id)));
        while (!existsSync(job.handshake.go)) await new Promise((r) => setTimeout(r, 100));
        const back = Date.now();
        record.atRestart = JSON.parse(await readFile(job.handshake.ready, "utf8"));
        let s = await state(task.id);
        while (!s.streaming && Date.now() < deadline(120)) {
          await new Promise((r) => setTimeout(r, 100));
          s = await state(task.id);
        }
        record.streamingAgainAfter = s.streaming ? (Date.now() - back) / 1000 : null;
      }
      await run(task.id, users.slice(record.afterReload.progress.done));
    } else {
      await run(task.id, users);
    }
    record.queuedSeconds = (Date.now() - started) / 1000;
    const until = deadline(job.drainSeconds ?? 120);
    let s = await state(task.id);
    while (s.pending > 0 && Date.now() < until) {
      await new Promise((r) => setTimeout(r, 200));
      s = await state(task.id);
    }
    record.seconds = (Date.now() - started) / 1000;
    record.final = s;
    out.tasks[task.id] = record;
  }
  if (job.checks) {
    const users = JSON.parse(await readFile(job.checks.users, "utf8"));
    out.checks = await page.evaluate(([t, X]) => window.privbanditHarness.checks(t, X),
      [job.checks.task, users[0].X]);
  }
  if (job.screenshot) {
    await page.goto(`${job.url}/?task=${encodeURIComponent(job.screenshot.task)}`);
    await page.waitForSelector("#items li");
    await page.click("#click");
    await page.waitForFunction(() => document.getElementById("sealed").textContent !== "–");
    await page.waitForFunction(() => document.getElementById("guarantee").textContent !== "–");
    await page.screenshot({ path: job.screenshot.path, fullPage: true });
    out.screenshot = job.screenshot.path;
  }
} finally {
  out.errors = errors;
  out.unreachable = unreachable.length;
  await context.close();
}
process.stdout.write(JSON.stringify(out));
