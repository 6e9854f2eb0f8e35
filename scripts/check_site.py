"""Check the built documentation site (``make docs``): every relative link and image opens a file of the site.

Opened from files (``site/index.html`` in a browser, no server), a link to a folder shows a bare directory listing
and a link out of the site shows nothing, so both count as dead here; anchors are mkdocs' own check.  ``404.html`` is left
out: only a web server shows it (for a missing path), and mkdocs gives it root-absolute links on purpose.

Usage: python scripts/check_site.py [SITE_DIR]   (exit 1 and one line per dead link if any)
"""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if value and ((tag == "a" and name == "href") or (tag in ("img", "script") and name == "src")
                          or (tag == "link" and name == "href")):
                self.targets.append(value)


def dead_links(site: Path) -> list[str]:
    """``page: target (why)`` for every relative link of every page of ``site`` that does not open a file in it."""
    site = site.resolve()
    dead = []
    for page in sorted(site.rglob("*.html")):
        if page.relative_to(site) == Path("404.html"):
            continue
        parser = _Links()
        parser.feed(page.read_text(encoding="utf-8", errors="replace"))
        for target in parser.targets:
            parts = urlsplit(target)
            if parts.scheme or parts.netloc or target.startswith(("#", "mailto:", "data:")):
                continue
            where = (page.parent / unquote(parts.path)).resolve()
            why = ("leaves the site" if not where.is_relative_to(site) else "a folder, not a page" if where.is_dir()
                   else "missing" if not where.is_file() else None)
            if why:
                dead.append(f"{page.relative_to(site)}: {target} ({why})")
    return dead


def main(argv: list[str]) -> int:
    site = Path(argv[0] if argv else "site")
    if not (site / "index.html").is_file():
        print(f"error: {site} holds no built site (run make docs)")
        return 2
    dead = dead_links(site)
    for line in dead:
        print(f"dead link: {line}")
    print(f"{len(dead)} dead links in {sum(1 for _ in site.rglob('*.html'))} pages of {site}")
    return 1 if dead else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
