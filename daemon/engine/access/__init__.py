"""Who may call the SQS endpoint and what they may do: access keys, their in-memory cache, grants, and the
cluster's shared secrets that sign receipt handles and wake hints. One package, so a security review
reads one place.
"""
