"""Performance-aware speculative resource oversubscription (ROSE, 004_ede694cf5a6a6a3b, Sec. 4-6).

One module per decision: ``load_approximation`` (Alg. 1-2), ``machine_rating`` (Alg. 3),
``machine_filter`` (Alg. 4), ``candidates`` (the aggregator's per-period entry point),
``least_loaded`` (the baseline ranking with the same signature), ``candidate_sync``
(Sec. 5.2), ``rounds`` (one aggregator period: rank, version, encode), ``admission``
(Sec. 6.1), ``anomaly`` (Sec. 6.2) and ``task_upgrade`` (Alg. 5, Sec. 6.3); every knob lives in
``config``.
"""
