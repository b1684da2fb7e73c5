"""The documentation site (mkdocs.yml, docs/): it builds strictly, a broken link fails the build, the CLI
reference is the commands' own help, and no built page loads anything from another machine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

ROOT = Path(__file__).resolve().parents[2]
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}

# URLs written in the theme's JavaScript that it fetches only under a condition this site never meets;
# test_theme_conditions_never_met checks each condition on the built pages.
THEME_CONDITIONAL = {
    "unpkg.com/mermaid": "only for a ```mermaid block (no page has one)",
    "unpkg.com/resize-observer-polyfill": "only in a browser without ResizeObserver (Chromium has it)",
    "api.github.com": "only with repo_url set (mkdocs.yml has none)",
    "${e}/api/v4/projects": "GitLab's API, only with a GitLab repo_url (none)",
    # text in messages, never fetched
    "bit.ly/2s3ChXG": "in the search worker's console warning about an invalid query",
    "github.com/isaacs/node-glob/issues/167": "in an error message of lunr's wordcut (Thai) code",
}

HTML_RESOURCE = re.compile(
    r"<(?:script|img|iframe|source|audio|video|embed|input)\b[^>]*?\bsrc\s*=\s*[\"']?([^\"'\s>]+)"
    r"|<link\b[^>]*?\bhref\s*=\s*[\"']?([^\"'\s>]+)"
    r"|\bsrcset\s*=\s*[\"']([^\"']+)"
    r"|<object\b[^>]*?\bdata\s*=\s*[\"']?([^\"'\s>]+)",
    re.IGNORECASE,
)
CSS_RESOURCE = re.compile(
    r"@import\s+(?:url\()?\s*[\"']?([^\"')\s;]+)|url\(\s*[\"']?([^\"')\s]+)", re.IGNORECASE
)
JS_URL = re.compile(r"https?://[^\s\"'`<>)\\]+")


def off_machine(url: str) -> bool:
    """An absolute (or protocol-relative) http(s) URL naming a host other than this machine."""
    url = url.strip()
    if url.startswith("//"):
        url = "http:" + url
    parts = urlparse(url)
    return parts.scheme in ("http", "https") and (parts.hostname or "") not in LOCAL_HOSTS


def external_resources(site: Path) -> list[str]:
    """Every resource a built page, stylesheet or script would fetch from another machine: 'FILE: URL'.
    Links a reader follows (<a href>) are not resources."""
    found = []
    for path in sorted(site.rglob("*")):
        if path.suffix not in (".html", ".css", ".js") or not path.is_file():
            continue
        text = path.read_text(errors="replace")
        if path.suffix == ".html":
            urls = [u for m in HTML_RESOURCE.finditer(text) for u in m.groups() if u]
            urls = [part.split()[0] for u in urls for part in u.split(",") if part.strip()]  # srcset lists
            if "<link" in text:  # <link rel=canonical/alternate> are not fetched; rel=stylesheet/preload are
                urls = [u for u in urls if not _is_link_to_page(text, u)]
            found += [f"{path.relative_to(site)}: {u}" for u in urls if off_machine(u)]
            for block in re.findall(r"<style\b[^>]*>(.*?)</style>", text, re.DOTALL | re.IGNORECASE):
                found += [f"{path.relative_to(site)}: {u}" for m in CSS_RESOURCE.finditer(block)
                          for u in m.groups() if u and off_machine(u)]  # fmt: skip
        elif path.suffix == ".css":
            found += [f"{path.relative_to(site)}: {u}" for m in CSS_RESOURCE.finditer(text)
                      for u in m.groups() if u and off_machine(u)]  # fmt: skip
        else:
            for url in JS_URL.findall(text):
                if off_machine(url) and not _comment_or_conditional(text, url):
                    found.append(f"{path.relative_to(site)}: {url}")
    return found


def _is_link_to_page(html: str, url: str) -> bool:
    tag = re.search(r"<link\b[^>]*?" + re.escape(url) + r"[^>]*>", html)
    return (
        bool(tag)
        and re.search(r"\brel\s*=\s*[\"']?(canonical|alternate|author|license)\b", tag.group(0)) is not None
    )


def _comment_or_conditional(js: str, url: str) -> bool:
    if any(url.split("://", 1)[1].startswith(prefix) for prefix in THEME_CONDITIONAL):
        return True
    # license headers and doc references inside comments: /*! ... */, /** ... */, // ...
    for m in re.finditer(re.escape(url), js):
        before = js[max(0, m.start() - 2000) : m.start()]
        line = before.rsplit("\n", 1)[-1]
        in_block = before.rfind("/*") > before.rfind("*/")
        if not (in_block or "//" in line.replace("://", "")):
            return False
    return True


def build(config: Path, site: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "NO_MKDOCS_2_WARNING": "1"}  # fmt: skip
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "site"
    result = build(ROOT / "mkdocs.yml", out, ROOT)
    assert result.returncode == 0, result.stderr[-4000:]
    return out


def test_site_builds_strictly_with_every_page(site):
    for page in ("index.html", "teachers/index.html", "cli/index.html", "notebook/index.html",
                 "contributing/index.html", "benchmarks/index.html", "guide/your-kernel/index.html"):  # fmt: skip
        assert (site / page).is_file(), page


def test_a_broken_link_fails_the_build(tmp_path):
    """The strict build is the link check: the same site with one link to a missing page does not build."""
    for name in ("mkdocs.yml", "ARCHITECTURE.md"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    teachers = tmp_path / "docs" / "teachers.md"
    teachers.write_text(teachers.read_text() + "\nSee [the missing page](no-such-page.md).\n")
    result = build(tmp_path / "mkdocs.yml", tmp_path / "site", tmp_path)
    assert result.returncode != 0
    assert "no-such-page.md" in result.stderr


def test_cli_reference_is_the_commands_own_help(site):
    """docs/hooks.py writes each command's --help into the page at build time: the page cannot drift."""
    page = (site / "cli" / "index.html").read_text()
    from visualizer.tools.cli import COMMANDS

    for name in COMMANDS:
        assert f"usage: python -m visualizer {name}" in page, name
    assert "--threads-for" in page  # capture --source's options are part of capture --help
    assert "cli-reference" not in page  # the marker was replaced


def test_notebook_api_is_generated_from_the_docstrings(site):
    page = (site / "notebook" / "index.html").read_text()
    from visualizer.tools import notebook

    assert "NotebookCapture" in page
    first_line = notebook.NotebookCapture.__doc__.strip().splitlines()[0]
    assert first_line.split()[0] in page and "save_trace" in page


def test_architecture_is_included_not_copied(site):
    page = (site / "contributing" / "index.html").read_text()
    assert "One capture path" in page and "Add a kernel" in page
    assert not (ROOT / "docs" / "ARCHITECTURE.md").exists()


def test_no_page_loads_anything_from_another_machine(site):
    assert external_resources(site) == []


def test_theme_conditions_never_met(site):
    """The theme's conditional fetches (THEME_CONDITIONAL) stay unfetched: no mermaid block, no repo link."""
    for page in site.rglob("*.html"):
        text = page.read_text()
        assert 'class="mermaid"' not in text, page
        assert 'data-md-component="source"' not in text, page
        assert "fonts.googleapis.com" not in text and "fonts.gstatic.com" not in text, page


def test_the_scan_finds_what_it_should(tmp_path):
    """external_resources flags each kind of off-machine resource and spares links and local files."""
    (tmp_path / "a.html").write_text(
        '<a href="https://github.com/x">a link</a><script src="assets/x.js"></script>'
        '<script src="https://cdn.example.org/x.js"></script>'
        '<link rel="stylesheet" href="//fonts.googleapis.com/css?family=Roboto">'
        '<link rel="canonical" href="https://example.org/page/">'
        '<img srcset="img/a.png 1x, https://img.example.org/b.png 2x">'
        '<style>@import url("https://cdn.example.org/s.css");</style>'
        '<script src="http://127.0.0.1:8000/local.js"></script>'
    )
    (tmp_path / "b.css").write_text(
        "body{background:url(https://img.example.org/bg.png)} x{y:url(local.png)}"
    )
    (tmp_path / "c.js").write_text(
        '/*! license: https://example.org/license */\nload("https://cdn.example.org/lib.js");\n'
        "// see https://example.org/docs\n"
    )
    found = external_resources(tmp_path)
    assert found == [
        "a.html: https://cdn.example.org/x.js",
        "a.html: //fonts.googleapis.com/css?family=Roboto",
        "a.html: https://img.example.org/b.png",
        "a.html: https://cdn.example.org/s.css",
        "b.css: https://img.example.org/bg.png",
        "c.js: https://cdn.example.org/lib.js",
    ]


def github_slug(heading: str) -> str:
    """The anchor GitHub (and this site's toc, for these headings) gives a heading."""
    text = re.sub(r"[`*_]{2,}|`", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def test_readme_is_a_short_front_door_whose_links_resolve():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 300
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    assert len(links) > 20
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        path, _, anchor = link.partition("#")
        target = ROOT / path
        assert target.exists(), link
        if anchor:
            headings = re.findall(r"^#+ (.+)$", target.read_text(), re.MULTILINE)
            assert anchor in {github_slug(h) for h in headings}, link
