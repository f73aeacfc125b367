"""Cryptography shared by device, shuffler and analyzer: HPKE report sealing (``hpke``), Paillier
(``paillier``), slot packing of secure-sum counts (``slots``) and the analyzer's key files
(``keystore``)."""
