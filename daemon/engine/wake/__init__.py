"""Waking a parked consumer or long poll when a message is due, instead of at its next poll: in-process
wake-ups, and signed UDP hints to other processes with the directory of who listens where.
"""
