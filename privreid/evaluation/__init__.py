"""ReID evaluation: feature extraction and ranking metrics (CMC, mAP, mINP)."""

from privreid.evaluation.features import extract_features
from privreid.evaluation.metrics import evaluate, evaluate_cuhk03

__all__ = ["evaluate", "evaluate_cuhk03", "extract_features"]
