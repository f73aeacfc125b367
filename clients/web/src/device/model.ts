// The device's model cache (services/device/cache.py in the browser): the newest model of a
// task, so `decide` never waits on the network. Kept fresh as the Python device does:
//
// 1. at start, GET /v1/tasks/{task}/model until the analyzer answers (jittered backoff);
// 2. then the Server-Sent-Events broadcast /v1/tasks/{task}/model/stream (EventSource), with a
//    conditional GET as soon as it opens to catch up on what was published meanwhile;
// 3. whenever the stream fails or ends, ETag polling (If-None-Match: 304 when unchanged) for a
//    while before the stream is tried again, the pause doubling up to a bound and starting
//    over after a stream that stayed up that long: a broken stream cannot stall updates.
//
// Models only move forward: an update is applied when its version is newer than the one held,
// and only if it is a model of this task with the task's dimension.

import { Backoff, sleep, type RetrySchedule } from "./backoff.js";
import type { ModelMessage, TaskInfo } from "./ports.js";

export interface FollowTiming {
  fetchRetry: RetrySchedule;
  pollInterval: number; // seconds between polls while the stream is down
  streamRetry: RetrySchedule; // the pause before the stream is tried again
}

export type ModelSource = "poll" | "stream";

export class ModelFollower {
  model: ModelMessage | null = null;
  streaming = false;
  private etag: string | null = null;
  private readonly stopper = new AbortController();
  private source: EventSource | null = null;

  constructor(
    readonly analyzerUrl: string,
    readonly task: TaskInfo,
    readonly timing: FollowTiming,
    readonly onUpdate: (model: ModelMessage, source: ModelSource) => void = () => {},
  ) {}

  /** Resolves once the first model arrived; keeps following until `stop()`. */
  async start(): Promise<void> {
    const backoff = new Backoff(this.timing.fetchRetry);
    while (this.model === null && !this.stopped) {
      try {
        await this.poll();
      } catch {
        await sleep(backoff.delay(), this.stopper.signal);
      }
    }
    void this.follow();
  }

  stop(): void {
    this.stopper.abort();
    this.source?.close();
  }

  private get stopped(): boolean {
    return this.stopper.signal.aborted;
  }

  /** One conditional GET; throws on network or server errors. */
  async poll(): Promise<void> {
    const headers: Record<string, string> = {};
    if (this.etag !== null && this.model !== null) headers["If-None-Match"] = this.etag;
    const resp = await fetch(`${this.base}/model`, {
      headers, cache: "no-store", credentials: "omit", signal: this.stopper.signal,
    });
    if (resp.status === 304) return;
    if (!resp.ok) throw new Error(`model: ${resp.status}`);
    const msg = (await resp.json()) as ModelMessage;
    this.apply(msg, "poll");
    if (this.model !== null && msg.version === this.model.version) {
      // The validator of the model we hold, as the server spells it.
      this.etag = resp.headers.get("etag") ?? `"${msg.version}"`;
    }
  }

  /** Install `msg` if it is a model of this task, well formed and newer than the one held. */
  apply(msg: ModelMessage, source: ModelSource): boolean {
    if (!wellFormed(msg, this.task)) return false;
    if (this.model !== null && msg.version <= this.model.version) return false;
    this.model = msg;
    this.onUpdate(msg, source);
    return true;
  }

  private get base(): string {
    return `${this.analyzerUrl}/v1/tasks/${encodeURIComponent(this.task.id)}`;
  }

  private async follow(): Promise<void> {
    const t = this.timing;
    let pause = t.streamRetry.initial;
    while (!this.stopped) {
      const opened = performance.now();
      await this.stream();
      if (this.stopped) return;
      // A stream that stayed up for a while was healthy: retry it soon after it drops.
      if ((performance.now() - opened) / 1000 > t.streamRetry.maximum) pause = t.streamRetry.initial;
      const until = performance.now() + pause * 1000;
      while (performance.now() < until && !this.stopped) {
        try {
          await this.poll();
        } catch { /* the analyzer is away: keep the model we hold */ }
        await sleep(t.pollInterval, this.stopper.signal);
      }
      pause = Math.min(2 * pause, t.streamRetry.maximum);
    }
  }

  /** Follow the SSE broadcast until it fails or ends. */
  private stream(): Promise<void> {
    return new Promise((resolve) => {
      const es = new EventSource(`${this.base}/model/stream`, { withCredentials: false });
      this.source = es;
      const end = () => {
        es.close();
        this.streaming = false;
        this.source = null;
        resolve();
      };
      this.stopper.signal.addEventListener("abort", end, { once: true });
      es.onopen = () => {
        this.streaming = true;
        this.poll().catch(() => {}); // catch up on anything published before we subscribed
      };
      es.addEventListener("model", (ev) => {
        try {
          this.apply(JSON.parse((ev as MessageEvent<string>).data) as ModelMessage, "stream");
        } catch { /* a malformed event is ignored */ }
      });
      // EventSource would reconnect on its own; the Python device falls back to polling
      // instead, and so do we.
      es.onerror = end;
    });
  }
}

function finite(v: unknown): v is number {
  return typeof v === "number" && Number.isFinite(v);
}

/** A model message this device can decide with: of its task, θ̃ of length d, V d×d, β ≥ 0. */
export function wellFormed(msg: ModelMessage, task: TaskInfo): boolean {
  const d = task.d;
  return typeof msg === "object" && msg !== null && msg.task === task.id
    && Number.isInteger(msg.version) && msg.version >= 0
    && Array.isArray(msg.theta) && msg.theta.length === d && msg.theta.every(finite)
    && Array.isArray(msg.V) && msg.V.length === d
    && msg.V.every((row) => Array.isArray(row) && row.length === d && row.every(finite))
    && finite(msg.beta) && msg.beta >= 0;
}
