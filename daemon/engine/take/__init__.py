"""Taking due messages from one shard row under its lock, as one explicit step: the take itself (lock,
read, keep, commit), what it is asked and what it returns, its reads (FIFO beside standard), the byte
budget, the lock protocol, held rows, and a FIFO group's order within its row.
"""
