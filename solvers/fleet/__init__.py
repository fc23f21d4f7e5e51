"""Fleet-scale planning by target configurations: a configuration LP solved by column generation,
with exact per-node pricing, rounded and realised on the placement kernel."""
