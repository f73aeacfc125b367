/**
 * @privbandit/web — the device role of privbandit as a library (issue 41; docs/web-client.md,
 * "The library"). Pure functions and classes, no network, no storage, no framework: the page,
 * its worker and its outbox call these. Every random choice comes from crypto.getRandomValues.
 *
 * Deciding (docs/protocol.md §4):
 *   new Decider(model).decide(X) → { action, propensity: 1, scores }   (checkFeatures first)
 *
 * Randomising one (x, r) (docs/protocol.md §3.3–3.5):
 *   new BinaryRandomizer(d, eps0, m, L).randomize(x, r) → { bits, counts }            sblb
 *   new GaussianRandomizer({ d, epsilon, delta, L, encoding, u_weight, intercept })
 *       .randomize(x, r) → row (numbers)                                          ldp-linucb
 *   new DdpRandomizer({ d, scale, L, encoding, u_weight, intercept, intercept_coords }).rounded(x, r)
 *       → z (integers in the honest ranges, no noise: the aggregators add it)    ddp-linucb
 *
 * Sealing and sharding (docs/protocol.md §3.2, §5.1, §5.5):
 *   sealRow(key, task, float64Row(row) | packBits(bits)) → { reportId, report }  (reports)
 *   makePrio3Report(vdaf, values, key, batchSize?) → Prio3Report                          (prio3)
 *     vdaf = TaskVdaf.uniform(task, c, 0, m) (sblb) or ddpRandomizer.taskVdaf(task)
 *   key = { keyId, publicKey } from GET /v1/hpke-config (check keyId === hpkeKeyId(publicKey))
 *
 * One call per task kind: `sblbPrio3Report`, `sblbSealedReport`, `ldpSealedReport`,
 * `ddpPrio3Report` below. The Prio3 and field layer (prio3SumVec, SumVecRanges, Field128, …) is
 * exported for the conformance tests.
 */
import { b64decode, b64encode, ENC_BYTES, type EncryptedReport, hpkeInfo, hpkeKeyId, seal } from "./crypto/hpke.js";
import {
  float64Row, type HpkeKey, makePrio3Report, packBits, type Prio3Report, type Prio3TestInputs,
  publicShareDigest, REPORT_ID_BYTES, sealRow, TaskVdaf,
} from "./crypto/reports.js";
import { BitStream, cryptoRandom, dyadic, exactBernoulli, normalPair, type RandomSource } from "./crypto/random.js";
import { BinaryRandomizer, encodeValues, flipProbability } from "./randomizers/binary.js";
import { DdpRandomizer } from "./randomizers/ddp.js";
import { GaussianRandomizer, encodingSensitivity } from "./randomizers/gaussian.js";
import { gaussianSigma, logNdtr } from "./randomizers/analytic-gaussian.js";
import { betaInc, capFraction, PrivUnitRandomizer, privunitParameters } from "./randomizers/privunit.js";
import { checkFeatures, Decider, type Decision, type LinearModel } from "./decide.js";

export {
  b64decode, b64encode, ENC_BYTES, type EncryptedReport, hpkeInfo, hpkeKeyId, seal,
  float64Row, type HpkeKey, makePrio3Report, packBits, type Prio3Report, type Prio3TestInputs,
  publicShareDigest, REPORT_ID_BYTES, sealRow, TaskVdaf,
  BitStream, cryptoRandom, dyadic, exactBernoulli, normalPair, type RandomSource,
  BinaryRandomizer, encodeValues, flipProbability, DdpRandomizer, GaussianRandomizer,
  encodingSensitivity, gaussianSigma, logNdtr,
  betaInc, capFraction, PrivUnitRandomizer, privunitParameters,
  checkFeatures, Decider, type Decision, type LinearModel,
};
export { Field, Field64, Field128, type FVec } from "./crypto/prio3/field.js";
export { XofTurboShake128 } from "./crypto/prio3/xof.js";
export { SumVec, SumVecRanges } from "./crypto/prio3/circuits.js";
export {
  chunkLengthFor, Prio3, prio3Count, prio3Histogram, prio3MultihotCountVec, prio3Sum,
  prio3SumVec, prio3SumVecMultiproof, prio3SumVecRanges, type Sharded, SUM_VEC_RANGES_ID,
} from "./crypto/prio3/prio3.js";

/** sblb over the prio3 transport: the 0/1 randomizer's counts as a Prio3SumVec report (each
 * count in [0, m]); `shown` is what left the device before sharding. */
export async function sblbPrio3Report(
  task: string, rz: BinaryRandomizer, x: readonly number[], r: number, key: HpkeKey,
  batchSize?: number,
): Promise<{ report: Prio3Report; shown: number[] }> {
  const { counts } = rz.randomize(x, r);
  const vdaf = TaskVdaf.uniform(task, rz.c, 0, rz.m);
  return { report: await makePrio3Report(vdaf, counts, key, batchSize), shown: counts };
}

/** sblb over the reports transport: the randomized bits packed and sealed. */
export async function sblbSealedReport(
  task: string, rz: BinaryRandomizer, x: readonly number[], r: number, key: HpkeKey,
): Promise<{ report: EncryptedReport; reportId: Uint8Array; shown: number[] }> {
  const { bits } = rz.randomize(x, r);
  return { ...(await sealRow(key, task, packBits(bits))), shown: bits };
}

/** ldp-linucb: the Gaussian (or PrivUnit) row as little-endian float64, sealed. */
export async function ldpSealedReport(
  task: string, rz: GaussianRandomizer | PrivUnitRandomizer, x: readonly number[], r: number, key: HpkeKey,
): Promise<{ report: EncryptedReport; reportId: Uint8Array; shown: number[] }> {
  const row = rz.randomize(x, r);
  return { ...(await sealRow(key, task, float64Row(row))), shown: row };
}

/** ddp-linucb: the rounded statistics as a SumVecRanges report over the randomizer's honest
 * ranges (the task's Prio3 parameters: prio3_task.task_vdaf). */
export async function ddpPrio3Report(
  task: string, rz: DdpRandomizer, x: readonly number[], r: number, key: HpkeKey,
  batchSize?: number,
): Promise<{ report: Prio3Report; shown: number[] }> {
  const z = rz.rounded(x, r);
  return { report: await makePrio3Report(rz.taskVdaf(task), z, key, batchSize), shown: z };
}
