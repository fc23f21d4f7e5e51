"""Capacity planning: the capacity gap (what to re-partition, then buy, so waiting demand is served),
the purchase MILP over node types, and what-if scenarios side by side."""
