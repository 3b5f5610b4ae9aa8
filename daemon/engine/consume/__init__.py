"""Choosing which shard rows to read so that an idle or finished row costs nothing: the consumer (hints,
rescans, shard order), each row's state, peeking at rows, naming busy shards, and the low-watermark
sweep that brings back messages left behind a row's cursor (the only thing called *sweep*).
"""
