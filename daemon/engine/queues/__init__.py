"""A queue is a row: its settings and their cache, attributes and tags, the name and dead-letter indexes
(and their one-time backfill), resharding, and the operator's actions on a whole queue (purge, delete,
replay) with their cooldowns.
"""
