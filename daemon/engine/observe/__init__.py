"""Reading what queues hold and what happened to them, for operators and autoscalers: the daemons'
time-series samples, the bounded depth estimate, a FIFO queue's groups, and message history. ``casque stats``'s
exact report (the only thing called *stats*) reads through all the stores: engine/operations/stats.py.
"""
