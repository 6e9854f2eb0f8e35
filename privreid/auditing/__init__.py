"""Privacy audits: membership inference at the image and identity level, and empirical DP audits.

``privreid audit``: can an adversary tell that an image or a person was in a site's training data
(:mod:`.membership`)? Attacks of :mod:`.membership_attacks` (loss, feature statistics, LiRA with shadow models,
:mod:`.shadows`) against the adversaries of :mod:`.views`, reported as TPR at low FPR (:mod:`.metrics`,
:mod:`.report`). :mod:`.dp_audit` checks DP claims with canaries in one run (Steinke, Nasr & Jagielski, 2023).
"""

from privreid.auditing.run import AuditSettings, run_audit

__all__ = ["AuditSettings", "run_audit"]
