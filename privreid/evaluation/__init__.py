"""ReID evaluation: feature extraction and ranking metrics (CMC, mAP, mINP).

Every path that scores a model ranks through
:func:`privreid.evaluation.model_eval.rank_testset`, which applies the test
set's own protocol (Market-1501 rules, CUHK03, or a visible-infrared / video
benchmark's); :mod:`.chance` scores models whose features are not finite.
"""

from privreid.evaluation.features import extract_features
from privreid.evaluation.metrics import evaluate, evaluate_cuhk03

__all__ = ["evaluate", "evaluate_cuhk03", "extract_features"]
