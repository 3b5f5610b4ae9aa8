"""Where casque's data lives in Cassandra: the connection and its asyncio bridge, paged reads, the keyspace's
tables, every statement on the ``messages`` table, the placement of a message in its shard row, and the shapes a
message is stored in (a delivery's in-flight state with its receive times, a schedule's trigger).
The rest of the engine reads and writes through these, so they are the engine's floor.
"""
