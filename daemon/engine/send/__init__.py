"""Putting messages in: the producer (standard and FIFO queues, with per-tenant fairness), the lookup keys
that name a message (and how a schedule's key follows its chain of occurrences), and finding or cancelling a
message by its id or key. A send is one write to its row; these decide what that write is.
"""
