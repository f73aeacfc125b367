"""Device cost of one ``ddp-linucb`` report next to the existing secure-sum (sblb) report.

Per report, medians over repeats, interleaved:
- ddp: quantize (clip, scale, CSPRNG unbiased rounding) | sample (n exact Skellam shares from
  the OS CSPRNG, ``randomizers.exact_poisson``) | pack (signed slots) | encrypt (Paillier, one
  multiplication per plaintext from a precomputed pool);
- sblb: randomize (Garcelon Alg. 2–3, numpy) | pack + encrypt (the same encryptor);
- the off-path cost of one Paillier obfuscator r^n mod n² (what bounds a device's rate today);
- ddp's one-off table build for the share sampler (once per task and process).

    python -m bench.ddp_device [--epsilon 1 --l 1000 --gamma 1 --key-bits 2048 --reports 300]
        [--encoding upper|frobenius|centered --intercept 0.7071067811865475 --u-weight 1.5]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from privbandit.shared.core.policies import make_config, randomizer_for
from privbandit.shared.core.randomizers.binary import BinaryRandomizer
from privbandit.shared.crypto.paillier import PaillierEncryptor, generate_keypair
from privbandit.shared.crypto.slots import encoding_layout, pack_signed


def med_us(samples: list[float]) -> float:
    return 1e6 * statistics.median(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--l", type=int, default=1000)
    ap.add_argument("--gamma", type=float, default=1.0)
    ap.add_argument("--key-bits", type=int, default=2048)
    ap.add_argument("--reports", type=int, default=300)
    ap.add_argument("--encoding", default="upper", choices=["upper", "frobenius", "centered"])
    ap.add_argument("--intercept", type=float, default=None)
    ap.add_argument("--u-weight", type=float, default=1.0)
    args = ap.parse_args()
    policy = make_config("ddp-linucb", d=5, batch_size=args.l, epsilon=args.epsilon,
                         honest_fraction=args.gamma, noise="devices", encoding=args.encoding,
                         intercept=args.intercept, u_weight=args.u_weight)
    rz = randomizer_for(policy)
    public, _ = generate_keypair(args.key_bits)
    enc = PaillierEncryptor(public.n)
    lay = encoding_layout(rz.sum_encoding(), args.l, enc.key_bits)
    t0 = time.perf_counter()
    noise = rz.exact_noise
    build = time.perf_counter() - t0
    binary = BinaryRandomizer(5, 32.0, 1, 1.0)
    rng = np.random.default_rng(1)
    x = rng.normal(size=(args.reports, 5))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    if args.intercept is not None:  # the centered encoding's contexts: x[0] = c, ‖x‖ = 1
        c = args.intercept
        x[:, 1:] *= np.sqrt(1 - c * c) / np.linalg.norm(x[:, 1:], axis=1, keepdims=True)
        x[:, 0] = c
    enc.refill(2 * args.reports)
    times: dict[str, list[float]] = {k: [] for k in (
        "quantize", "sample", "pack", "encrypt", "sblb_randomize", "sblb_pack_encrypt")}
    for i in range(args.reports):
        t = time.perf_counter()
        z = rz.rounded(x[i], 1.0)
        t1 = time.perf_counter()
        shares = [noise.sample() for _ in range(rz.n)]
        t2 = time.perf_counter()
        values = [a + b for a, b in zip(z, shares, strict=True)]
        plain = pack_signed(np.asarray(values), lay)
        t3 = time.perf_counter()
        enc.encrypt(plain, fallback=False)
        t4 = time.perf_counter()
        counts = binary.counts(binary.randomize(x[i : i + 1], np.ones(1), rng))[0]
        t5 = time.perf_counter()
        enc.encrypt_counts(counts, args.l, 1, fallback=False)
        t6 = time.perf_counter()
        for key, dt in zip(times, (t1 - t, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5),
                           strict=True):
            times[key].append(dt)
    obf = [0.0] * 20
    for j in range(20):
        t = time.perf_counter()
        enc.obfuscator()
        obf[j] = time.perf_counter() - t
    ddp_total = sum(med_us(times[k]) for k in ("quantize", "sample", "pack", "encrypt"))
    sblb_total = med_us(times["sblb_randomize"]) + med_us(times["sblb_pack_encrypt"])
    print(f"ddp-linucb ε={args.epsilon:g} l={args.l} γ={args.gamma:g}: share variance "
          f"{rz.share_variance:.1f} (λ={float(rz.lam):.1f}), n={rz.n}, slots {lay.slot_bits} "
          f"bits, {lay.plaintexts} plaintext(s), {args.key_bits}-bit key")
    for k, v in times.items():
        print(f"  {k:18s} {med_us(v):9.1f} µs/report")
    print(f"  ddp request path   {ddp_total:9.1f} µs/report   sblb {sblb_total:9.1f} µs/report")
    print(f"  obfuscator r^n     {med_us(obf):9.1f} µs (off path, one per ciphertext)")
    print(f"  sampler table      {1e3 * build:9.1f} ms once per task")
    print(f"  ratio ddp/obfuscator {ddp_total / med_us(obf):.3f}")


if __name__ == "__main__":
    main()
