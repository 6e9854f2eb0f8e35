"""The documentation site (issue 40, item 7): every page of the navigation is on the home page's table, the
home page carries the README's quick start, and the built site's links open files (scripts/check_site.py)."""

import importlib.util
import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def load_checker():
    spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def nav_pages(nav) -> list[str]:
    pages = []
    for entry in nav:
        for value in entry.values():
            pages += nav_pages(value) if isinstance(value, list) else [value]
    return pages


def test_every_page_of_the_navigation_is_in_the_home_table():
    class Loader(yaml.SafeLoader):
        pass

    Loader.add_multi_constructor("tag:yaml.org,2002:python/name:", lambda loader, suffix, node: suffix)
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=Loader)
    assert config["use_directory_urls"] is False  # opens from files
    css = "".join((ROOT / "docs" / path).read_text() for path in config["extra_css"])
    assert re.search(r"pre > code \{[^}]*white-space: pre-wrap", css)  # a long command wraps in its code box
    home = (ROOT / "docs" / "index.md").read_text()
    linked = set(re.findall(r"\]\(([\w-]+\.md)\)", home))
    missing = [p for p in nav_pages(config["nav"]) if p != "index.md" and p not in linked]
    assert missing == []


def test_the_home_page_includes_the_readme_quick_start_sections():
    readme = (ROOT / "README.md").read_text()
    home = (ROOT / "docs" / "index.md").read_text()
    for section in re.findall(r'--8<-- "README\.md:(\w+)"', home):
        start, end = f"<!-- --8<-- [start:{section}] -->", f"<!-- --8<-- [end:{section}] -->"
        assert start in readme and end in readme and readme.index(start) < readme.index(end), section
    assert {"commands", "python"} <= set(re.findall(r'--8<-- "README\.md:(\w+)"', home))


def test_the_site_checker_finds_folder_missing_and_outside_links(tmp_path):
    site = tmp_path / "site"
    (site / "models").mkdir(parents=True)
    (site / "img.png").write_bytes(b"png")
    (site / "models.html").write_text('<a href="index.html#top">home</a><img src="img.png">')
    (site / "404.html").write_text('<a href="/models.html">served only</a>')
    (site / "index.html").write_text(
        '<a href="models.html">ok</a><a href="models/">folder</a><a href="gone.html">gone</a>'
        '<a href="../examples/plugin-package">outside</a><a href="https://example.org/x">web</a><a href="#a">anchor</a>')
    checker = load_checker()
    assert checker.dead_links(site) == ["index.html: models/ (a folder, not a page)",
                                        "index.html: gone.html (missing)",
                                        "index.html: ../examples/plugin-package (leaves the site)"]
    assert checker.main([str(site)]) == 1
    (site / "index.html").write_text('<a href="models.html">ok</a>')
    assert checker.main([str(site)]) == 0
    assert checker.main([str(tmp_path / "nothing")]) == 2
