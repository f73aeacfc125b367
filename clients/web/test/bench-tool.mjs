// The node side of bench/web_client.py (not a test): reads {"reports": n, "rounds": k, "x": [...],
// "r": [...], "sblb": {...}, "ddp": {...}, "key_id", "public_key"} on stdin and prints, per task
// kind, [CPU seconds of the process (all threads), wall seconds] of one report, the mean over the
// last round (the earlier ones warm up): randomise + shard + seal
// (sblb: 0/1 randomizer, Prio3SumVec over [0, m]; ddp-linucb: clip, scale, round,
// SumVecRanges over the honest ranges), each with the library's CSPRNG.
import { performance } from "node:perf_hooks";

import * as pb from "../dist/privbandit.js";

let input = "";
for await (const chunk of process.stdin) input += chunk;
const job = JSON.parse(input);
const key = { keyId: job.key_id, publicKey: new Uint8Array(Buffer.from(job.public_key, "hex")) };
const sblb = new pb.BinaryRandomizer(job.sblb.d, job.sblb.eps0, job.sblb.m, job.sblb.L);
const ddp = new pb.DdpRandomizer(job.ddp.params);

const kinds = {
  sblb: (i) => pb.sblbPrio3Report("sblb", sblb, job.x[i], job.r[i], key),
  ddp: (i) => pb.ddpPrio3Report("ddp", ddp, job.x[i], job.r[i], key),
};
const samples = { sblb: [], ddp: [] };
for (let round = 0; round < job.rounds; round++) {
  for (const [name, make] of Object.entries(kinds)) {
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    for (let i = 0; i < job.reports; i++) await make(i);
    const c = process.cpuUsage(c0);
    samples[name].push([(c.user + c.system) / 1e6 / job.reports,
      (performance.now() - t0) / 1000 / job.reports]);
  }
}
// the last round: the earlier ones warm the JIT and the caches
process.stdout.write(JSON.stringify(Object.fromEntries(
  Object.entries(samples).map(([k, v]) => [k, v[v.length - 1]]))));
