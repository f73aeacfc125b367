// The device's Web Worker: the heavy part of a feedback (randomise, Prio3-shard with its
// proof, HPKE-seal) runs here, off the page's main thread, so the page stays responsive while a
// report is made. The worker holds no state: each request carries the task, the model, the
// analyzer's HPKE config and the chosen arm's (x, r); randomness is the worker's own
// crypto.getRandomValues.

import { lib } from "./device/binding.js";
import type { WorkerRequest, WorkerResponse } from "./device/worker_client.js";

const scope = self as unknown as {
  onmessage: ((ev: MessageEvent<WorkerRequest>) => void) | null;
  postMessage(message: WorkerResponse): void;
};

scope.onmessage = (ev) => {
  const { id, task, model, hpke, x, reward } = ev.data;
  lib.report(task, model, hpke, x, reward).then(
    (report) => scope.postMessage({ id, report }),
    (err: unknown) => scope.postMessage({ id, error: String(err instanceof Error ? err.message : err) }),
  );
};
