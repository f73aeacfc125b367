"""The practical defaults of the private policies (issue 22), in one place: what ``privbandit
simulate`` and the demo tasks use unless the flags say otherwise or ``--paper`` is given. Each
config's fields keep the paper's settings; its registry entry (``registry.PolicyEntry.practical``
and ``practical_by_aggregation``) names its settings here.
Every setting is post-processing of the private statistics, a batch schedule, or a privacy
parameter stated as the same guarantee (the ledgers decide): none changes what a user is
promised. The measurements behind each are in docs/benchmarks/ (frontier.md, ddp-linucb.md,
adar.md, sblb.md, ldp.md: issue 22 per policy), made on seeds the final figures do not use.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

Settings = Mapping[str, object]

# Greedy (Han et al. 2021's greedy estimation on diverse contexts) on the ridge sized by the
# noise of the reports so far, c_t = λ + ¼·2σ√(t d), with θ̃ perturbed by 0.3 × a draw of its own
# noise (``LDPLinUCB._publish``: keeps greedy from locking in); the centered report where the
# contexts have an intercept ((y − ½) x × 2, off-diagonals × √2: Δ² 4.5 as Alg. 5's, so the
# same σ, but half the noise variance on G̃'s off-diagonal entries and on ũ, and G̃₀₀ exact;
# docs/benchmarks/ldp.md, section ldpc), else Alg. 5's. The report's randomizer is PrivUnit2 on
# that vector (pure ε, δ = 0: ``randomizers.privunit``; issue 44 item 5): at ε = 1 its per-entry
# variance is ≈ 7× below the Gaussian's at (1, 10⁻⁶), and on `linear` (d = 5, K = 20, T = 10⁶,
# 3 runs, seed 1) it ends at 9,818 ± 362 against 40,723 ± 7,080
# (docs/benchmarks/ldp-mechanisms.md).
LDP_LINUCB: Settings = MappingProxyType({
    "regularizer": "noise",
    "noise_ridge": 0.25,
    "confidence_scale": 0.0,
    "perturb": 0.3,
    "encoding": "auto",
    "mechanism": "privunit",
})
# Greedy on the eigen-clipped Gram matrix: the same regret as width 0.1, ten times faster.
LDP_GLB: Settings = MappingProxyType({
    "regularizer": "clip",
    "confidence_scale": 0.0,
})
# A central target; batches grow slowly (ε0 only grows as the batch does, and sblb's noise is per
# report, so frequent early models matter) to the sum-only accountant's length; m = 4 bits per
# value cut Alg. 2's rounding noise 16-fold at a per-bit ε0 the batch sums still hide.
SBLB: Settings = MappingProxyType({
    "epsilon": 1.0,
    "batch_schedule": "geometric:1000,1.25,4096",
    "regularizer": "noise",
    "confidence_scale": 0.02,
    "m": 4,
})
# Growing batches (a first batch of 37.5 × one batch's noise sd, doubling to 10⁵), the ridge
# and width from the noise added so far, the centered encoding where the contexts have an
# intercept ((r − ½) x: Δ² 2.53 against frobenius's 4.5 at w = 1; per-arm features: one intercept
# per block), else frobenius (exact joint sensitivity). Width 0.07 (session 22; 0.1 before): on
# per-arm (disjoint) features at T = 10⁴ it learns (46.2 / 46.8 / 45.5 % of random's regret on
# seeds 101 / 1 / 200, 6 runs, against 49.9 / 52.0 / 50.4 % at 0.1), on `linear` it is the same
# (T = 10⁶, seed 1: 420.8 ± 79.0 against 419.7 ± 72.3), and on one fixed arm set (fixed-linear,
# T = 10⁵) no worse (8,457 ± 2,016 against 10,357 ± 3,112, seed 102, 6 runs), where 0.05 locks
# runs onto a wrong arm (10,442 ± 3,899 against 7,741 ± 938, seed 101); docs/benchmarks/
# yardstick.md.
DDP_LINUCB: Settings = MappingProxyType({
    "batch_schedule": "geometric:auto,2,100000",
    "regularizer": "noise",
    "confidence_scale": 0.07,
    "encoding": "auto",
})
# ddp-linucb's growing batches and noise-sized ridge over the GLM statistics (``ddp-glb``), a
# narrower width (its β carries reward_sigma = 2): on tuning seed 100, logistic, T = 10⁵, width
# 0.03 (672 ± 56 at ε = 1) against 0.1 (751 ± 41), 0.3 (4,099) and greedy 0 (725 ± 70); at ε = 4
# all of 0.01–0.1 ≈ 242. The frobenius encoding (the GLM statistics' own joint bound, Δ² 5 against
# upper's 6, half the off-diagonal noise): 578 ± 26 against 640 ± 61 at ε = 1, 188 ± 25 against
# 221 ± 29 at ε = 4 (docs/benchmarks/glm.md).
DDP_GLB: Settings = MappingProxyType({
    "batch_schedule": "geometric:auto,2,100000",
    "regularizer": "noise",
    "confidence_scale": 0.03,
    "encoding": "frobenius",
})
# No release before ⌈50 σ_Y/L⌉ reports, then releases on a 9-fold det growth (Alg. 4: switching
# from the first report, C = 0.5 as in RS-OFUL, width 1).
ADAR_OFUL: Settings = MappingProxyType({
    "first_episode": "auto",
    "switching": 8.0,
    "confidence_scale": 0.1,
})
# Every phase 0.3² = 0.09 of Eq. 8's length: at central (1, 10⁻⁶), fixed-linear d = 5, K = 20,
# T = 10⁶, 12 runs, 5,644 ± 735 against the paper's 44,821 ± 3,685 (random 436,200); 0.2 is
# unstable at ε = 0.5 (7,592 ± 4,804) and 0.1 fails (232,437 ± 149,728).
ADAR_GOPE: Settings = MappingProxyType({"confidence_scale": 0.3})

# The non-private policies (issue 44 item 1: the yardstick every "× linucb" figure divides by is
# the best non-private setting, so the non-private policies get theirs too). Each searched on
# tuning seed 101 (3 runs) by ``python -m bench.experiments.yardstick``, on two environments
# each, the least geometric mean of regret ÷ the environment's best; the tables are in
# docs/benchmarks/yardstick.md.
# 0.3 × OFUL's β. Narrower widths learn a little faster where each user brings K fresh random
# arms (``linear``: greedy, width 0, is best there, the contexts explore for it), but fail on one
# fixed arm set (``fixed-linear``, T = 10⁵: 0.3 → 71, 0.1 → 17,712, 0.03 → 23,728; width 1 → 593):
# 0.3 is the width that learns best on both (the geometric mean).
LINUCB: Settings = MappingProxyType({"confidence_scale": 0.3})
# 0.3 × UCB1's width. On the default instance (K = 20, 0.9 then 0.8 … 0.1) narrower is better
# down to 0.03 (13.4 against 138.4 at 0.3, 1,505.8 at 1; greedy locks one run in); on ten close
# arms (0.55 against nine at 0.5) 0.3 is best and 0.2 and below lock runs onto a 0.5 arm (3,308
# at 0.2, 5,000 at 0.1 against 351 at 0.3).
UCB: Settings = MappingProxyType({"confidence_scale": 0.3})
# 3 × the paper's step size (T = 10⁵, d = 5): the least geometric mean over bco-quadratic, where
# longer steps are better (one point: 465 at 3, 371 at 10, 990 at 1), and bco-convex, where they
# overshoot (one point: 5,622 at 3, 8,769 at 10, 3,757 at 0.3); the same for two points.
BCO: Settings = MappingProxyType({"step_scale": 3.0})

# Where the aggregation changes what is best. Over whole shuffled reports sblb's ε0 stays small
# (FMT: ≈ 2.7 at l = 10³, 7.1 at 10⁵): one bit per value, whose randomized response keeps more
# signal at a small per-bit ε, and batches growing on to 10⁵ (ε0 still grows with l there).
SBLB_BY_AGGREGATION: Mapping[str, Settings] = MappingProxyType({
    "reports": MappingProxyType({"m": 1, "batch_schedule": "geometric:1000,2,100000"}),
})
