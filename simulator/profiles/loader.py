"""Finding and reading profile and scenario files.

Built-in profiles live in the repository's ``hardware_profiles/`` and
``model_profiles/`` folders and are shipped as ``simulator.data.*`` package
data, so they resolve the same from a checkout, an editable install and a
wheel installed anywhere. A name no built-in has may be an installed
package's profile (``llmsim.gpus``, ``llmsim.models``, ``llmsim.stacks``
entry points: :mod:`simulator.plugins`).
"""
from __future__ import annotations

import json
import time
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence, TypeVar

import yaml
from pydantic import BaseModel

from ..errors import LlmsimError, did_you_mean, near_names, nearest, os_reason, shortened
from ..reads import MAX_TEXT_BYTES, input_file, note_read
from ..plugins import profile_files
from ..structured import parse_json, parse_yaml

_REPO_ROOT = Path(__file__).resolve().parents[2]
_PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"


def builtin_dir(kind: str) -> Path:
    """Directory of built-in ``hardware_profiles``, ``model_profiles`` or ``scenarios``.

    A checkout (or editable install) reads the repository folders; a wheel
    reads the copies shipped as ``simulator/data/<kind>``.
    """
    checkout = _REPO_ROOT / kind
    if _yaml_stems(checkout):
        return checkout
    return _PACKAGE_DATA / kind


def _yaml_stems(folder: Path) -> tuple[str, ...]:
    """The names of ``folder``'s YAML files, sorted (none if it is missing).
    A run asks for the built-in names tens of thousands of times (every
    backend a pool names, every profile it resolves), so the listing is
    kept while the folder's modification time stays the same: adding,
    removing or renaming a profile changes it. A folder changed in the last
    two seconds is listed afresh (file systems stamp times in ticks of up to
    a few milliseconds, so two changes in one tick would share a time)."""
    try:
        mtime = folder.stat().st_mtime_ns
    except OSError:
        return ()
    if time.time_ns() - mtime < 2_000_000_000:
        return _listing.__wrapped__(folder, mtime)
    return _listing(folder, mtime)


@lru_cache(maxsize=64)
def _listing(folder: Path, mtime_ns: int) -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in folder.glob("*.yaml")))


def read_structured(path: Path, what: str = "YAML or JSON file") -> Any:
    """Read YAML or JSON (by the suffix: ``.json`` is JSON), turning every
    read/parse problem into an LlmsimError; the file's kind and size are
    checked before it is read (``reads.input_file``)."""
    input_file(path, MAX_TEXT_BYTES, what)
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        raise LlmsimError("file not found", source=path) from None
    except OSError as e:
        raise LlmsimError(f"cannot read file ({e.strerror})", source=path) from None
    except UnicodeDecodeError as e:
        raise LlmsimError(f"not a UTF-8 text file (byte {e.start}); expected YAML or JSON", source=path) from None
    path = Path(path)
    try:
        if path.suffix.lower() == ".json":
            return parse_json(text)
        return parse_yaml(text)
    except json.JSONDecodeError as e:
        raise LlmsimError(f"invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}", source=path) from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(e, "problem", None) or str(e)
        raise LlmsimError(f"invalid YAML{where}: {problem}", source=path) from None
    except ValueError as e:
        raise LlmsimError(f"invalid {'JSON' if path.suffix == '.json' else 'YAML'}: {e}", source=path) from None


def resolve(kind: str, name_or_path: str) -> Path:
    """A built-in name (``h100-sxm``) or a path to the user's own file
    (noted as an input of the run, even where a cache then skips reading it)."""
    try:
        path = _resolve(kind, name_or_path)
    except OSError as e:      # a name too long for the filesystem, a path through a file
        raise LlmsimError(f"cannot be read as a file ({os_reason(e)})", source=name_or_path) from None
    note_read(path)
    return path


def _resolve(kind: str, name_or_path: str) -> Path:
    p = Path(name_or_path).expanduser()
    noun = {"hardware_profiles": "GPU", "model_profiles": "model", "scenarios": "scenario",
            "backend_profiles": "serving backend"}[kind]
    if p.is_dir():
        # A model checkpoint folder as downloaded holds its config.json. Any
        # other folder is not a profile, unless it merely shares a built-in's
        # name (a folder "chatbot" beside `llmsim run chatbot`).
        if kind == "model_profiles" and (p / "config.json").is_file():
            return p / "config.json"
        if not (builtin_dir(kind) / f"{name_or_path.lower()}.yaml").exists():
            inside = " (a model folder needs its config.json)" if kind == "model_profiles" else ""
            raise LlmsimError(f"is a folder, not a {noun} file (YAML or JSON){inside}", source=p)
    elif p.suffix in (".yaml", ".yml", ".json") or p.exists():
        if not p.exists():
            # `llmsim run scenarios/chatbot.yaml` outside a checkout, or a
            # bare `chatbot.yaml` (a sweep file's base), still means the
            # shipped file of that name.
            shipped = builtin_dir(kind) / p.name
            if (p.parent.name == kind or p.parent == Path(".")) and shipped.exists():
                return shipped
            raise LlmsimError(f"file not found{_near_file(p, kind)}{_read_from(p)}", source=p)
        return p
    named = named_profile(kind, name_or_path)
    if named is not None:
        return named
    for other, (_, what, where) in _MARKS.items():
        if other != kind and other != "scenarios" and named_profile(other, name_or_path) is not None:
            raise LlmsimError(f"{name_or_path!r} is {what}, not {_MARKS[kind][1]}: {where}")
    names = list_profiles(kind)
    raise LlmsimError(f"unknown {noun} {shortened(repr(name_or_path))}{nearest(name_or_path.lower(), names)}; "
                      f"valid names: {', '.join(names)} (or a path to a YAML/JSON file)")


def _read_from(p: Path) -> str:
    """Where a relative path was looked for. A scenario's trace is read from the scenario's folder, its
    pools' GPU, model and backend files from where the command runs: a file kept beside the scenario
    and run from elsewhere is not found, and the refusal must say where it looked."""
    return "" if p.is_absolute() else f" (read from the current directory, {Path.cwd()})"


def _near_file(p: Path, kind: str) -> str:
    """`` (did you mean scenarios/chatbot.yaml?)`` for a file name one slip from a file beside it, or from a
    shipped one where the path would have reached it (``scenarios/chatbt.yaml``); "" when none is near."""
    shipped = [f"{n}.yaml" for n in list_builtin(kind)] if p.parent.name == kind or p.parent == Path(".") else []
    return did_you_mean([str(p.parent / n) for n in near_files(p, (".yaml", ".yml", ".json"), shipped)])


def near_files(p: Path, suffixes: tuple[str, ...] | None = None, more: Sequence[str] = ()) -> list[str]:
    """The names of the files in ``p``'s folder (of ``suffixes``, if given) and of ``more`` nearest ``p``'s
    name, compared by stem (a shared suffix is no likeness): what a misspelt path most likely meant."""
    names = list(more)
    try:
        if p.parent.is_dir():
            names += [f.name for f in p.parent.iterdir()
                      if (suffixes is None or f.suffix in suffixes) and f.is_file()]
    except OSError:
        pass
    by_stem = {Path(n).stem: n for n in sorted(set(names))}
    return [by_stem[n] for n in near_names(Path(p).stem, sorted(by_stem))]


def named_profile(kind: str, name: str) -> Path | None:
    """The file of a built-in profile named ``name``, else an installed plug-in's, else None: what a name
    (never a path: ``../model_profiles/llama-3-8b`` as a GPU would reach another kind's file) resolves to."""
    if Path(name).name != name or name in (".", ".."):
        return None
    shipped = builtin_dir(kind) / f"{name.lower()}.yaml"
    if shipped.exists():
        return shipped
    return profile_files(kind).get(name.lower())


def list_builtin(kind: str) -> list[str]:
    return list(_yaml_stems(builtin_dir(kind)))


def list_profiles(kind: str) -> list[str]:
    """Every name a scenario may use: the built-ins and the installed plug-ins' (:mod:`simulator.plugins`)."""
    return sorted(set(list_builtin(kind)) | set(profile_files(kind)))


P = TypeVar("P", bound=BaseModel)


def load_profile(kind: str, name_or_path: str, cls: type[P], noun: str) -> P:
    """A built-in profile or the user's file, validated as ``cls``; every
    problem is one LlmsimError naming the file and the key.

    Profiles are frozen models, so one run's many readers of a GPU (the
    fleet, the backend's defaults, the error model's regime) share one
    parse, kept while the file's modification time and size stay the same."""
    path = resolve(kind, name_or_path)
    try:
        st = path.stat()
    except OSError:       # read_structured says why, in one line
        return _parse_profile(path, cls, noun, kind)
    return _parsed_profile(path, st.st_mtime_ns, st.st_size, cls, noun, kind)


@lru_cache(maxsize=256)
def _parsed_profile(path: Path, _mtime_ns: int, _size: int, cls: type[P], noun: str, kind: str) -> P:
    return _parse_profile(path, cls, noun, kind)


#: Keys that mark a file as one kind's (at least two present; a scenario's both), what that kind is called
#: and where it goes: a GPU file given as a model was refused key by key, a dozen "unknown key" lines.
_MARKS: dict[str, tuple[frozenset[str], str, str]] = {
    "hardware_profiles": (frozenset({"hbm_gib", "hbm_bandwidth_tb_s", "peak_tflops", "interconnect"}),
                          "a GPU profile", "a pool's gpu or --gpu takes it"),
    "model_profiles": (frozenset({"num_hidden_layers", "num_attention_heads", "hidden_size", "vocab_size"}),
                       "a model profile", "a pool's model or --model takes it"),
    "backend_profiles": (frozenset({"stack", "default_release", "newest_release", "engine"}),
                         "a serving backend profile", "a pool's engine.backend or --backend takes it"),
    "scenarios": (frozenset({"workload", "pools"}), "a scenario", "`llmsim run` runs it"),
}


def refuse_other_kind(kind: str, data: dict, path: Path) -> None:
    """Refuse ``data`` read as ``kind`` (a key of :data:`_MARKS`) where it is plainly another kind's file
    and none of its own: one line saying what the file is and where it goes."""
    own = _MARKS[kind][0]
    if own & set(data):
        return
    for other, (marks, what, where) in _MARKS.items():
        if other != kind and len(marks & set(data)) >= 2:
            raise LlmsimError(f"is {what}, not {_MARKS[kind][1]}: {where}", source=path)


def _parse_profile(path: Path, cls: type[P], noun: str, kind: str) -> P:
    from ..scenario.strict import validate_strict

    data = read_structured(path)
    if not isinstance(data, dict):
        raise LlmsimError(f"expected a mapping of {noun} keys", source=path)
    if kind in _MARKS:
        refuse_other_kind(kind, data, path)
    data.setdefault("name", path.stem)
    return validate_strict(cls, data, path)
