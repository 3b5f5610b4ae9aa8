"""``python -m bench nemesis [--minutes N] [--seed N]``: every fault at once, at random from a seed, against
a 3-node ring at RF 3, then a checker over the ledgers of everything sent, handled, received and deleted.

The modules, in the order a run uses them: schedule (the faults, fixed up front from the seed), system (the ring, the
daemons and the servers), faults (doing one fault), traffic (the producers and SQS clients), ledger (the daemons'
sends and handler records), check (the violations), report (the figures), run (the whole)."""
