"""Choosing which shard rows to read so that an idle or finished row costs nothing: the consumer (hints,
rescans, shard order), peeking at rows, naming busy shards, and the low-watermark sweep that brings back
messages left behind a row's cursor (the only thing called *sweep*). Each row's state is the take's
(engine/take/row_state.py).
"""
