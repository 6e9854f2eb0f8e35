"""Privacy audits: membership inference at the image and identity level, and empirical DP audits.

``privreid audit`` asks whether an adversary can tell that an image, or a
person, was in a site's training data (:mod:`.membership`), with the attacks
of :mod:`.attacks` (loss, feature statistics, LiRA with privreid-trained
shadow models, :mod:`.shadows`) against the adversaries of :mod:`.views`
(the released model, or the server's view of one client's uploads), and
reports TPR at low FPR on log-log ROC curves (:mod:`.metrics`,
:mod:`.report`).  :mod:`.dp_audit` checks DP claims empirically with
canaries in one training run (Steinke, Nasr & Jagielski, NeurIPS 2023).
"""

from privreid.auditing.run import AuditSettings, run_audit

__all__ = ["AuditSettings", "run_audit"]
