"""The operations over the engine's stores (engine/stores.py), above every store. What the facade
(``daemon.engine.client.Casque``) offers beyond sending and receiving, grouped the way an operator thinks of
them: ``cq.admin`` (queues and the poison queue), ``cq.observe`` (stats, depth, history, daemons) and
``cq.extras`` (SQS attributes, tags, dead-letter links); and what those and the daemons run: the actions on
whole queues (purge, delete, replay), resharding, ``casque stats``'s exact report, and the duties done once per
cluster (the idle-queue reaper, shard growth, SQS message moves).
"""
