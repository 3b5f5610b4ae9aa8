"""What the processes of one cluster tell each other through Cassandra besides messages: daemon heartbeats,
pull readers and activity marks, leases for the duties done once per cluster, and SQS message move tasks. The duties
themselves (the idle-queue reaper, shard growth, the move runner) work over all the stores: engine/operations/.
"""
