"""casque's benchmark suite: ``python -m bench [--quick]`` (``make bench``).

Every number a claim rests on is measured here, on this machine, in one run, beside the thing it
is compared with: casque's end-to-end throughput and latency (swept over consumers and batch size),
scheduling lateness, tombstone flatness against a naive delete-on-ack queue, Celery, arq,
Dramatiq, pgqueuer and procrastinate running the same workload, cassandra-stress against the same
node, a profile of the daemon at full load, fair queues, the many-queues server's idle settling and
parked long polls, the Spark bulk load, the reliability soak, moto's SQS tests, and the SQS face
beside ElasticMQ. Every module here is one of those parts (bench/plan.py ``PARTS``) or a helper of one.
The machine is shared and noisy, so ratios are taken within one run, and the report says what the
Cassandra node was and did during each part (bench/node.py).
Results land in bench/out/ (JSON, PNG) and docs/benchmarks.md.
"""
