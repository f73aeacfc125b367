// The library's exports behind the device's ports (ports.ts): which randomiser and which
// encoding a task's policy and transport call for, with the task's published parameters
// (GET /v1/tasks/{task}: `policy` is the full configuration, §3.3–3.5).
//
// An `sblb` task whose ε0 follows a growing batch schedule from a central target (the default
// demo-shuffle) randomises at the ε0 the analyzer publishes per batch length
// (`eps0_by_batch_size`: its accountant's search, which is not in the browser), sized as the
// Python device sizes it (`DeviceRuntime.report_randomizer`).
//
// Not served (refused with a reason, never approximated): a `ddp-linucb` task with
// `noise = "devices"` (each device adds a Skellam share: the library's randomiser sends exact
// statistics, issue 40's design, the default).

import { b64decode, hpkeKeyId } from "../crypto/hpke.js";
import type { HpkeKey } from "../crypto/reports.js";
import { Decider } from "../decide.js";
import { ddpPrio3Report, ldpSealedReport, sblbPrio3Report, sblbSealedReport } from "../index.js";
import { BinaryRandomizer } from "../randomizers/binary.js";
import { DdpRandomizer, type DdpEncoding } from "../randomizers/ddp.js";
import { GaussianRandomizer, type GaussianEncoding } from "../randomizers/gaussian.js";
import { PrivUnitRandomizer } from "../randomizers/privunit.js";
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

/** The batch length a report made now is sized for, as the Python device picks it: the largest
 * length of the schedule not above the one the newest model announces (the analyzer announced
 * l_b after b batches, so the report lands in a batch of length ≥ l_b), else the first. */
export function sizedLength(lengths: readonly number[], announced: number | null | undefined): number {
  const sorted = [...lengths].sort((a, b) => a - b);
  if (sorted.length === 0) throw new Error("a growing schedule with no batch lengths");
  if (announced === null || announced === undefined) return sorted[0]!;
  let size = sorted[0]!;
  for (const length of sorted) if (length <= announced) size = length;
  return size;
}

/** The sblb randomizer of a report made now, and the batch length it states (null under a
 * fixed schedule — one length — as the Python device states none there). */
export function sblbRandomizer(task: TaskInfo, model: ModelMessage):
  { rz: BinaryRandomizer; batchSize: number | null } {
  const p = task.policy;
  const m = num(p, "m", 1);
  const L = num(p, "L", 1);
  const table = task.eps0_by_batch_size;
  if (table !== null && table !== undefined) {
    const lengths = Object.keys(table).map(Number);
    if (!lengths.every((l) => Number.isSafeInteger(l) && l >= 1)) {
      throw new Error(`task ${task.id}: eps0_by_batch_size has a length that is not a batch length`);
    }
    const size = sizedLength(lengths, model.batch_size);
    const rz = new BinaryRandomizer(task.d!, num(table, String(size)), m, L);
    return { rz, batchSize: lengths.length > 1 ? size : null };
  }
  if (p["eps0"] === null || p["eps0"] === undefined) {
    throw new Error(`task ${task.id}: ε0 follows its batch length from a central target, and `
      + "the analyzer published no eps0_by_batch_size (an analyzer older than the client?)");
  }
  return { rz: new BinaryRandomizer(task.d!, num(p, "eps0"), m, L), batchSize: null };
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
    const { rz, batchSize } = sblbRandomizer(task, model);
    if (prio3) {
      const { report: made, shown } = await sblbPrio3Report(
        task.id, rz, x, reward, key, batchSize ?? undefined);
      return sealed("prio3", made, shown, batchSize);
    }
    const { report: made, shown } = await sblbSealedReport(task.id, rz, x, reward, key);
    // The length its ε0 is sized for, for the shuffler only (UploadedReport), as the Python
    // device states it; the sealed bytes are what they always were.
    const item = batchSize === null ? made : { ...made, batch_size: batchSize };
    return sealed("reports", item, shown, batchSize);
  }
  if (algo === "ldp-linucb" && !prio3) {
    const mechanism = p["mechanism"] ?? "gaussian";
    const params = {
      d: task.d!, epsilon: num(p, "epsilon"), L: num(p, "L", 1),
      encoding: (p["encoding"] ?? "plain") as GaussianEncoding,
      u_weight: num(p, "u_weight", 1),
      intercept: typeof p["intercept"] === "number" ? p["intercept"] : undefined,
    };
    let rz: GaussianRandomizer | PrivUnitRandomizer;
    if (mechanism === "privunit") rz = new PrivUnitRandomizer(params);
    else if (mechanism === "gaussian") rz = new GaussianRandomizer({ ...params, delta: num(p, "delta") });
    else throw new Error(`task ${task.id}: unknown ldp-linucb mechanism ${String(mechanism)}`);
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
      intercept_coords: Array.isArray(p["intercept_coords"]) ? p["intercept_coords"] as number[]
        : undefined,
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
