"""Capacity planning: the capacity gap (what to re-partition, then buy, so waiting demand is served),
the purchase MILP over node types, and what-if scenarios side by side. The gap run (``gap``) keeps its
steps in order; its settings, time shares, demand, node-type catalog, placement check and cost shares
each live in a module of their own."""
