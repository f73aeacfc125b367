// The device role of docs/protocol.md for the linear tasks, in the browser: what the Python
// device service (services/device/) does for its user, with the same rules.
//
// `decide` picks an arm with the model the page holds (no network round trip) and keeps the
// chosen arm's features in memory under a fresh decision id; `feedback` randomises (x, r) with
// the task's local randomiser, seals it to the analyzer (Prio3 shares for a secure-sum task),
// all in a Web Worker, and queues it in the IndexedDB outbox — with the person's count under
// the task's bound, in one transaction — before the uploader sends it to the shuffler. One
// decision gives at most one feedback (409-like `decision_used` after that). Nothing about the
// user leaves the page but the sealed report; decide's features are never stored.

import { Backoff, sleep, type RetrySchedule } from "./backoff.js";
import { ModelFollower, type FollowTiming, type ModelSource } from "./model.js";
import type { HpkeConfig, Lib, ModelMessage, SealedReport, TaskInfo } from "./ports.js";
import { DeviceStore, type Counters, type Marker, type PersonSlot } from "./store.js";
import { Uploader, type UploadEvent } from "./uploader.js";

/** The device's refusals, with the Python device's error codes (docs/protocol.md §7). */
export class DeviceError extends Error {
  constructor(readonly code: string, message: string) {
    super(message);
    this.name = "DeviceError";
  }
}

/** Makes a task's sealed report (randomise, shard, seal): the Web Worker, or the library. */
export type Reporter = (
  task: TaskInfo, model: ModelMessage, hpke: HpkeConfig, x: number[], reward: number,
) => Promise<SealedReport>;

export interface DeviceTiming extends FollowTiming {
  uploadBatch: number;
  uploadRetry: RetrySchedule;
  hpkeRefresh: number; // seconds
  unusedDecisionTtl: number; // seconds
  usedDecisionTtl: number; // seconds
}

/** The Python device's defaults (shared/settings.py DeviceTiming). */
export const DEFAULT_TIMING: DeviceTiming = {
  fetchRetry: { initial: 0.1, maximum: 2 },
  pollInterval: 1,
  streamRetry: { initial: 2, maximum: 30 },
  uploadBatch: 100,
  uploadRetry: { initial: 0.1, maximum: 5 },
  hpkeRefresh: 60,
  unusedDecisionTtl: 600,
  usedDecisionTtl: 3600,
};

export interface DeviceOptions {
  analyzerUrl: string;
  shufflerUrl: string;
  tasks: string[];
  lib: Pick<Lib, "decide">;
  reporter: Reporter;
  timing?: Partial<DeviceTiming>;
  dbName?: string;
  /** Events for the page: a new model, a queued report, an upload, an error. */
  onEvent?: (event: DeviceEvent) => void;
}

export type DeviceEvent =
  | { kind: "model"; task: string; model: ModelMessage; source: ModelSource }
  | { kind: "queued"; task: string; report: SealedReport; outboxPending: number }
  | { kind: "withheld"; task: string }
  | { kind: "uploaded"; upload: UploadEvent }
  | { kind: "error"; reason: string };

export interface DecideResult {
  decisionId: string;
  action: number;
  modelVersion: number;
  propensity: number;
}

export interface FeedbackResult {
  queued: boolean;
  withheld: boolean;
  outboxPending: number;
  report: SealedReport | null;
}

interface OpenDecision {
  task: string;
  x: number[];
  issued: number; // ms since the epoch
  state: "open" | "sealing" | "used";
}

/** The transports the browser speaks: HPKE reports, and Prio3 for secure-sum tasks. */
export function transportOf(task: TaskInfo): "reports" | "prio3" {
  if (task.aggregation === "reports") return "reports";
  if ((task.secure_sum ?? "prio3") === "prio3") return "prio3";
  throw new DeviceError("unsupported_task",
    `task ${task.id}: the browser client has no Paillier transport (secure_sum = paillier)`);
}

/** The task's intercept coordinates E (policy.intercept_coords; [0], x[0] = c, when the
 * analyzer does not state them), checked when the task is opened as the Python config checks
 * them: increasing indices in [0, d), at least one. Any such E is served (the library's
 * DdpRandomizer implements per-arm features with an intercept in every block, and checks E
 * again); other values are refused with unsupported_task rather than guessed at. (The device
 * code depends on the library through ports.ts only, so the rule is stated here too.) */
export function checkEncoding(task: TaskInfo): number[] {
  const coords = task.policy["intercept_coords"];
  if (coords === undefined || coords === null) return [0];
  const d = task.d ?? 0;
  if (Array.isArray(coords) && coords.length >= 1 && coords.every((v, m) => Number.isInteger(v)
    && v >= 0 && v < d && (m === 0 || v > (coords[m - 1] as number)))) return coords as number[];
  throw new DeviceError("unsupported_task", `task ${task.id}: intercept_coords must be `
    + `increasing indices in [0, ${d}), at least one; got ${JSON.stringify(coords)}`);
}

const USER_KEY = /^[\x21-\x7e]{1,256}$/;
const FEATURE_SLACK = 1 + 1e-9;

export class Device {
  readonly tasks = new Map<string, TaskInfo>();
  readonly models = new Map<string, ModelFollower>();
  hpke: HpkeConfig | null = null;
  private decisions = new Map<string, OpenDecision>();
  private readonly stopper = new AbortController();
  readonly timing: DeviceTiming;
  readonly uploader: Uploader;

  private constructor(readonly opts: DeviceOptions, readonly store: DeviceStore) {
    this.timing = { ...DEFAULT_TIMING, ...(opts.timing ?? {}) };
    this.uploader = new Uploader(store, {
      shufflerUrl: opts.shufflerUrl,
      uploadBatch: this.timing.uploadBatch,
      retry: this.timing.uploadRetry,
      onUploaded: (upload) => this.emit({ kind: "uploaded", upload }),
      onError: (reason) => this.emit({ kind: "error", reason }),
    });
  }

  /** Open the outbox, fetch the HPKE config and the tasks, hold a model of each, start the
   * uploader (which first sends whatever an earlier page left in the outbox). */
  static async open(opts: DeviceOptions): Promise<Device> {
    const device = new Device(opts, await DeviceStore.open(opts.dbName));
    device.uploader.start();
    await device.refreshHpke();
    void device.hpkeLoop();
    for (const id of opts.tasks) {
      const task = await device.fetchJson<TaskInfo>(`/v1/tasks/${encodeURIComponent(id)}`);
      if (task.d === null) {
        throw new DeviceError("unsupported_task", `task ${id} is multi-armed: not a linear task`);
      }
      transportOf(task); // refuses a Paillier task now rather than at its first feedback
      checkEncoding(task); // and intercept coordinates the analyzer would not state
      device.tasks.set(id, task);
      const follower = new ModelFollower(opts.analyzerUrl, task, device.timing,
        (model, source) => device.emit({ kind: "model", task: id, model, source }));
      device.models.set(id, follower);
      await follower.start();
    }
    return device;
  }

  async close(): Promise<void> {
    this.stopper.abort();
    for (const f of this.models.values()) f.stop();
    await this.uploader.stop();
    this.store.close();
  }

  model(task: string): ModelMessage {
    const m = this.models.get(task)?.model;
    if (!m) throw new DeviceError("unknown_task", `task ${task} is not served here`);
    return m;
  }

  /** Choose an arm for K feature vectors with the model held (§4). */
  decide(taskId: string, features: number[][]): DecideResult {
    const task = this.taskInfo(taskId);
    checkFeatures(task, features);
    const model = this.model(taskId);
    const { action, propensity } = this.opts.lib.decide(task, model, features);
    const decisionId = randomId();
    this.prune();
    this.decisions.set(decisionId, {
      task: taskId, x: features[action]!.slice(), issued: Date.now(), state: "open",
    });
    return { decisionId, action, modelVersion: model.version, propensity };
  }

  /** Randomise, seal and queue the report of a decision; durable once this resolves.
   * `user`: the person's key, for a task that bounds each person's reports (§6.3);
   * `marker`: the page's own record, committed with the report. */
  async feedback(
    taskId: string, decisionId: string, reward: number,
    options: { user?: string; marker?: Marker } = {},
  ): Promise<FeedbackResult> {
    const task = this.taskInfo(taskId);
    if (typeof reward !== "number" || !Number.isFinite(reward)) {
      throw new DeviceError("invalid_request", "the reward must be a finite number");
    }
    if (reward < 0 || reward > 1) {
      throw new DeviceError("reward_out_of_range", `this task's rewards lie in [0, 1]; got ${reward}`);
    }
    const slot = await this.slotFor(task, options.user);
    const hpke = this.hpke;
    if (hpke === null) {
      throw new DeviceError("no_hpke_key", "the analyzer's HPKE key is not known yet; retry soon");
    }
    const decision = this.openDecision(taskId, decisionId);
    decision.state = "sealing"; // a second feedback meanwhile is refused
    let report: SealedReport;
    try {
      report = await this.opts.reporter(task, this.model(taskId), hpke, decision.x, reward);
    } catch (err) {
      decision.state = "open"; // nothing was stored: the decision stays open for a retry
      throw new DeviceError("invalid_report", String(err));
    }
    let seq: number | null;
    try {
      seq = await this.store.queue(
        { task: taskId, transport: report.transport, json: report.json, created: Date.now() },
        slot, options.marker ?? null);
    } catch (err) {
      decision.state = "open";
      throw err;
    }
    decision.state = "used";
    decision.x = []; // the features are not kept once the report is made
    const outboxPending = await this.store.pending();
    if (seq === null) {
      this.emit({ kind: "withheld", task: taskId });
      return { queued: false, withheld: true, outboxPending, report: null };
    }
    this.uploader.wake();
    this.emit({ kind: "queued", task: taskId, report, outboxPending });
    return { queued: true, withheld: false, outboxPending, report };
  }

  counters(task: string): Promise<Counters> {
    return this.store.counters(task);
  }

  /** GET a JSON document of the analyzer, retrying with backoff until it answers. */
  async fetchJson<T>(path: string): Promise<T> {
    const backoff = new Backoff(this.timing.fetchRetry);
    for (;;) {
      let resp: Response | null = null;
      try {
        resp = await fetch(`${this.opts.analyzerUrl}${path}`, {
          cache: "no-store", credentials: "omit", signal: this.stopper.signal,
        });
      } catch (err) {
        if (this.stopper.signal.aborted) throw err;
      }
      if (resp !== null && resp.ok) return (await resp.json()) as T;
      if (resp !== null && resp.status >= 400 && resp.status < 500 && resp.status !== 408
          && resp.status !== 429) {
        throw new DeviceError("analyzer_refused", `${path}: ${resp.status} ${await resp.text()}`);
      }
      await sleep(backoff.delay(), this.stopper.signal);
    }
  }

  private async refreshHpke(): Promise<void> {
    const cfg = await this.fetchJson<HpkeConfig>("/v1/hpke-config");
    if (base64urlLength(cfg.public_key) !== 32) {
      throw new DeviceError("bad_hpke_config", "an X25519 public key is 32 bytes");
    }
    this.hpke = cfg;
  }

  /** Re-read the HPKE config now and then: an analyzer redeployed with a new key is noticed. */
  private async hpkeLoop(): Promise<void> {
    while (!this.stopper.signal.aborted) {
      await sleep(this.timing.hpkeRefresh, this.stopper.signal);
      if (this.stopper.signal.aborted) return;
      try {
        await this.refreshHpke();
      } catch (err) {
        this.emit({ kind: "error", reason: `HPKE config: ${err}` });
      }
    }
  }

  private taskInfo(task: string): TaskInfo {
    const info = this.tasks.get(task);
    if (info === undefined) throw new DeviceError("unknown_task", `task ${task} is not served here`);
    return info;
  }

  private openDecision(task: string, id: string): OpenDecision {
    const decision = this.decisions.get(id);
    if (decision === undefined || decision.task !== task) {
      throw new DeviceError("unknown_decision", `decision ${id.slice(0, 8)}… is not open here`);
    }
    if (decision.state !== "open") {
      throw new DeviceError("decision_used", "feedback for this decision was already given");
    }
    if (Date.now() - decision.issued > this.timing.unusedDecisionTtl * 1000) {
      this.decisions.delete(id);
      throw new DeviceError("unknown_decision", `decision ${id.slice(0, 8)}… expired`);
    }
    return decision;
  }

  /** Forget open decisions past their validity and used ones past their tombstone's. */
  private prune(): void {
    const now = Date.now();
    for (const [id, d] of this.decisions) {
      const ttl = d.state === "used" ? this.timing.usedDecisionTtl : this.timing.unusedDecisionTtl;
      if (now - d.issued > ttl * 1000 && d.state !== "sealing") this.decisions.delete(id);
    }
  }

  /** Where a feedback counts under the task's bound (null: the task bounds no one). */
  private async slotFor(task: TaskInfo, user: string | undefined): Promise<PersonSlot | null> {
    const bound = task.contributions;
    if (!bound) return null;
    if (user === undefined) {
      throw new DeviceError("missing_user", `task ${task.id} bounds each person to ${bound.k} `
        + "reports: the feedback needs the person's user key");
    }
    if (!USER_KEY.test(user)) {
      throw new DeviceError("invalid_request", "a user key is 1-256 printable ASCII characters");
    }
    const period = bound.period_seconds === null ? 0
      : Math.floor(Date.now() / 1000 / bound.period_seconds);
    const key = await this.store.personKey();
    const mac = await crypto.subtle.sign("HMAC", key,
      new TextEncoder().encode(`${task.id}\u0000${user}`));
    return { slot: `${hex(new Uint8Array(mac))}:${period}`, k: bound.k };
  }

  private emit(event: DeviceEvent): void {
    this.opts.onEvent?.(event);
  }
}

/** The checks of the Python device's decide (services/device/decisions.py check_features):
 * K rows of d finite numbers with ‖x‖ ≤ L, and the intercept of a centered encoding: ⟨e, x⟩ = c
 * over the task's intercept coordinates E (x[0] = c for E = {0}). */
export function checkFeatures(task: TaskInfo, features: number[][]): void {
  const d = task.d!;
  const L = Number(task.policy["L"] ?? 1);
  if (!Array.isArray(features) || features.length !== task.K) {
    throw new DeviceError("wrong_arms", `task ${task.id} has K = ${task.K} arms`);
  }
  const encoding = String(task.policy["encoding"] ?? "");
  const intercept = encoding.startsWith("centered") ? Number(task.policy["intercept"]) : null;
  const coords = checkEncoding(task);
  features.forEach((row, i) => {
    if (!Array.isArray(row) || row.length !== d) {
      throw new DeviceError("wrong_dimension", `task ${task.id} has d = ${d}; row ${i} differs`);
    }
    let sq = 0;
    for (const v of row) {
      if (typeof v !== "number" || !Number.isFinite(v)) {
        throw new DeviceError("not_finite", "features must be finite numbers");
      }
      sq += v * v;
    }
    if (!(sq <= (L * FEATURE_SLACK) ** 2)) {
      throw new DeviceError("feature_norm",
        `every feature vector must satisfy ||x|| <= L = ${L}; row ${i} has ${Math.sqrt(sq)}`);
    }
    // ⟨e, x⟩: the sum over E left to right, as numpy sums a few values (base.intercept_values)
    const value = coords.reduce((sum, m, n) => (n === 0 ? row[m]! : sum + row[m]!), 0);
    if (intercept !== null && Math.abs(value - intercept) > 1e-9 * Math.max(1, intercept)) {
      const first = coords.length === 1 && coords[0] === 0;
      const where = first ? "x[0]" : `the sum of x at [${coords.join(", ")}]`;
      const rule = first ? "x[0]" : `the sum of x at coordinates [${coords.join(", ")}]`;
      throw new DeviceError("feature_intercept", `task ${task.id} has the intercept `
        + `${rule} = ${intercept} in every feature vector; row ${i} has ${where} = ${value}`);
    }
  });
}

function randomId(): string {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return btoa(String.fromCharCode(...b)).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

function hex(b: Uint8Array): string {
  return Array.from(b, (v) => v.toString(16).padStart(2, "0")).join("");
}

function base64urlLength(s: string): number {
  const clean = s.replace(/=+$/, "");
  return Math.floor((clean.length * 3) / 4);
}
