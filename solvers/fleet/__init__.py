"""Fleet-scale planning by target configurations: a configuration LP solved by column generation,
with exact per-node pricing, rounded and realised on the placement kernel: ``cpsat``'s first plan of a
fleet of many waiting replicas, and a back-end of its own, ``fleet`` (:mod:`.solver`)."""
