"""The federated engine, the method registry and the methods (docs/architecture.md)."""
