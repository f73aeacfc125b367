// The page's side of the device's Web Worker (src/worker.ts): a `Reporter` that posts each
// report's work to the worker and resolves with its sealed report.

import type { Reporter } from "./device.js";
import type { HpkeConfig, ModelMessage, SealedReport, TaskInfo } from "./ports.js";

export interface WorkerRequest {
  id: number;
  task: TaskInfo;
  model: ModelMessage;
  hpke: HpkeConfig;
  x: number[];
  reward: number;
}

export type WorkerResponse = { id: number; report: SealedReport } | { id: number; error: string };

/** A Reporter backed by a module worker at `url` (the built worker.js). */
export function workerReporter(url: string | URL): { reporter: Reporter; terminate(): void } {
  const worker = new Worker(url, { type: "module" });
  const waiting = new Map<number, { resolve(r: SealedReport): void; reject(e: Error): void }>();
  let next = 0;
  worker.onmessage = (ev: MessageEvent<WorkerResponse>) => {
    const w = waiting.get(ev.data.id);
    if (w === undefined) return;
    waiting.delete(ev.data.id);
    if ("error" in ev.data) w.reject(new Error(ev.data.error));
    else w.resolve(ev.data.report);
  };
  worker.onerror = (ev) => {
    for (const w of waiting.values()) w.reject(new Error(`worker failed: ${ev.message}`));
    waiting.clear();
  };
  const reporter: Reporter = (task, model, hpke, x, reward) => new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, { resolve, reject });
    const request: WorkerRequest = { id, task, model, hpke, x, reward };
    worker.postMessage(request);
  });
  return { reporter, terminate: () => worker.terminate() };
}
