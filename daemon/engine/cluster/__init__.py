"""What the processes of one cluster tell each other through Cassandra besides messages: daemon heartbeats,
pull readers and activity marks, leases for the duties done once per cluster, and two such duties: the
idle-queue reaper and SQS message move tasks.
"""
