"""Taking due messages from one shard row under its lock, as one explicit step: the take itself (lock,
read, keep, commit), what it is asked and what it returns, its reads (FIFO beside standard), the byte
budget, the lock protocol, held rows, a FIFO group's order within its row, and each row's state (what a
consumer knows about a row: a hint for cost, shared with the choice of rows).
"""
