"""VIPeR (Gray et al., PETS 2007): 632 identities, one image in each of two cameras.

torchreid's layout: ``viper/VIPeR/{cam_a,cam_b}/*.bmp`` named ``<n>_<angle>.bmp``
(``000_45.bmp``); the n-th image of ``cam_a`` (sorted by name) and the n-th of
``cam_b`` show the same person, which is how torchreid pairs them.  View A
(query) is ``cam_a``, view B (gallery) ``cam_b``.
"""

from __future__ import annotations

from pathlib import Path

from privreid.errors import DataError

from privreid.data.formats.dg.common import DGPool, ReleaseTree, images

RELEASE = ReleaseTree(
    "root/VIPeR/{cam_a,cam_b}/<n>_<angle>.bmp (e.g. 000_45.bmp; the n-th images of cam_a and cam_b "
    "show one person; the VIPeR/ or viper/VIPeR/ levels are optional)",
    levels=("viper/VIPeR", "VIPeR", ""), holding=("cam_a", "cam_b"))


def read_pool(base: Path) -> DGPool:
    cam_a, cam_b = (images(base / cam, (".bmp",)) for cam in ("cam_a", "cam_b"))
    if len(cam_a) != len(cam_b):
        raise DataError(f"viper at {base}: cam_a holds {len(cam_a)} images and cam_b {len(cam_b)}; "
                        "VIPeR pairs them one to one")
    views = {pid: ([(str(a), pid, 0)], [(str(b), pid, 1)]) for pid, (a, b) in enumerate(zip(cam_a, cam_b))}
    return DGPool("viper", str(base), views)
