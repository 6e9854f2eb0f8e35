"""privreid: privacy-preserving (federated, decentralised) person re-identification.

The public API (imported on first use, so ``import privreid`` stays light)::

    import privreid

    config = privreid.RunConfig()                     # data / model / train sections, see privreid.config
    summary = privreid.train_run(config, "runs/x")   # the `privreid train` run, as a function
    model = privreid.load_model("runs/x/ckpt.pt")    # the global model (client=... for a personalised one)
    ckpt = privreid.Checkpoint.load("runs/x/ckpt.pt")  # typed: .method, .round, .clients, .load_model(client)
    metrics = privreid.evaluate_model(model, testset, height=128, width=64)

Registries (one registration adds a dataset format, a training method, a
defense, a model transform, an inversion attack, a threat model, a
retrieval attack, a malicious client or a membership attack; ``docs/extending.md``), each a :class:`privreid.registry.Registry`
with one behaviour (``register`` / ``unregister`` / ``get`` / ``names`` /
``origin``): ``FORMATS`` / ``register_format`` / ``available_formats``
(:mod:`privreid.data.formats`), ``METHODS`` / ``register_method`` /
``available_methods`` (:mod:`privreid.federated.registry`), ``DEFENSES`` /
``register_defense`` / ``available_defenses`` (:mod:`privreid.defenses.registry`),
``MODEL_TRANSFORMS`` / ``register_transform`` (:mod:`privreid.models.transforms`),
``INVERSION_ATTACKS`` / ``register_inversion_attack`` and ``THREATS`` /
``register_threat`` (:mod:`privreid.inversion`), ``RETRIEVAL_ATTACKS`` /
``register_retrieval_attack`` (:mod:`privreid.retrieval_attacks.feature_attacks`, needs
torchattacks), ``MALICIOUS_CLIENTS`` / ``register_malicious_client``
(:mod:`privreid.malicious_clients`), ``MEMBERSHIP_ATTACKS`` /
``register_membership_attack`` (:mod:`privreid.auditing.membership_attacks`).
"""

import logging

from privreid.lazy import lazy_exports

__version__ = "0.1.0"

# privreid logs through "privreid" and its children (privreid.log); the program that uses it configures the output
logging.getLogger(__name__).addHandler(logging.NullHandler())

#: public name -> (module, attribute)
_PUBLIC = {
    "RunConfig": ("privreid.config", "RunConfig"),
    "DataConfig": ("privreid.config", "DataConfig"),
    "ModelConfig": ("privreid.config", "ModelConfig"),
    "FederationConfig": ("privreid.config", "FederationConfig"),
    "OptimConfig": ("privreid.config", "OptimConfig"),
    "PrivacyConfig": ("privreid.config", "PrivacyConfig"),
    "RobustnessConfig": ("privreid.config", "RobustnessConfig"),
    "EvaluationConfig": ("privreid.config", "EvaluationConfig"),
    "RuntimeConfig": ("privreid.config", "RuntimeConfig"),
    "train_run": ("privreid.training", "train_run"),
    "evaluate_model": ("privreid.evaluation.model_eval", "evaluate_model"),
    "evaluate": ("privreid.api", "evaluate"),
    "EvaluationResult": ("privreid.api", "EvaluationResult"),
    "attack": ("privreid.api", "attack"),
    "AttackResult": ("privreid.api", "AttackResult"),
    "corrupt": ("privreid.api", "corrupt"),
    "CorruptionResult": ("privreid.api", "CorruptionResult"),
    "invert": ("privreid.api", "invert"),
    "InversionResult": ("privreid.api", "InversionResult"),
    "audit": ("privreid.api", "audit"),
    "AuditResult": ("privreid.api", "AuditResult"),
    "compare": ("privreid.api", "compare"),
    "ComparisonResult": ("privreid.api", "ComparisonResult"),
    "ReIDAdapter": ("privreid.models.adapter", "ReIDAdapter"),
    "load_any_model": ("privreid.models.external", "load_any_model"),
    "Checkpoint": ("privreid.checkpoint", "Checkpoint"),
    "load_checkpoint": ("privreid.checkpoint", "load_checkpoint"),
    "save_checkpoint": ("privreid.checkpoint", "save_checkpoint"),
    "load_model": ("privreid.checkpoint", "load_model"),
    "load_dataset": ("privreid.data.formats", "load_dataset"),
    "build_federation": ("privreid.data.catalog", "build_federation"),
    "DatasetFormat": ("privreid.data.formats", "DatasetFormat"),
    "register_format": ("privreid.data.formats", "register_format"),
    "available_formats": ("privreid.data.formats", "available_formats"),
    "FORMATS": ("privreid.data.formats", "FORMATS"),
    "Registry": ("privreid.registry", "Registry"),
    "METHODS": ("privreid.federated.registry", "METHODS"),
    "register_method": ("privreid.federated.registry", "register"),
    "available_methods": ("privreid.federated.registry", "available_methods"),
    "get_method": ("privreid.federated.registry", "get_method"),
    "DEFENSES": ("privreid.defenses.registry", "DEFENSES"),
    "Defense": ("privreid.defenses.registry", "Defense"),
    "register_defense": ("privreid.defenses.registry", "register"),
    "available_defenses": ("privreid.defenses.registry", "available_defenses"),
    "get_defense": ("privreid.defenses.registry", "get_defense"),
    "MODEL_TRANSFORMS": ("privreid.models.transforms", "TRANSFORMS"),
    "ModelTransform": ("privreid.models.transforms", "ModelTransform"),
    "register_transform": ("privreid.models.transforms", "register_transform"),
    "INVERSION_ATTACKS": ("privreid.inversion.settings", "INVERSION_ATTACKS"),
    "register_inversion_attack": ("privreid.inversion.settings", "register_inversion_attack"),
    "THREATS": ("privreid.inversion.threat_models", "THREATS"),
    "register_threat": ("privreid.inversion.threat_models", "register_threat"),
    "RETRIEVAL_ATTACKS": ("privreid.retrieval_attacks.feature_attacks", "RETRIEVAL_ATTACKS"),
    "register_retrieval_attack": ("privreid.retrieval_attacks.feature_attacks", "register_retrieval_attack"),
    "MALICIOUS_CLIENTS": ("privreid.malicious_clients", "MALICIOUS_CLIENTS"),
    "register_malicious_client": ("privreid.malicious_clients", "register_malicious_client"),
    "MEMBERSHIP_ATTACKS": ("privreid.auditing.membership_attacks", "MEMBERSHIP_ATTACKS"),
    "register_membership_attack": ("privreid.auditing.membership_attacks", "register_membership_attack"),
}

__all__ = ["__version__", *_PUBLIC]

__getattr__, __dir__ = lazy_exports(__name__, _PUBLIC)
