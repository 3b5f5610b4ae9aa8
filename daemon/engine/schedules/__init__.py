"""Scheduled messages: what a trigger or cron expression means, when it fires next, and how a schedule's key
follows its chain of occurrences. A schedule's meaning is decided here and nowhere else.
"""
