"""``rllm-plugins bench``: estimators timed on a batch of the user's shape, dtype and device, each checked first.

- :mod:`.batch`: the batch (B rows of T tokens in groups, turns per row) as trajectories and as ``(B, T)`` arrays, and
  the collector's advantages on it (the reference);
- :mod:`.paths`: where an estimator runs (the core's batched form; adapters contribute their frameworks' paths through
  the entry-point group ``rllm_plugins.bench_paths``: verl's ``compute_advantage``);
- :mod:`.engine`: the correctness gate, then the time (the smallest of several medians), passes over ``(B, T)``,
  host<->device copies and peak memory; the table and the JSON report;
- :mod:`.measure`, :mod:`.timing`: the measurements (the benchmark scripts of ``benchmarks/`` use them too);
- :mod:`.command`: the command's arguments.
"""
