"""The storage engine: everything that reads or writes casque's Cassandra tables.

Placement and the table's statements at the bottom; the producer, the lock protocol and the consumer,
acks, keys, poison and triggers above them; ``stores.Stores`` builds them all once, and
``client.Casque`` is the engine's facade (nothing in the engine imports it). It imports only from
``daemon.base``.
"""
