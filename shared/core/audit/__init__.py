"""Empirical privacy lower bounds (issue 43): run a shipped mechanism on a worst-case pair of
neighbouring inputs many times, tell the two apart with the best test found on one half of the
samples, and turn the test's error rates on the other half into a lower bound on ε at a stated
confidence (``bounds``); the attaining pair of every mechanism a ledger claims (``pairs``); the
runner behind ``privbandit audit`` and ``privbandit.audit`` (``run``); the one-run audit of
Steinke, Nasr and Jagielski (2023) for canaries in a deployment (``bounds.one_run_epsilon``).

An audit is a lower bound: ε_lo > claimed ε proves the claim wrong (at the confidence), ε_lo ≤
claimed ε proves nothing (docs/audit.md)."""
