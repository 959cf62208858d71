"""YAML and JSON text as llmsim reads them: strictly.

PyYAML and ``json`` keep the last of two equal keys, so ``replicas: 2``
followed further down by ``replicas: 8`` would silently run with 8; both
parsers here refuse a duplicate key instead, naming its line. A document
nested deeper than any scenario needs is refused before the parsers
recurse into it (50,000 ``[`` would otherwise end in a RecursionError),
and so is block-style (indented) nesting as YAML is composed. YAML
aliases are counted as what they expand to: nine levels of ten aliases
fit in a few hundred bytes and stand for 10⁹ values, which every later
walk over the data (strict types, validation, copies) would visit; a
document past :data:`MAX_NODES` expanded values is refused while it is
composed, before anything walks it. Every problem is a ``ValueError``
with a readable message; callers add the file name.
"""
from __future__ import annotations

import copy
import json
import re
import threading
from collections import OrderedDict
from typing import Any

import yaml

__all__ = ["parse_yaml", "parse_flag_value", "parse_json", "AmbiguousNumber", "MAX_DEPTH", "MAX_NODES"]

#: Deepest nesting accepted (the deepest scenario key path is under 10).
MAX_DEPTH = 64
#: Most values (mappings, lists and scalars, each alias counted as what it
#: stands for) in one YAML document: the largest shipped file has about 1,000.
MAX_NODES = 100_000


class _Strict:
    """What both loaders add to PyYAML's composer and SafeConstructor: a key
    given twice in one mapping is refused, and so is a document deeper than
    MAX_DEPTH or larger than MAX_NODES once its aliases are expanded (checked
    node by node as it is composed)."""

    def _start_counts(self) -> None:
        self._level = 0
        self._nodes = 0
        self._expanded: dict[int, tuple[int, int]] = {}   # id(node) -> (values, depth) it stands for

    def compose_node(self, parent: Any, index: Any) -> Any:
        alias = self.check_event(yaml.AliasEvent)
        self._level += 1
        try:
            if self._level > MAX_DEPTH:
                raise ValueError(f"nested more than {MAX_DEPTH} levels deep")
            node = super().compose_node(parent, index)
        finally:
            self._level -= 1
        if alias:
            count, depth = _expanded_size(node, self._expanded)
            if self._level + depth > MAX_DEPTH:
                raise ValueError(f"nested more than {MAX_DEPTH} levels deep once its aliases are expanded")
        else:
            count = 1
        self._nodes += count
        if self._nodes > MAX_NODES:
            raise ValueError(f"more than {MAX_NODES:,} values once its aliases (*name) are expanded"
                             if alias else f"more than {MAX_NODES:,} values")
        return node

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                hash(key)
            except TypeError:
                continue  # SafeLoader reports unhashable keys itself
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} given twice (first on line {seen[key] + 1}); "
                                f"a later value would silently replace the first", key_node.start_mark)
            seen[key] = key_node.start_mark.line
        return super().construct_mapping(node, deep=deep)


class _StrictLoader(_Strict, yaml.SafeLoader):
    """PyYAML's pure-Python SafeLoader, strictly: the reference the fast loader
    must equal, and what reports every problem (its messages are the ones users see)."""

    def __init__(self, stream: str):
        super().__init__(stream)
        self._start_counts()


try:
    from yaml.cyaml import CParser as _CParser
except ImportError:         # PyYAML built without LibYAML: the pure-Python loader alone
    _CParser = None

if _CParser is not None:
    class _FastStrictLoader(_Strict, yaml.composer.Composer, _CParser, yaml.constructor.SafeConstructor,
                            yaml.resolver.Resolver):
        """The same loader with LibYAML's scanner and parser producing the events (PyYAML's own
        composer, constructor and resolver consume them, with the same checks): a 48 KB backend
        profile parsed in 57 ms of pure Python takes about a fifth of that, and every run, plan point
        and refusal of an edited profile parses one. Any problem is left to :class:`_StrictLoader`
        to find and word (:func:`_parse_yaml`)."""

        def __init__(self, stream: str):
            _CParser.__init__(self, stream)
            yaml.constructor.SafeConstructor.__init__(self)
            yaml.resolver.Resolver.__init__(self)
            yaml.composer.Composer.__init__(self)
            self._start_counts()

        def dispose(self) -> None:
            pass

# YAML 1.1 (PyYAML) reads 1e-9 and 2E6 as text (its floats need a dot); YAML
# 1.2 and every other reader take them as the numbers they look like. Text is
# refused where a number goes, so they are read as numbers here.
for _loader in (_StrictLoader,) if _CParser is None else (_StrictLoader, _FastStrictLoader):
    _loader.add_implicit_resolver(
        "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
        list("-+0123456789"))


class AmbiguousNumber(yaml.constructor.ConstructorError):
    """A number two YAML readers read differently: PyYAML (YAML 1.1) reads ``010`` as octal 8 and
    ``1:30`` as base 60 (90), YAML 1.2 and JSON as 10 and text. Either reading would be a guess at
    what was meant (a zero-padded count, minutes and seconds), so the value is refused."""


def _plain_int(loader: Any, node: yaml.ScalarNode) -> Any:
    text = str(node.value)
    digits = text.replace("_", "").lstrip("+-")
    read = yaml.constructor.SafeConstructor.construct_yaml_int(loader, node)
    if ":" in digits:
        raise AmbiguousNumber(None, None, f"{text!r} is a number in base 60 to YAML 1.1 ({read}) and text to "
                                          f"YAML 1.2; write the number alone, in the key's unit", node.start_mark)
    if digits.isdigit() and read != int(text.replace("_", "")):     # 010: octal 8, or 10 (007 is 7 either way)
        raise AmbiguousNumber(None, None, f"{text!r} has a leading zero, which YAML 1.1 reads as octal ({read}) "
                                          f"and YAML 1.2 as {int(text.replace('_', ''))}; write the number without it",
                              node.start_mark)
    return read


def _plain_float(loader: Any, node: yaml.ScalarNode) -> Any:
    if ":" in str(node.value):
        raise AmbiguousNumber(None, None, f"{node.value!r} is a number in base 60 to YAML 1.1 "
                                          f"({yaml.constructor.SafeConstructor.construct_yaml_float(loader, node)}) "
                                          f"and text to YAML 1.2; write the number alone, in the key's unit",
                              node.start_mark)
    return yaml.constructor.SafeConstructor.construct_yaml_float(loader, node)


for _loader in (_StrictLoader,) if _CParser is None else (_StrictLoader, _FastStrictLoader):
    _loader.add_constructor("tag:yaml.org,2002:int", _plain_int)
    _loader.add_constructor("tag:yaml.org,2002:float", _plain_float)


def _expanded_size(node: yaml.Node, memo: dict[int, tuple[int, int]]) -> tuple[int, int]:
    """(values, depth) a composed node stands for with every alias expanded;
    each distinct node is visited once, so a bomb is measured in microseconds."""
    key = id(node)
    if key not in memo:
        memo[key] = (1, 1)          # a node that (through a recursive alias) contains itself
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        elif isinstance(node, yaml.SequenceNode):
            children = node.value
        else:
            children = []
        count, depth = 1, 0
        for child in children:
            c, d = _expanded_size(child, memo)
            count, depth = min(count + c, MAX_NODES + 1), max(depth, d)
        memo[key] = (count, depth + 1)
    return memo[key]


def _depth(text: str, opening: str, closing: str) -> int:
    """Deepest flow-style bracket nesting (an upper bound where brackets sit in strings). Only the
    brackets are visited: a character loop over the whole text took a quarter of a profile's parse."""
    depth = deepest = 0
    for ch in re.findall(f"[{re.escape(opening + closing)}]", text):
        if ch in opening:
            depth += 1
            deepest = max(deepest, depth)
        elif ch in closing:
            depth = max(depth - 1, 0)
    return deepest


def _check_depth(text: str) -> None:
    if _depth(text, "[{", "]}") > MAX_DEPTH:
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep")


#: Texts parsed last, and what they gave: a plan or sweep reads the same scenario and profile files for
#: every run it checks, prices and keys (a 6-GPU × 23-value plan parsed 1,964 documents, 15 of its 23 s;
#: PyYAML's pure-Python parser takes ~7 ms a profile, a copy of its result well under one).
_PARSED: "OrderedDict[str, Any]" = OrderedDict()
_PARSED_ENTRIES = 256
_PARSED_MAX_CHARS = 1 << 18
_PARSED_LOCK = threading.Lock()


def parse_yaml(text: str) -> Any:
    """Parse YAML; raises ``yaml.YAMLError`` (with a mark) or ``ValueError``. A text parsed before (one
    of the last few hundred, each under 256 KB) gives a fresh copy of what it gave then."""
    small = len(text) <= _PARSED_MAX_CHARS
    if small:
        with _PARSED_LOCK:      # a Dask worker may run points in threads
            hit = _PARSED.get(text)
            if hit is not None:
                _PARSED.move_to_end(text)
        if hit is not None:
            return copy.deepcopy(hit)
    value = _parse_yaml(text)
    if small and value is not None:
        with _PARSED_LOCK:
            _PARSED[text] = copy.deepcopy(value)
            while len(_PARSED) > _PARSED_ENTRIES:
                _PARSED.popitem(last=False)
    return value


def parse_flag_value(raw: str) -> Any:
    """A value given on the command line (``--set``, ``--vary``) read as YAML, or the text itself where
    YAML reads none (``@home``: a word). Raises ValueError for a mapping or list left unclosed or with a
    comma lost (``{backend: vllm``), which as text would be refused as no mapping, the slip unnamed; a
    closed one with words after it (``name=[exp] base``) is a text, as YAML's own plain scalars are."""
    try:
        return parse_yaml(raw)
    except AmbiguousNumber as e:
        raise ValueError(e.problem) from None
    except yaml.YAMLError as e:
        if raw.lstrip().startswith(("{", "[")) and getattr(e, "problem", None) != _WORDS_AFTER:
            why = getattr(e, "problem", None) or "not valid YAML"
            raise ValueError(f"not a YAML mapping or list ({why}): write {{key: value, ...}} or [a, b, ...], "
                             "closed") from None
        return raw


#: PyYAML's word for a document that goes on past its first node with a plain word: a closed flow
#: collection with text after it (``[exp] base``), where a slip leaves a bracket (``[1, 2] [3]``, ``{a: 1}}``).
_WORDS_AFTER = "expected '<document start>', but found '<scalar>'"


def _parse_yaml(text: str) -> Any:
    _check_depth(text)
    if _CParser is not None and not _LIBYAML_READS_OTHERWISE.search(text):
        try:
            return _load(_FastStrictLoader(text))
        except Exception:       # (a bad document, a lone surrogate): the pure-Python loader finds and words it
            pass
    return _load(_StrictLoader(text))


#: What LibYAML accepts and PyYAML refuses (a tab inside a plain scalar or before a key, ``?`` in a flow
#: collection): a text holding either is left to the pure-Python loader, so the fast one never accepts a
#: document that llmsim refused before (fuzzed against each other over mutated shipped files).
_LIBYAML_READS_OTHERWISE = re.compile(r"[\t?]")


def _load(loader: Any) -> Any:
    try:
        return loader.get_single_data()
    except RecursionError:
        # block-style nesting (indentation) deep enough to exhaust the stack
        raise ValueError(f"nested more than {MAX_DEPTH} levels deep") from None
    except ValueError as e:
        raise _past_any_number(e) from None
    finally:
        loader.dispose()


def _past_any_number(e: ValueError) -> ValueError:
    """Python's refusal of a whole number of more than 4,300 digits, in words that do not send a user to
    ``sys.set_int_max_str_digits``: no key takes such a number."""
    if "integer string conversion" in str(e):
        return ValueError("a whole number of more than 4,300 digits, past any llmsim takes")
    return e


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f"key {k!r} given twice; a later value would silently replace the first")
        out[k] = v
    return out


def parse_json(text: str, *, scan_depth: bool = True) -> Any:
    """Parse JSON; raises ``json.JSONDecodeError`` or ``ValueError``. ``scan_depth=False`` (each line of a
    JSON Lines trace) skips the bracket scan, which would double a trace's read time, and lets Python's
    recursion limit stop a line nested too deep instead."""
    if scan_depth:
        _check_depth(text)
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise ValueError("nested too deep") from None
    except ValueError as e:
        raise _past_any_number(e) from None
