// The background uploader (services/device/outbox.py's Uploader in the browser): moves sealed
// reports from the IndexedDB outbox to the shuffler.
//
// - items are read oldest first, up to `uploadBatch` of one task and transport per upload, and
//   POSTed verbatim as {"reports": [...]} to that transport's route;
// - they are deleted only after the shuffler's 202 (durable there), so closing the tab at any
//   moment loses nothing; a retry after a lost 202 re-sends the stored bytes, which the shuffler
//   answers as duplicates: nothing is counted twice;
// - network errors, 5xx, 408, 429 and 401/403/404/409 are retried with jittered exponential
//   backoff per group (bounded by the schedule's maximum; Retry-After as a lower bound), so one
//   task's trouble does not stall another's;
// - 400/413/422 mean the shuffler refuses these very bytes: the upload is split to find the
//   offending report(s), which go to the dead-letter store instead of blocking the queue;
// - one tab of the origin uploads at a time (Web Locks), so tabs do not race on one outbox.

import { Backoff, retryAfter, sleep, type RetrySchedule } from "./backoff.js";
import { groupOf, type DeviceStore, type OutboxItem } from "./store.js";

const PERMANENT = new Set([400, 413, 422]);
const ROUTES: Record<string, string> = { reports: "reports", prio3: "prio3-reports" };

export interface UploadEvent {
  task: string;
  transport: string;
  count: number;
  accepted: number;
  duplicates: number;
}

export interface UploaderOptions {
  shufflerUrl: string;
  uploadBatch: number;
  retry: RetrySchedule;
  /** Called after each 202 with what the shuffler said. */
  onUploaded?: (event: UploadEvent) => void;
  /** Called on each failure with its reason (the page shows the last one). */
  onError?: (reason: string) => void;
  /** The Web Lock's name: one uploader per origin and outbox. */
  lockName?: string;
}

export class Uploader {
  private blocked = new Map<string, { backoff: Backoff; until: number }>();
  private wakeUp: (() => void) | null = null;
  private readonly stopper = new AbortController();
  private paused = false;
  lastError: string | null = null;
  running: Promise<void> | null = null;

  constructor(readonly store: DeviceStore, readonly opts: UploaderOptions) {}

  start(): void {
    const run = () => this.loop();
    const locks = (globalThis.navigator as Navigator | undefined)?.locks;
    this.running = locks
      ? locks.request(this.opts.lockName ?? "privbandit-uploader",
        { signal: this.stopper.signal }, run).then(() => undefined, (err: Error) => {
        if (err.name !== "AbortError") throw err;
      })
      : run();
  }

  async stop(): Promise<void> {
    this.stopper.abort();
    this.wake();
    await this.running;
  }

  /** Hold uploads (the page's "offline" switch; tests use it to leave reports queued). */
  pause(paused: boolean): void {
    this.paused = paused;
    this.wake();
  }

  wake(): void {
    this.wakeUp?.();
  }

  private async loop(): Promise<void> {
    while (!this.stopper.signal.aborted) {
      const now = performance.now();
      const blocked = new Set([...this.blocked].filter(([, b]) => b.until > now).map(([g]) => g));
      let items: OutboxItem[] = [];
      if (!this.paused) {
        try {
          items = await this.store.head(this.opts.uploadBatch, blocked);
        } catch (err) {
          this.fail(`outbox read failed: ${err}`);
          await sleep(1, this.stopper.signal);
          continue;
        }
      }
      if (items.length === 0) {
        const waits = [...this.blocked.values()].map((b) => b.until - now).filter((w) => w > 0);
        await this.idle(this.paused || waits.length === 0 ? null : Math.min(...waits) / 1000);
        continue;
      }
      try {
        await this.upload(items);
      } catch (err) { // never let the uploader die
        this.backoff(groupOf(items[0]!), `upload crashed: ${err}`);
      }
    }
  }

  /** Until `wake()`, `stop()` or `timeout` seconds. */
  private idle(timeout: number | null): Promise<void> {
    return new Promise((resolve) => {
      const finish = () => { clearTimeout(t); this.wakeUp = null; resolve(); };
      const t = timeout === null ? undefined : setTimeout(finish, timeout * 1000);
      this.wakeUp = finish;
    });
  }

  private async upload(items: OutboxItem[]): Promise<void> {
    const { task, transport } = items[0]!;
    const group = groupOf(items[0]!);
    const route = ROUTES[transport];
    if (route === undefined) {
      await this.store.deadLetter(task, items, `no upload route for transport ${transport}`);
      return;
    }
    // The stored JSON goes out verbatim: a retry sends exactly the bytes of the first try.
    const body = `{"reports":[${items.map((it) => it.json).join(",")}]}`;
    let resp: Response;
    try {
      resp = await fetch(`${this.opts.shufflerUrl}/v1/tasks/${encodeURIComponent(task)}/${route}`, {
        method: "POST", body, headers: { "Content-Type": "application/json" },
        credentials: "omit", cache: "no-store",
      });
    } catch (err) {
      this.backoff(group, `shuffler unreachable: ${err}`);
      return;
    }
    if (resp.status === 202) {
      let answer = { accepted: items.length, duplicates: 0 };
      try {
        answer = await resp.json();
      } catch { /* 202 means durable, whatever the body */ }
      await this.store.uploaded(task, items.map((it) => it.seq));
      this.blocked.delete(group);
      this.lastError = null;
      this.opts.onUploaded?.({ task, transport, count: items.length,
        accepted: answer.accepted, duplicates: answer.duplicates });
      return;
    }
    const detail = (await resp.text().catch(() => "")).slice(0, 300);
    if (PERMANENT.has(resp.status)) {
      if (items.length > 1) { // find the offending report(s), keep the good neighbours
        const mid = items.length >> 1;
        await this.upload(items.slice(0, mid));
        await this.upload(items.slice(mid));
        return;
      }
      await this.store.deadLetter(task, items, `${resp.status} ${detail}`);
      this.fail(`the shuffler refused a report for good (${resp.status} ${detail})`);
      return;
    }
    this.backoff(group, `shuffler answered ${resp.status}: ${detail}`, retryAfter(resp.headers));
  }

  private backoff(group: string, reason: string, atLeast = 0): void {
    const have = this.blocked.get(group);
    const backoff = have?.backoff ?? new Backoff(this.opts.retry);
    const wait = backoff.delay(atLeast);
    this.blocked.set(group, { backoff, until: performance.now() + wait * 1000 });
    this.fail(`${reason}; retry in ${wait.toFixed(2)} s`);
  }

  private fail(reason: string): void {
    this.lastError = reason;
    this.opts.onError?.(reason);
  }
}
