// The node side of bench/web_client.py (not a test): reads {"reports": n, "rounds": k, "x": [...],
// "r": [...], "sblb": {...}, "ddp": {...}, "key_id", "public_key"} on stdin and prints, per task
// kind, the mean time (seconds) of one report in the last round (the earlier ones warm up): randomise + shard + seal
// (sblb: 0/1 randomizer, Prio3SumVec over [0, m]; ddp-linucb: clip, scale, round, the task's
// Prio3 ranges), each with the library's CSPRNG.
import { performance } from "node:perf_hooks";

import * as pb from "../dist/privbandit.js";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const job = JSON.parse(input);
const key = { keyId: job.key_id, publicKey: new Uint8Array(Buffer.from(job.public_key, "hex")) };
const sblb = new pb.BinaryRandomizer(job.sblb.d, job.sblb.eps0, job.sblb.m, job.sblb.L);
const ddp = new pb.DdpRandomizer(job.ddp.params);
const ddpVdaf = pb.TaskVdaf.uniform("ddp", ddp.n, job.ddp.lo, job.ddp.hi);

const kinds = {
  sblb: (i) => pb.sblbPrio3Report("sblb", sblb, job.x[i], job.r[i], key),
  ddp: (i) => pb.ddpPrio3Report(ddpVdaf, ddp, job.x[i], job.r[i], key),
};
const samples = { sblb: [], ddp: [] };
for (let round = 0; round < job.rounds; round++) {
  for (const [name, make] of Object.entries(kinds)) {
    const t0 = performance.now();
    for (let i = 0; i < job.reports; i++) await make(i);
    samples[name].push((performance.now() - t0) / 1000 / job.reports);
  }
}
// the last round: the earlier ones warm the JIT and the caches
process.stdout.write(JSON.stringify(Object.fromEntries(
  Object.entries(samples).map(([k, v]) => [k, v[v.length - 1]]))));
