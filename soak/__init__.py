"""The fault-injection soak: the system as deployed, driven over its APIs while a seeded schedule of faults
hits its processes, its Redis and the network between them; at the end, what it promised is checked.

`python -m soak --quick` (or `make soak QUICK=1`) runs a few hundred jobs in under three minutes;
`python -m soak` runs 10,000. See docs/reliability.md for what each fault does and what is checked.
"""
