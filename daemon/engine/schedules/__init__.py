"""Scheduled messages: what a trigger or cron expression means and when it fires next. A schedule's meaning is
decided here and nowhere else (its stored form is engine/storage/stored_trigger.py; how a schedule's key follows its
chain of occurrences, engine/send/chain.py, beside the keys).
"""
