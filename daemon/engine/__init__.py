"""The storage engine: everything that reads or writes casque's Cassandra tables, by concept.

- ``storage``: db, paging, schema, table, placement
- ``take``: step, options, read, budget, locking, holds, fifo
- ``consume``: consumer, row_state, row_peek, shard_names, sweep
- ``operations``: admin, observe, extras
- ``send``: producer, fifo_send, fairness, keys, lookup
- ``delivery``: receive, receipts, received, receive_attempts, acks, poison, deadletter
- ``schedules``: triggers, cronspec, chain
- ``wake``: wakeups, hints, hint_directory
- ``queues``: store, attributes, names, dead_letter_sources, index_backfill, reshard, admin, cooldown
- ``cluster``: heartbeats, marks, activity, lease, reaper, move_tasks, mover
- ``observe``: stats, samples, depth_estimate, fifo_groups, history
- ``access``: access_keys, key_cache, grants, secrets

``client.Casque`` (``daemon.engine.client``, the public import) is the engine's facade. The engine imports
only from ``daemon.base``; the sub-packages' ``__init__`` files import nothing, so no import circle can
pass through a package.
"""
