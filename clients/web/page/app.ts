// The demo page (docs/web-client.md, "The page"): a person plays one user of a demo task with
// the device role running in this page, and sees what leaves it. `privbandit up --web` serves
// it with `config.json` (where the analyzer and the shuffler are, which tasks to offer).
//
// With `?harness` in the URL the page shows nothing and exposes `window.privbanditHarness`
// instead: simulated users driven through the same device role, for the end-to-end test and
// the benchmark (tests/e2e/test_web_client.py, bench/web_client.py).

import { Device, type DeviceEvent, type DeviceTiming } from "../src/device/device.js";
import { lib } from "../src/device/binding.js";
import type { ModelMessage, SealedReport, TaskInfo } from "../src/device/ports.js";
import { workerReporter } from "../src/device/worker_client.js";
import { uniform } from "../src/device/backoff.js";

interface PageConfig {
  analyzer: string;
  shuffler: string;
  tasks: string[];
  timing?: Partial<DeviceTiming>;
}

async function loadConfig(): Promise<PageConfig> {
  const resp = await fetch("config.json", { cache: "no-store" });
  if (!resp.ok) throw new Error(`config.json: ${resp.status}`);
  return (await resp.json()) as PageConfig;
}

function openDevice(cfg: PageConfig, tasks: string[], onEvent?: (e: DeviceEvent) => void) {
  const worker = workerReporter(new URL("worker.js", import.meta.url));
  return Device.open({
    analyzerUrl: cfg.analyzer, shufflerUrl: cfg.shuffler, tasks, lib,
    reporter: worker.reporter, timing: cfg.timing, onEvent,
  });
}

// -- the harness: simulated users through the device role ---------------------------------------

/** One simulated user: the K arms' features, their true mean rewards, the reward draw u (the
 * reward is 1 when u < μ_a: the demo driver's users, privbandit/demo/driver.py). */
interface SimUser {
  X: number[][];
  mu: number[];
  u: number;
}

interface Progress {
  done: number;
  regret: number;
  sent: number;
  withheld: number;
}

class Harness {
  device: Device | null = null;
  modelVersions = new Map<string, number>();
  // How many models came from the SSE stream and from polling, per task.
  modelSources = new Map<string, { stream: number; poll: number }>();

  async open(tasks: string[], timing?: Partial<DeviceTiming>): Promise<void> {
    const cfg = await loadConfig();
    this.device = await openDevice({ ...cfg, timing: { ...cfg.timing, ...timing } }, tasks,
      (e) => {
        if (e.kind !== "model") return;
        this.modelVersions.set(e.task, e.model.version);
        const n = this.modelSources.get(e.task) ?? { stream: 0, poll: 0 };
        n[e.source] += 1;
        this.modelSources.set(e.task, n);
      });
  }

  /** The users' progress of `task` as last checkpointed (survives a reload). */
  async progress(task: string): Promise<Progress> {
    const got = await this.dev().store.getMeta<Progress>(`harness:${task}`);
    return got ?? { done: 0, regret: 0, sent: 0, withheld: 0 };
  }

  /** Users `from`..`from + users.length − 1` of `task`, `concurrency` at a time; their progress
   * is checkpointed at the end (durable before this resolves). */
  async run(task: string, users: SimUser[], concurrency = 4): Promise<Progress> {
    const device = this.dev();
    const progress = await this.progress(task);
    let next = 0;
    const started = performance.now();
    const one = async (): Promise<void> => {
      while (next < users.length) {
        const user = users[next++]!;
        const decision = device.decide(task, user.X);
        const a = decision.action;
        const best = Math.max(...user.mu);
        const reward = user.u < user.mu[a]! ? 1 : 0;
        const out = await device.feedback(task, decision.decisionId, reward);
        progress.regret += best - user.mu[a]!;
        progress.done += 1;
        if (out.queued) progress.sent += 1;
        if (out.withheld) progress.withheld += 1;
      }
    };
    await Promise.all(Array.from({ length: Math.max(1, concurrency) }, one));
    await device.store.putMeta(`harness:${task}`, progress);
    return { ...progress, seconds: (performance.now() - started) / 1000 } as Progress;
  }

  pause(paused: boolean): void {
    this.dev().uploader.pause(paused);
  }

  /** The device's rules on a task that bounds each person to 2 reports (e2e test): one
   * feedback per decision, refusals that leave the decision open, the bound, and a report
   * re-sent byte for byte from the outbox (a lost 202) answered as a duplicate. */
  async checks(task: string, X: number[][]) {
    const device = this.dev();
    const codes: string[] = [];
    const refused = async (f: () => Promise<unknown>) => {
      try {
        await f();
        codes.push("accepted");
      } catch (err) {
        codes.push((err as { code?: string }).code ?? String(err));
      }
    };
    device.uploader.pause(true);
    const d1 = device.decide(task, X);
    const first = await device.feedback(task, d1.decisionId, 1, { user: "alice" });
    const [held] = await device.store.head(1);
    device.uploader.pause(false);
    await refused(() => device.feedback(task, d1.decisionId, 1, { user: "alice" }));
    const d2 = device.decide(task, X);
    await refused(() => device.feedback(task, d2.decisionId, 1.5, { user: "alice" }));
    await refused(() => device.feedback(task, d2.decisionId, 0, {}));
    const second = await device.feedback(task, d2.decisionId, 0, { user: "alice" });
    const third = await device.feedback(task, device.decide(task, X).decisionId, 1,
      { user: "alice" });
    const bob = await device.feedback(task, device.decide(task, X).decisionId, 1, { user: "bob" });
    await refused(async () => device.feedback(task, "not-a-decision", 1, { user: "bob" }));
    while ((await device.store.pending()) > 0) await new Promise((r) => setTimeout(r, 100));
    // The first report's stored bytes again, as after a lost 202.
    const resend = await fetch(`${device.opts.shufflerUrl}/v1/tasks/${task}/reports`, {
      method: "POST", body: `{"reports":[${held!.json}]}`,
      headers: { "Content-Type": "application/json" },
    });
    return {
      codes, first: first.queued, second: second.queued, third: third.withheld,
      bob: bob.queued, counters: await device.counters(task),
      resend: { status: resend.status, body: await resend.json() },
    };
  }

  async state(task: string) {
    const device = this.dev();
    return {
      pending: await device.store.pending(),
      counters: await device.counters(task),
      progress: await this.progress(task),
      modelVersion: device.model(task).version,
      modelSources: this.modelSources.get(task) ?? { stream: 0, poll: 0 },
      streaming: device.models.get(task)?.streaming ?? false,
      lastError: device.uploader.lastError,
    };
  }

  private dev(): Device {
    if (this.device === null) throw new Error("open() first");
    return this.device;
  }
}

// -- the page a person uses ----------------------------------------------------------------------

const $ = (id: string) => document.getElementById(id)!;

class Page {
  device!: Device;
  task!: TaskInfo;
  X: number[][] = [];
  decision: { decisionId: string; action: number } | null = null;

  async start(): Promise<void> {
    const cfg = await loadConfig();
    const select = $("task") as HTMLSelectElement;
    for (const id of cfg.tasks) select.add(new Option(id, id));
    const wanted = new URLSearchParams(location.search).get("task");
    if (wanted && cfg.tasks.includes(wanted)) select.value = wanted;
    select.onchange = () => {
      location.search = `?task=${encodeURIComponent(select.value)}`;
    };
    this.device = await openDevice(cfg, [select.value], (e) => this.onEvent(e));
    this.task = this.device.tasks.get(select.value)!;
    this.status(`connected to ${cfg.analyzer} and ${cfg.shuffler}`, "ok");
    $("next").onclick = () => this.visit();
    $("click").onclick = () => this.answer(1);
    $("skip").onclick = () => this.answer(0);
    this.showModel(this.device.model(this.task.id));
    await this.refreshOutbox();
    this.visit();
    void this.followLedger();
  }

  /** A new visit: K items with fresh features, the page's choice among them. */
  visit(): void {
    this.X = Array.from({ length: this.task.K }, () => itemFeatures(this.task));
    const d = this.device.decide(this.task.id, this.X);
    this.decision = d;
    const model = this.device.model(this.task.id);
    const scores = this.X.map((x) => x.reduce((s, v, i) => s + v * model.theta[i]!, 0));
    const top = Math.max(...scores.map(Math.abs), 1e-9);
    const list = $("items");
    list.replaceChildren(...this.X.map((_, a) => {
      const li = document.createElement("li");
      li.textContent = `${a === d.action ? "★ " : ""}Item ${a + 1}`;
      if (a === d.action) li.className = "chosen";
      const bar = document.createElement("span");
      bar.className = "bar";
      bar.style.width = `${Math.round(60 * Math.max(0, scores[a]!) / top)}px`;
      bar.title = `⟨x, θ̃⟩ = ${scores[a]!.toFixed(3)}`;
      li.append(bar);
      return li;
    }));
    ($("click") as HTMLButtonElement).disabled = false;
    ($("skip") as HTMLButtonElement).disabled = false;
  }

  async answer(reward: number): Promise<void> {
    if (this.decision === null) return;
    ($("click") as HTMLButtonElement).disabled = true;
    ($("skip") as HTMLButtonElement).disabled = true;
    const { decisionId } = this.decision;
    this.decision = null;
    try {
      const out = await this.device.feedback(this.task.id, decisionId, reward);
      if (out.report !== null) this.showReport(out.report);
      else $("shown").textContent = "withheld: your bound of reports for this period is reached";
    } catch (err) {
      this.status(String(err), "err");
    }
    await this.refreshOutbox();
  }

  onEvent(e: DeviceEvent): void {
    if (e.kind === "model" && e.task === this.task?.id) this.showModel(e.model);
    if (e.kind === "uploaded") {
      $("upload").textContent = `${e.upload.count} report(s) to the shuffler: 202, ` +
        `${e.upload.accepted} accepted, ${e.upload.duplicates} duplicate(s)`;
      void this.refreshOutbox();
    }
    if (e.kind === "error") this.status(e.reason, "err");
  }

  showReport(r: SealedReport): void {
    $("transport").textContent = r.transport === "prio3"
      ? "Prio3 shares (leader's to the shuffler, helper's sealed to the analyzer)"
      : "one HPKE-sealed report through the shuffler";
    const fmtValue = (v: number) => (Number.isInteger(v) ? String(v) : v.toFixed(4));
    const values = r.shown.map(fmtValue);
    const shown = values.length > 24 ? `${values.slice(0, 24).join(", ")}, … (${values.length})`
      : values.join(", ");
    $("shown").textContent = `[${shown}]`;
    $("sealed").textContent = `${r.sealedBytes} bytes`;
    const l = r.batchSize ?? this.device.model(this.task.id).batch_size ?? this.task.batch_size;
    $("batch").textContent = l > 1
      ? `a shuffled batch of ${l} reports (the analyzer sees none alone)`
      : "no batch: the shuffler passes it on (it was randomised on this page)";
  }

  showModel(m: ModelMessage): void {
    $("version").textContent = `v${m.version} (${m.reports} reports)`;
  }

  async refreshOutbox(): Promise<void> {
    const c = await this.device.counters(this.task.id);
    $("outbox").textContent = `${await this.device.store.pending()} waiting; ${c.feedbacks} sent ` +
      `from this browser, ${c.uploaded} accepted by the shuffler`;
  }

  async followLedger(): Promise<void> {
    for (;;) {
      try {
        const resp = await fetch(`${this.device.opts.analyzerUrl}/v1/tasks/${this.task.id}/privacy`,
          { cache: "no-store", credentials: "omit" });
        if (resp.ok) {
          const p = await resp.json();
          const l = p.ledger;
          $("counted").textContent = `${p.reports_counted} (refused ${p.reports_refused ?? 0})`;
          $("batches").textContent = String(p.batches);
          const parts = [];
          if (l.central_epsilon != null) parts.push(`central (ε = ${fmt(l.central_epsilon)}, δ = ${fmt(l.central_delta)})`);
          if (l.ldp_epsilon != null) parts.push(`local (ε = ${fmt(l.ldp_epsilon)}, δ = ${fmt(l.ldp_delta)})`);
          $("guarantee").textContent = parts.join("; ") || l.threat_model;
          $("accounting").textContent = l.accounting;
        }
      } catch { /* the analyzer is away: keep the last ledger */ }
      await new Promise((r) => setTimeout(r, 2000));
    }
  }

  status(text: string, kind: "ok" | "err"): void {
    const el = $("status");
    el.textContent = text;
    el.className = `status ${kind}`;
  }
}

function fmt(v: number | null): string {
  if (v == null) return "–";
  return v === 0 ? "0" : v < 1e-3 ? v.toExponential(1) : v.toPrecision(3);
}

/** Features of one item: a random direction of norm ≤ L (x[0] = the intercept under a centered
 * encoding, the rest on the remaining ball), from the browser's CSPRNG. */
function itemFeatures(task: TaskInfo): number[] {
  const d = task.d!;
  const L = Number(task.policy["L"] ?? 1);
  const encoding = String(task.policy["encoding"] ?? "");
  const c = encoding.startsWith("centered") ? Number(task.policy["intercept"]) : null;
  const free = c === null ? d : d - 1;
  const g = Array.from({ length: free }, () => gaussian());
  const norm = Math.hypot(...g) || 1;
  const radius = (c === null ? L : Math.sqrt(Math.max(0, L * L - c * c))) * 0.999;
  const rest = g.map((v) => (v / norm) * radius);
  return c === null ? rest : [c, ...rest];
}

function gaussian(): number {
  return Math.sqrt(-2 * Math.log(1 - uniform())) * Math.cos(2 * Math.PI * uniform());
}

declare global {
  interface Window { privbanditHarness?: Harness }
}

if (new URLSearchParams(location.search).has("harness")) {
  window.privbanditHarness = new Harness();
} else {
  new Page().start().catch((err) => {
    const el = $("status");
    el.textContent = String(err);
    el.className = "status err";
  });
}
