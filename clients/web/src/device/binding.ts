// The library's exports behind the device's ports (ports.ts): which randomiser and which
// encoding a task's policy and transport call for, with the task's published parameters
// (GET /v1/tasks/{task}: `policy` is the full configuration, §3.3–3.5).
//
// Not served (refused with a reason, never approximated): an `sblb` task whose ε0 follows a
// batch schedule from a central target (the accountant that picks ε0 per batch length is not in
// the browser); a `ddp-linucb` task with `noise = "devices"` (each device adds a Skellam share:
// the library's randomiser sends exact statistics, issue 40's design, the default).

import { b64decode, hpkeKeyId } from "../crypto/hpke.js";
import type { HpkeKey } from "../crypto/reports.js";
import { Decider } from "../decide.js";
import { ddpPrio3Report, ldpSealedReport, sblbPrio3Report, sblbSealedReport } from "../index.js";
import { BinaryRandomizer } from "../randomizers/binary.js";
import { DdpRandomizer, type DdpEncoding } from "../randomizers/ddp.js";
import { GaussianRandomizer, type GaussianEncoding } from "../randomizers/gaussian.js";
import type { HpkeConfig, Lib, ModelMessage, SealedReport, TaskInfo } from "./ports.js";

/** Deciders by task and model version: V's Cholesky factor once per model, not per user. */
const deciders = new Map<string, { version: number; decider: Decider }>();

function decider(task: TaskInfo, model: ModelMessage): Decider {
  const have = deciders.get(task.id);
  if (have !== undefined && have.version === model.version) return have.decider;
  const made = new Decider(model);
  deciders.set(task.id, { version: model.version, decider: made });
  return made;
}

/** The analyzer's HPKE key, checked against its key id (§3.1: SHA-256's first byte). */
function hpkeKey(cfg: HpkeConfig): HpkeKey {
  const publicKey = b64decode(cfg.public_key);
  if (publicKey.length !== 32 || hpkeKeyId(publicKey) !== cfg.key_id) {
    throw new Error("the analyzer's HPKE config does not match its key id");
  }
  return { keyId: cfg.key_id, publicKey };
}

function num(policy: Record<string, unknown>, name: string, fallback?: number): number {
  const v = policy[name] ?? fallback;
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw new Error(`the task's policy has no numeric ${name}`);
  }
  return v;
}

/** The sealed size on the wire: every base64 field's bytes (the JSON's framing aside). */
function sealedBytes(value: unknown): number {
  if (typeof value === "string") return Math.floor((value.replace(/=+$/, "").length * 3) / 4);
  if (value !== null && typeof value === "object") {
    return Object.entries(value).reduce(
      (n, [k, v]) => n + (k === "key_id" || k === "batch_size" ? 0 : sealedBytes(v)), 0);
  }
  return 0;
}

function sblbRandomizer(task: TaskInfo): BinaryRandomizer {
  const p = task.policy;
  if (p["eps0"] === null || p["eps0"] === undefined) {
    throw new Error(`task ${task.id}: ε0 follows the batch schedule from a central target; `
      + "the browser client serves sblb tasks with a fixed eps0");
  }
  return new BinaryRandomizer(task.d!, num(p, "eps0"), num(p, "m", 1), num(p, "L", 1));
}

/** One report as the outbox keeps it (the wire item's JSON, sent verbatim on every retry). */
function sealed(transport: "reports" | "prio3", item: object, shown: number[],
                batchSize: number | null): SealedReport {
  return { transport, json: JSON.stringify(item), shown, sealedBytes: sealedBytes(item), batchSize };
}

async function report(
  task: TaskInfo, model: ModelMessage, hpke: HpkeConfig, x: number[], reward: number,
): Promise<SealedReport> {
  const key = hpkeKey(hpke);
  const { algo, policy: p } = task;
  const prio3 = task.aggregation === "secure-sum";
  if (algo === "sblb" || algo === "sblb-fixed") {
    const rz = sblbRandomizer(task);
    if (prio3) {
      const { report: made, shown } = await sblbPrio3Report(task.id, rz, x, reward, key);
      return sealed("prio3", made, shown, null);
    }
    const { report: made, shown } = await sblbSealedReport(task.id, rz, x, reward, key);
    return sealed("reports", made, shown, null);
  }
  if (algo === "ldp-linucb" && !prio3) {
    const rz = new GaussianRandomizer({
      d: task.d!, epsilon: num(p, "epsilon"), delta: num(p, "delta"), L: num(p, "L", 1),
      encoding: (p["encoding"] ?? "plain") as GaussianEncoding,
      u_weight: num(p, "u_weight", 1),
      intercept: typeof p["intercept"] === "number" ? p["intercept"] : undefined,
    });
    const { report: made, shown } = await ldpSealedReport(task.id, rz, x, reward, key);
    return sealed("reports", made, shown, null);
  }
  if (algo === "ddp-linucb" && prio3) {
    if ((p["noise"] ?? "aggregators") !== "aggregators") {
      throw new Error(`task ${task.id}: noise = ${String(p["noise"])} needs a Skellam share from `
        + "each device; the browser client serves ddp-linucb with the aggregators' noise");
    }
    const rz = new DdpRandomizer({
      d: task.d!, scale: num(p, "scale", 128), L: num(p, "L", 1),
      encoding: (p["encoding"] ?? "upper") as DdpEncoding, u_weight: num(p, "u_weight", 1),
      intercept: typeof p["intercept"] === "number" ? p["intercept"] : undefined,
    });
    // The batch length the report is sized for, as the Python device states it: the one the
    // newest model announces, else the task's first.
    const batchSize = model.batch_size ?? task.batch_size;
    const { report: made, shown } = await ddpPrio3Report(task.id, rz, x, reward, key, batchSize);
    return sealed("prio3", made, shown, batchSize);
  }
  throw new Error(`task ${task.id}: the browser client does not serve ${algo} over `
    + `${prio3 ? "prio3" : "reports"}`);
}

export const lib: Lib = {
  decide(task, model, features) {
    const { action, propensity } = decider(task, model).decide(features);
    return { action, propensity };
  },
  report,
};
