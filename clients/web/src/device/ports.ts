// What the device role needs of the pure library (decide.ts, randomizers/, crypto/), in one
// place: the device code depends on these signatures only, and `binding.ts` fills them with the
// library's exports. The wire types are docs/protocol.md §8's, as the analyzer sends them.

/** `TaskInfo` (GET /v1/tasks/{task}). */
export interface TaskInfo {
  id: string;
  threat_model: "none" | "ldp" | "shuffle" | "central";
  algo: string;
  d: number | null;
  K: number;
  batch_size: number;
  aggregation: "reports" | "secure-sum";
  secure_sum?: "prio3" | "paillier" | null;
  policy: Record<string, unknown>;
  /** sblb under a growing schedule from a central target: ε0 per batch length (JSON keys). */
  eps0_by_batch_size?: Record<string, number> | null;
  contributions?: { k: number; period_seconds: number | null } | null;
}

/** `ModelMessage` (GET /v1/tasks/{task}/model and its stream). */
export interface ModelMessage {
  task: string;
  version: number;
  theta: number[];
  V: number[][];
  beta: number;
  reports: number;
  batch_size?: number | null;
}

/** `HpkeConfig` (GET /v1/hpke-config): `public_key` is base64url of the X25519 key. */
export interface HpkeConfig {
  key_id: number;
  kem: string;
  kdf: string;
  aead: string;
  public_key: string;
}

/** The local decision (§4): argmax ⟨x, θ̃⟩ + β‖x‖_{V⁻¹}, the Python device's tie-break. */
export interface Decision {
  action: number;
  propensity: number;
}

/**
 * One feedback's report, ready for the outbox: `json` is the wire item (`EncryptedReport`,
 * `UploadedReport` or `Prio3Report`) sent verbatim on every retry, so a resend is the same
 * bytes (the shuffler's de-duplication: §5.1 by exact bytes, §5.5 by nonce). `shown` is what the
 * randomiser produced before sealing (the page shows it: randomised bits' counts, or the
 * rounded statistics), `sealedBytes` the size of what leaves the device.
 */
export interface SealedReport {
  transport: "reports" | "prio3";
  json: string;
  shown: number[];
  sealedBytes: number;
  batchSize: number | null;
}

/** The library's side of the device role. */
export interface Lib {
  /** The decision for K feature vectors under a published model (decide.ts). */
  decide(task: TaskInfo, model: ModelMessage, features: number[][]): Decision;
  /** Randomise (x, r) with the task's local randomiser under the model the device holds
   * (its announced batch length sizes ε0 or the noise), encode for the task's transport and
   * seal to the analyzer's HPKE key: all randomness from crypto.getRandomValues. */
  report(task: TaskInfo, model: ModelMessage, hpke: HpkeConfig, x: number[], reward: number):
    Promise<SealedReport>;
}
