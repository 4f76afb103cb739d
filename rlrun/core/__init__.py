"""The parts every other package builds on: specs (and, as the layout moves, contracts, policy, registry)."""
