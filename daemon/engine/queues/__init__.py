"""A queue is a row: its settings and their cache, attributes and tags, the name, dead-letter and expiry indexes
(and the one-time backfill of the first two), and the cooldowns of the operator's actions on a whole queue
(the actions themselves, purge, delete, replay and resharding, are engine/operations/).
"""
