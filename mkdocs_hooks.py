"""MkDocs hooks for llmsim's docs site (``mkdocs.yml`` names this file).

The pages are read in two places: on the repository's web view, whose
heading anchors follow GitHub's rule, and on the site MkDocs builds. Links
between pages carry GitHub's anchors (``#intervals-how-often-the-90--interval-holds``),
so the site's headings get the same ids, and ``mkdocs build --strict`` then
checks every such link.
"""
from __future__ import annotations

import re
import unicodedata


def github_slug(text: str, separator: str = "-") -> str:
    """GitHub's heading anchor: lower case, punctuation dropped, each space a hyphen (not collapsed)."""
    text = unicodedata.normalize("NFKC", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", separator)


def on_config(config, **kwargs):
    config.mdx_configs.setdefault("toc", {})["slugify"] = github_slug
    return config
