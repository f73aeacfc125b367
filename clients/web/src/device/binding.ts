// The library's exports behind the device's ports (ports.ts): which randomiser and which
// encoding a task's policy and transport call for, with the task's published parameters
// (GET /v1/tasks/{task}: `policy` is the full configuration, §3.3–3.5).
//
// Not served (refused with a reason, never approximated): an `sblb` task whose ε0 follows a
// batch schedule from a central target (the accountant that picks ε0 per batch length is not in
// the browser); `ddp-linucb` until its per-entry Prio3 ranges (issue 40's design, which the
// library's randomiser follows) are what the aggregators verify.

import { b64decode, hpkeKeyId } from "../crypto/hpke.js";
import {
  float64Row, type HpkeKey, makePrio3Report, packBits, sealRow, TaskVdaf,
} from "../crypto/reports.js";
import { Decider } from "../decide.js";
import { BinaryRandomizer } from "../randomizers/binary.js";
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

async function report(
  task: TaskInfo, _model: ModelMessage, hpke: HpkeConfig, x: number[], reward: number,
): Promise<SealedReport> {
  const key = hpkeKey(hpke);
  const algo = task.algo;
  const prio3 = task.aggregation === "secure-sum";
  if ((algo === "sblb" || algo === "sblb-fixed") && !prio3) {
    const { bits } = sblbRandomizer(task).randomize(x, reward);
    const { report: sealed } = await sealRow(key, task.id, packBits(bits));
    return { transport: "reports", json: JSON.stringify(sealed), shown: bits,
      sealedBytes: sealedBytes(sealed), batchSize: null };
  }
  if ((algo === "sblb" || algo === "sblb-fixed") && prio3) {
    const rz = sblbRandomizer(task);
    const { counts } = rz.randomize(x, reward);
    const made = await makePrio3Report(TaskVdaf.uniform(task.id, rz.c, 0, rz.m), counts, key);
    return { transport: "prio3", json: JSON.stringify(made), shown: counts,
      sealedBytes: sealedBytes(made), batchSize: null };
  }
  if (algo === "ldp-linucb" && !prio3) {
    const p = task.policy;
    const rz = new GaussianRandomizer({
      d: task.d!, epsilon: num(p, "epsilon"), delta: num(p, "delta"), L: num(p, "L", 1),
      encoding: (p["encoding"] ?? "plain") as GaussianEncoding,
      u_weight: num(p, "u_weight", 1),
      intercept: typeof p["intercept"] === "number" ? p["intercept"] : undefined,
    });
    const row = rz.randomize(x, reward);
    const { report: sealed } = await sealRow(key, task.id, float64Row(row));
    return { transport: "reports", json: JSON.stringify(sealed), shown: row,
      sealedBytes: sealedBytes(sealed), batchSize: null };
  }
  throw new Error(`task ${task.id}: the browser client does not serve ${algo} over `
    + `${prio3 ? "prio3" : "reports"} yet`);
}

export const lib: Lib = {
  decide(task, model, features) {
    const { action, propensity } = decider(task, model).decide(features);
    return { action, propensity };
  },
  report,
};
