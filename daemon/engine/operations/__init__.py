"""The operations the facade (``daemon.engine.client.Casque``) offers beyond sending and receiving, grouped
the way an operator thinks of them: ``cq.admin`` (queues and the poison queue), ``cq.observe`` (stats,
depth, history, daemons) and ``cq.extras`` (SQS attributes, tags, dead-letter links).
"""
