"""Wire messages of the privbandit protocol (spec §4): ``messages`` for reports, batches, models
and the device API; ``secure_sum`` for the Paillier transport."""
