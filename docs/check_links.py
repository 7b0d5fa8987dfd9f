#!/usr/bin/env python3
"""Checks the relative links of README.md and the book's chapters (docs/src/*.md).

Usage: docs/check_links.py [--html BUILT_BOOK_DIR] [REPO_ROOT]

For every Markdown link, image, reference definition and HTML href/src outside code:
  - external links (http:, https:, mailto:, ws:, ...) are skipped: there is no network in CI;
  - the target file (or directory) of a relative link exists;
  - a `#anchor` is a heading of the target Markdown file (or of the same file for `#anchor`),
    using the slug rules GitHub and mdBook share: the heading's text without Markdown, lower
    case, whitespace to '-', every character other than letters, digits, '-' and '_' dropped;
    a repeated heading gets -1, -2, ...; explicit `{#id}` and `<a id/name>` anchors count too;
  - a link from a chapter stays inside docs/src (the built book holds nothing else);
  - every chapter in docs/src is listed in SUMMARY.md (mdBook renders only what it lists);
  - with --html, every anchor computed for a chapter is an id of the page mdBook built from it,
    so the slug rules above cannot drift from mdBook's.
Exits 1 after printing one line per problem: file:line, the link, and what is missing.
Standard library only.
"""

import argparse
import difflib
import html
import os
import re
import sys
import urllib.parse

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$")
EXPLICIT_ID = re.compile(r"\s*\{#([^}\s]+)[^}]*\}\s*$")
HTML_ANCHOR = re.compile(r"<a\s[^>]*\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_LINK = re.compile(r"<(?:a|img)\s[^>]*\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
# [text](dest "title"): text may hold one level of brackets and span lines.
INLINE_LINK = re.compile(
    r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]"
    r"\(\s*(<[^>\n]*>|[^\s()]+(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^)]*\)))?\s*\)"
)
REF_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)", re.M)
SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")
HEADING_ID = re.compile(r"<h[1-6][^>]*\bid=\"([^\"]+)\"")


def blank(text):
    """Same length, newlines kept: offsets and line numbers survive the masking."""
    return re.sub(r"[^\n]", " ", text)


def mask_code(text):
    """Blanks fenced code blocks, inline code spans and HTML comments."""
    out, fence = [], None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            out.append(blank(line))
        elif fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) and \
                    not line.strip()[len(m.group(1)):].strip():
                fence = None
            out.append(blank(line))
        else:
            out.append(line)
    text = "\n".join(out)
    text = re.sub(r"<!--.*?-->", lambda m: blank(m.group(0)), text, flags=re.S)
    # A code span: a run of N backticks up to the next run of exactly N.
    return re.sub(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", lambda m: blank(m.group(0)), text,
                  flags=re.S)


def heading_text(raw):
    """The text a heading renders to: code kept, links to their text, markup and tags dropped."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", raw)
    text = re.sub(r"<[^>]+>", "", text)
    text = text.replace("`", "").replace("*", "")
    return html.unescape(text).strip()


def slug(text):
    out = []
    for ch in text.lower():
        if ch.isalnum() or ch in "-_":
            out.append(ch)
        elif ch.isspace():
            out.append("-")
    return "".join(out)


def anchors(path, cache={}):
    """The anchors of a Markdown file, in order: [(anchor, heading line)]."""
    if path in cache:
        return cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    found, seen, fence = [], {}, None
    for line in text.split("\n"):
        m = FENCE.match(line)
        if fence is None and m:
            fence = m.group(1)
            continue
        if fence is not None:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence):
                fence = None
            continue
        for a in HTML_ANCHOR.findall(line):
            found.append((a, line.strip()))
        m = ATX.match(line)
        if not m:
            continue
        raw = m.group(2) or ""
        explicit = EXPLICIT_ID.search(raw)
        if explicit:
            found.append((explicit.group(1), line.strip()))
            continue
        base = slug(heading_text(raw))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.append((base if n == 0 else f"{base}-{n}", line.strip()))
    cache[path] = found
    return found


def links(path):
    """[(line number, destination)] of every link outside code."""
    with open(path, encoding="utf-8") as f:
        text = mask_code(f.read())
    result = []
    for regex in (INLINE_LINK, REF_DEF, HTML_LINK):
        for m in regex.finditer(text):
            dest = m.group(1)
            if dest.startswith("<") and dest.endswith(">"):
                dest = dest[1:-1]
            result.append((text.count("\n", 0, m.start(1)) + 1, html.unescape(dest)))
    return sorted(result)


def check_file(root, path, book_src, errors):
    rel_src = os.path.relpath(path, root)
    in_book = os.path.commonpath([path, book_src]) == book_src
    for line, dest in links(path):
        where = f"{rel_src}:{line}: link ({dest})"
        if SCHEME.match(dest) or dest.startswith("//"):
            continue  # external: not checked (no network)
        if dest.startswith("/"):
            errors.append(f"{where}: absolute path; use a path relative to {rel_src}")
            continue
        target, _, anchor = dest.partition("#")
        target = urllib.parse.unquote(target.split("?", 1)[0])
        resolved = os.path.normpath(os.path.join(os.path.dirname(path), target)) if target else path
        rel_target = os.path.relpath(resolved, root)
        if not os.path.exists(resolved):
            errors.append(f"{where}: file {rel_target} does not exist")
            continue
        if in_book and os.path.commonpath([resolved, book_src]) != book_src:
            errors.append(f"{where}: {rel_target} is outside docs/src, so the built book has no "
                          f"such page; name the file as `code` instead of linking it")
            continue
        if not anchor:
            continue
        if not resolved.endswith(".md") or os.path.isdir(resolved):
            errors.append(f"{where}: anchor #{anchor} on {rel_target}, which is not a Markdown "
                          f"file: cannot be checked")
            continue
        names = [a for a, _ in anchors(resolved)]
        if urllib.parse.unquote(anchor) not in names:
            close = difflib.get_close_matches(anchor, names, n=3, cutoff=0.5)
            hint = f" (did you mean {', '.join('#' + c for c in close)}?)" if close else ""
            errors.append(f"{where}: {rel_target} has no heading with anchor #{anchor}{hint}")


def check_summary(book_src, errors):
    summary = os.path.join(book_src, "SUMMARY.md")
    listed = {os.path.normpath(os.path.join(book_src, urllib.parse.unquote(d.partition("#")[0])))
              for _, d in links(summary) if not SCHEME.match(d)}
    for name in sorted(os.listdir(book_src)):
        path = os.path.join(book_src, name)
        if name.endswith(".md") and name != "SUMMARY.md" and path not in listed:
            errors.append(f"docs/src/{name}: not listed in docs/src/SUMMARY.md, so mdBook does "
                          f"not build it")


def check_html(book_src, html_dir, errors):
    for name in sorted(os.listdir(book_src)):
        if not name.endswith(".md") or name == "SUMMARY.md":
            continue
        page = os.path.join(html_dir, name[:-3] + ".html")
        if not os.path.exists(page):
            errors.append(f"docs/src/{name}: mdBook built no page {page}")
            continue
        with open(page, encoding="utf-8") as f:
            ids = set(HEADING_ID.findall(f.read()))
        for anchor, heading in anchors(os.path.join(book_src, name)):
            if anchor not in ids and html.escape(anchor) not in ids:
                errors.append(f"docs/src/{name}: heading {heading!r}: this checker's anchor "
                              f"#{anchor} is not an id of mdBook's page {page} (the slug rules "
                              f"differ: fix slug() in docs/check_links.py)")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", nargs="?", default=os.path.join(os.path.dirname(__file__), ".."))
    parser.add_argument("--html", help="directory of the book mdBook built, to compare anchors")
    args = parser.parse_args()
    root = os.path.abspath(args.root)
    book_src = os.path.join(root, "docs", "src")
    files = [os.path.join(root, "README.md")] + sorted(
        os.path.join(book_src, n) for n in os.listdir(book_src) if n.endswith(".md"))
    errors = []
    for path in files:
        check_file(root, path, book_src, errors)
    check_summary(book_src, errors)
    if args.html:
        check_html(book_src, os.path.abspath(args.html), errors)
    count = sum(len(links(p)) for p in files)
    if errors:
        print("\n".join(errors), file=sys.stderr)
        print(f"docs: {len(errors)} broken link(s) or anchor(s) in {len(files)} files",
              file=sys.stderr)
        return 1
    print(f"docs: {count} links in {len(files)} files checked (external links skipped)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
