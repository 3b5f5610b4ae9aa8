"""The storage engine: everything that reads or writes casque's Cassandra tables, by concept.

Bottom up: each package imports only from those above it in this list (tests/test_layers.py ``ENGINE_RANK``).

- ``storage``: db, paging, schema, table, placement, stored_trigger, in_flight, received
- ``access``: access_keys, key_cache, grants, secrets
- ``queues``: store, attributes, names, dead_letter_sources, expiry_index, index_backfill, cooldown
- ``schedules``: triggers, cronspec
- ``cluster``: heartbeats, marks, activity, lease, move_tasks
- ``wake``: wakeups, hints, hint_directory
- ``send``: producer, fifo_send, fairness, keys, lookup, chain
- ``take``: step, options, read, budget, row_lock, holds, fifo, row_state, read_start
- ``consume``: consumer, row_peek, shard_names, sweep
- ``delivery``: receive, receipts, receive_attempts, acks, poison, deadletter
- ``observe``: samples, depth_estimate, fifo_groups, history
- ``stores`` (one module): builds every store above
- ``operations``: admin, observe, extras, queue_actions, reshard, stats, reaper, shard_growth, mover

``client.Casque`` (``daemon.engine.client``, the public import), on top, is the engine's facade. The engine imports
only from ``daemon.base``; the sub-packages' ``__init__`` files import nothing, so no import circle can
pass through a package.
"""
