"""What happens to a message once it is taken: the pull API (receive, receipt handles, FIFO receive
attempts) and the ends of a delivery (ack, retry, poison, dead-letter queue). Each finishes or
hands back one delivery by writing only that message's own row.
"""
