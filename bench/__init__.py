"""casque's benchmark suite: ``python -m bench [--quick]`` (``make bench``).

Every number a claim rests on is measured here, on this machine, in one run, beside the thing it
is compared with: casque's end-to-end throughput and latency (swept over consumers and batch size),
scheduling lateness, tombstone flatness against a naive delete-on-ack queue, Celery, arq,
Dramatiq, pgqueuer and procrastinate running the same workload, cassandra-stress against the same
node, and a profile of the daemon at full load. The machine is shared and noisy, so ratios are
taken within one run.
Results land in bench/out/ (JSON, PNG) and docs/benchmarks.md.
"""
