"""privreid: privacy-preserving (federated, decentralised) person re-identification."""

__version__ = "0.1.0"
