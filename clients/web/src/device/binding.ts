// The library's exports behind the device's ports (ports.ts): which randomiser and which
// encoding a task's policy and transport call for, with the task's published parameters
// (GET /v1/tasks/{task}: `policy` is the full configuration, §3.3–3.5).
//
// Not served (refused with a reason, never approximated): an `sblb` task whose ε0 follows a
// batch schedule from a central target (the accountant that picks ε0 per batch length is not in
// the browser); a `ddp-linucb` task with `noise = "devices"` (each device adds a Skellam share:
// the library's randomiser sends exact statistics, issue 40's design, the default).

import { b64decode, hpkeKeyId } from "../crypto/hpke.js";
import {
  float64Row, type HpkeKey, makePrio3Report, packBits, sealRow, TaskVdaf,
} from "../crypto/reports.js";
import { Decider } from "../decide.js";
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

// The private Prio3 codepoint of SumVecRanges, one maximum per entry (shared/crypto/prio3/
// prio3.py SUM_VEC_RANGES_ID): what the aggregators verify a ddp-linucb report with.
const SUM_VEC_RANGES_ID = 0xffff5253;

/** The integers each coordinate of an honest ddp-linucb report lies in (lo, hi), as
 * shared/core/randomizers/skellam.py entry_ranges states them: in real units, for ‖x‖ ≤ L and
 * the reward factor a ∈ [0, 1] (±½ centered), the diagonal x_i² ∈ [0, L²], an off-diagonal
 * b x_i x_j ∈ ±b L²/2, the reward part w a x_i ∈ ±w h L (with the intercept c: x₀² = c², the
 * rest on ρ = √(L² − c²)); scaled by s, [a, b] becomes [⌊s a⌋, ⌈s b⌉]. */
export function ddpEntryRanges(rz: DdpRandomizer): { lo: number[]; hi: number[] } {
  const { d, L, scale, encoding, uWeight } = rz;
  const off = encoding === "upper" ? 1 : Math.SQRT2;
  const aMax = encoding === "centered" ? 0.5 : 1;
  const c = encoding === "centered" ? rz.intercept ?? null : null;
  const rho = c !== null ? Math.sqrt(Math.max(L * L - c * c, 0)) : L;
  const loReal: number[] = [];
  const hiReal: number[] = [];
  for (let i = 0; i < d; i++) {
    for (let j = i; j < d; j++) {
      if (i === j) {
        const constant = c !== null && i === 0;
        loReal.push(constant ? c * c : 0);
        hiReal.push(constant ? c * c : c !== null ? rho * rho : L * L);
      } else {
        const bound = c !== null && i === 0 ? off * c * rho
          : (off * (c !== null ? rho * rho : L * L)) / 2;
        loReal.push(-bound);
        hiReal.push(bound);
      }
    }
  }
  for (let i = 0; i < d; i++) {
    const norm = c !== null ? (i === 0 ? c : rho) : L;
    loReal.push(-uWeight * aMax * norm);
    hiReal.push(uWeight * aMax * norm);
  }
  return { lo: loReal.map((v) => Math.floor(scale * v)), hi: hiReal.map((v) => Math.ceil(scale * v)) };
}

function ddpVdaf(task: TaskInfo, rz: DdpRandomizer): TaskVdaf {
  const { lo, hi } = ddpEntryRanges(rz);
  // A constant entry (x₀² = c² under an intercept) proves [lo, lo + 1], as the aggregators do.
  return new TaskVdaf(task.id, lo, hi.map((h, i) => Math.max(h, lo[i]! + 1)), SUM_VEC_RANGES_ID);
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
  task: TaskInfo, model: ModelMessage, hpke: HpkeConfig, x: number[], reward: number,
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
  if (algo === "ddp-linucb" && prio3) {
    const p = task.policy;
    if ((p["noise"] ?? "aggregators") !== "aggregators") {
      throw new Error(`task ${task.id}: noise = ${String(p["noise"])} needs a Skellam share from `
        + "each device; the browser client serves ddp-linucb with the aggregators' noise");
    }
    const rz = new DdpRandomizer({
      d: task.d!, scale: num(p, "scale", 128), L: num(p, "L", 1),
      encoding: (p["encoding"] ?? "upper") as DdpEncoding, u_weight: num(p, "u_weight", 1),
      intercept: typeof p["intercept"] === "number" ? p["intercept"] : undefined,
    });
    const z = rz.rounded(x, reward);
    // The batch length the report is sized for, as the Python device states it: the one the
    // newest model announces, else the task's first.
    const batchSize = model.batch_size ?? task.batch_size;
    const made = await makePrio3Report(ddpVdaf(task, rz), z, key, batchSize);
    return { transport: "prio3", json: JSON.stringify(made), shown: z,
      sealedBytes: sealedBytes(made), batchSize };
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
