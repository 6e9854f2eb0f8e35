"""SecAgg+ secure aggregation, in one process and on Flower (docs/secure-aggregation.md)."""
