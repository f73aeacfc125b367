"""Wire messages of the privbandit protocol (spec §4): ``messages`` for reports, batches, models
and the device API; ``paillier`` for the Paillier transport; ``prio3`` for the
Prio3 one."""
