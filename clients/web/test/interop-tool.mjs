// The node side of tests/interop/test_web_client.py (not a node test itself: the name does not
// end in .test.mjs). Reads one JSON object {"jobs": [...]} on stdin, runs each job with the
// built library (dist/privbandit.js) and prints {"results": [...]} on stdout. Binary values
// travel as hex.
import * as pb from "../dist/privbandit.js";

const hex = (b) => Buffer.from(b).toString("hex");
const bytes = (h) => new Uint8Array(Buffer.from(h, "hex"));
const keyOf = (j) => ({ keyId: j.key_id, publicKey: bytes(j.public_key) });

const ops = {
  async sblb_prio3(j) {
    const rz = new pb.BinaryRandomizer(j.d, j.eps0, j.m, j.L);
    const { report, shown } = await pb.sblbPrio3Report(j.task, rz, j.x, j.r, keyOf(j), j.batch_size);
    return { report, counts: shown, p: rz.p };
  },
  async sblb_sealed(j) {
    const rz = new pb.BinaryRandomizer(j.d, j.eps0, j.m, j.L);
    const { report, shown } = await pb.sblbSealedReport(j.task, rz, j.x, j.r, keyOf(j));
    return { report, bits: shown };
  },
  async ldp_sealed(j) {
    const rz = new pb.GaussianRandomizer(j.params);
    const { report, shown } = await pb.ldpSealedReport(j.task, rz, j.x, j.r, keyOf(j));
    return { report, row: shown, sigma: rz.sigma };
  },
  async privunit_sealed(j) {
    const { delta: _unused, ...params } = j.params;
    const rz = new pb.PrivUnitRandomizer(params);
    const { report, shown } = await pb.ldpSealedReport(j.task, rz, j.x, j.r, keyOf(j));
    return { report, row: shown, norm: rz.norm };
  },
  async ddp_prio3(j) {
    const rz = new pb.DdpRandomizer(j.params);
    const { report, shown } = await pb.ddpPrio3Report(j.task, rz, j.x, j.r, keyOf(j));
    return { report, z: shown, statistics: rz.statistics(j.x, j.r), norm_bound: rz.normBound,
      lo: rz.rangeLo, hi: rz.rangeHi };
  },
  async decide(j) {
    return j.cases.map(({ model, X }) => new pb.Decider(model).decide(X).action);
  },
  async log_ndtr(j) {
    return j.xs.map(pb.logNdtr);
  },
  async sigma(j) {
    return j.cases.map(([eps, delta, sens]) => pb.gaussianSigma(eps, delta, sens));
  },
  async gaussian_sigma(j) {
    return j.cases.map((params) => new pb.GaussianRandomizer(params).sigma);
  },
  async flip(j) {
    return j.cases.map(([eps0, d, m]) => pb.flipProbability(eps0, d, m));
  },
};

let input = "";
for await (const chunk of process.stdin) input += chunk;
const { jobs } = JSON.parse(input);
const results = [];
for (const job of jobs) results.push(await ops[job.op](job));
process.stdout.write(JSON.stringify({ results }, (_, v) => (v instanceof Uint8Array ? hex(v) : v)));
