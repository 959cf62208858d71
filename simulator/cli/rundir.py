"""A run's result folder: results.json, run.json, scenario.yaml, the per-request table, timeline.csv,
report.html and plots.

The folder is made, and a hidden staging folder inside it, before the
simulation starts: an unwritable, read-only or misnamed ``-o`` fails in
a second, not after an hour of simulating, and staging inside the
destination keeps every final rename on one filesystem (a staging folder
beside a mount point would meet EXDEV at the end). Files are written into
the staging folder and moved into place at the end, ``results.json``
last, so a folder holding a results.json is complete. A folder that
already holds files is refused unless ``--overwrite``, which replaces its
contents whole: new results are never mixed with an earlier run's plots.
A plan's or a sweep's folder (:func:`output_dir`) is resumable instead: an
earlier plan's or sweep's points in it are reused; its files are added
beside whatever else the folder holds, never over a file it did not write.
No command writes into a folder holding another command's output (a run's
results.json, a ladder's ladder.json, a plan's plan.json, a sweep's table):
the two would share one report.html, and ``llmsim report`` could only draw
one of them.
Whatever stops the run (an error, Ctrl-C, SIGTERM: see ``app.main``), the
staging folder is removed, and so is the output folder if this run made it;
one left by a run killed outright (its process gone) is removed by the
next run into that folder.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterable, Iterator, Mapping, Optional, Sequence

from ..errors import LlmsimError, first_few, os_reason

if TYPE_CHECKING:
    from ..runner import RunOutput
    from ..scenario.schema import Scenario

__all__ = ["output_path", "output_folder", "os_error", "write_run_files", "refuse_overwriting_input_files",
           "same_file", "STAGING_PREFIX"]

#: Name prefix of the staging folder inside an output folder.
STAGING_PREFIX = ".llmsim-staging-"


def output_path(value: Optional[str]) -> Optional[Path]:
    """``-o`` as a path; an empty name is refused (it would mean the current folder)."""
    if value is None:
        return None
    if not value.strip():
        raise LlmsimError("-o needs a folder name (an empty name would write into the current folder)",
                          key_path="-o")
    return Path(value).expanduser()


def os_error(e: OSError, output: Path, doing: str) -> LlmsimError:
    return LlmsimError(f"cannot {doing} ({os_reason(e)})", source=f"-o {output}")


def _contents(folder: Path) -> list[Path]:
    """What the folder holds, leaving out staging folders of runs that were killed outright."""
    return sorted(p for p in folder.iterdir() if not p.name.startswith(STAGING_PREFIX))


def _names(paths: Sequence[Path]) -> str:
    return first_few([p.name for p in paths], 4)


def _an_input(what: str, p: object, instead: str) -> str:
    """The one wording of "this output would destroy an input", shared by a
    results folder's ``--overwrite`` and every output file flag."""
    return f"{what} {p}, an input of this run; name {instead} of its own"


def _resolved(p: str | Path) -> Optional[Path]:
    """``p`` with symlinks, ``..`` and the working folder resolved; None when
    the machine cannot say (a symlink loop, a name too long)."""
    try:
        return Path(p).expanduser().resolve()
    except (OSError, RuntimeError, ValueError):
        return None


def same_file(a: str | Path, b: str | Path) -> bool:
    """Whether two names reach one file: through symlinks and relative paths
    (resolved), or through a hard link or a case-insensitive filesystem (the
    same inode). A name that does not exist yet is only equal to itself."""
    ra, rb = _resolved(a), _resolved(b)
    if ra is not None and ra == rb:
        return True
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError):
        return False


def refuse_overwriting_input_files(outputs: Mapping[str, Optional[Path]], inputs: Iterable[str | Path], *,
                                   instead: str = "a file") -> None:
    """Refuse, before any work, an output file flag (``--csv``, ``--fit``:
    ``outputs`` maps each to its path, None when not given) naming a file the
    command reads, or the file another output flag names: the write would
    replace the user's input with this command's output, or one output with
    the other. The same check as ``-o --overwrite``'s, for single files;
    ``instead`` is what the user should name (a file, a results folder)."""
    given = [(flag, path) for flag, path in outputs.items() if path is not None]
    sources = list(dict.fromkeys(Path(p) for p in inputs))
    for i, (flag, path) in enumerate(given):
        for p in sources:
            if same_file(path, p):
                raise LlmsimError(_an_input("would overwrite", p, instead), source=path, key_path=flag)
        for other, there in given[:i]:
            if same_file(path, there):
                raise LlmsimError(f"names the same file as {other}; give each its own file", source=path,
                                  key_path=flag)


def _refuse_overwriting_inputs(output: Path, inputs: Sequence[Path], overwrite: bool = True) -> None:
    """A folder ``--overwrite`` may not empty: the current one, or one holding an input. Without
    ``--overwrite`` the same folder is refused as full, with no hint that ``--overwrite`` would be taken."""
    here = output.resolve()
    cwd = Path.cwd().resolve()
    lead = "--overwrite would delete" if overwrite else "the folder holds files, and replacing them would delete"
    if here == cwd or here in cwd.parents:
        raise LlmsimError(f"{lead} the current folder's contents; name a results folder of its own",
                          source=f"-o {output}")
    for p in inputs:
        if here in Path(p).resolve().parents:
            raise LlmsimError(_an_input(lead, p, "a results folder"), source=f"-o {output}")


@contextmanager
def output_folder(output: Optional[Path], *, overwrite: bool = False,
                  inputs: Sequence[Path] = ()) -> Iterator[Optional[Path]]:
    """Check ``output`` and yield an empty staging folder inside it (None
    without ``-o``); on success the staged files become the folder's
    contents. ``inputs`` (the scenario) may not lie inside a folder
    ``--overwrite`` would empty."""
    if output is None:
        yield None
        return
    try:
        made, top = _check_destination(output, overwrite, inputs)
    except OSError as e:     # a name too long, a path through a file
        raise os_error(e, output, "use the results folder") from None
    try:     # before simulating: an unwritable destination fails now, not after the run
        output.mkdir(parents=True, exist_ok=True)
        _remove_stale_stages(output)
        stage = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}{os.getpid()}-", dir=output))
    except OSError as e:
        if made:
            shutil.rmtree(top, ignore_errors=True)
        raise os_error(e, output, "write into the results folder") from None
    done = False
    try:
        yield stage
        try:
            _commit(stage, output, overwrite)
        except OSError as e:
            raise os_error(e, output, "write the results") from None
        done = True
    except OSError as e:      # writing into the stage: a full disk, a file removed under us
        if e.filename is not None and not _within(e.filename, output):
            raise                 # about another file (an input): not the results folder's fault
        raise os_error(e, output, "write the results") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        if made and not done:
            shutil.rmtree(top, ignore_errors=True)


def _remove_stale_stages(output: Path) -> None:
    """Staging folders that runs killed outright (SIGKILL, a power cut) left
    behind: their process is gone, so nothing will finish or remove them."""
    for p in output.glob(f"{STAGING_PREFIX}*"):
        pid = p.name[len(STAGING_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and _alive(int(pid)):
            continue          # another run writing into this folder right now
        shutil.rmtree(p, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _within(name: object, folder: Path) -> bool:
    try:
        return Path(os.fsdecode(name)).resolve().is_relative_to(folder.resolve())
    except (OSError, TypeError, ValueError):
        return True


def _check_destination(output: Path, overwrite: bool, inputs: Sequence[Path]) -> tuple[bool, Path]:
    """Whether this run makes the folder, and the outermost folder it makes."""
    if output.exists() and not output.is_dir():
        raise LlmsimError("exists and is not a folder; -o names the folder results are written to",
                          source=f"-o {output}")
    made = not output.exists()
    top = output   # the outermost folder this run creates, removed again if the run fails
    while made and not top.parent.exists() and top.parent != top:
        top = top.parent
    if not made:
        old = _contents(output)
        if old:
            _refuse_another_commands(output, "run")
            _refuse_overwriting_inputs(output, inputs, overwrite)
            _refuse_replacing_other_files(output, old, overwrite)
    return made, top


#: What marks a folder as an earlier run's or ladder's (``results.json`` is written last, ``ladder.json``
#: beside the steps' folders): the only folders ``--overwrite`` empties.
RUN_MARKERS = ("results.json", "ladder.json")
#: The files a run or a ladder writes beside them (the plots are PNGs; a ladder's steps are run folders).
RUN_FILES = frozenset({*RUN_MARKERS, "run.json", "scenario.yaml", "requests.parquet", "requests.csv",
                       "timeline.csv", "report.html", "ladder.csv"})


#: The kinds of output (:data:`~simulator.report.run_folder.FOLDER_KINDS`) each command writes: ``run --ladder``
#: is llmsim run's, whose ``--overwrite`` replaces a run's folder or a ladder's.
_WRITES = {"run": ("run", "ladder"), "plan": ("plan",), "sweep": ("sweep",)}


def _refuse_another_commands(output: Path, command: str) -> None:
    """Refuse a folder holding another command's output, ``--overwrite`` or not: replacing a plan's
    points and plan.json with a run's is not what a mistyped ``-o`` means, and writing beside them would
    leave one report.html for two commands' files."""
    from ..report.run_folder import folder_kinds, kinds_text

    other = {kind: name for kind, name in folder_kinds(output).items() if kind not in _WRITES[command]}
    if other:
        again = "" if command == "run" else f" (a new one, or an earlier {command}'s to resume that {command})"
        raise LlmsimError(f"the folder holds {kinds_text(other)}, which llmsim {command} does not write beside"
                          f"{' or replace' if command == 'run' else ''}: name another folder{again}",
                          source=f"-o {output}")


def _refuse_replacing_a_strangers_file(output: Path, command: str, writes: Sequence[str]) -> None:
    """Refuse a folder holding a file the plan or sweep writes (report.html, a plan's pareto.png) but
    none of its own output (its marker file, or the ``points`` store an interrupted one leaves): that
    file is someone else's, and ``run -o --overwrite`` never replaces a file a run did not write either.
    Other files are no reason: a plan or sweep adds its own files and removes nothing, so a folder's
    notes stay beside them."""
    from ..report.run_folder import FOLDER_KINDS

    own = dict(FOLDER_KINDS)[command]
    if any((output / name).is_file() for name in own) or (output / "points").is_dir():
        return
    taken = [output / name for name in writes if name not in own and os.path.lexists(output / name)]
    if taken:
        marks = " or ".join((*own, "points"))
        raise LlmsimError(f"the folder holds {_names(taken)} but no earlier {command} ({marks}), and llmsim {command} "
                          f"would replace {'it' if len(taken) == 1 else 'them'}: name another folder (a new one, or an "
                          f"earlier {command}'s to resume that {command})", source=f"-o {output}")


def _refuse_folders_in_the_way(output: Path, command: str, writes: Sequence[str]) -> None:
    """A folder under the name of a file the command writes would stop it at the end, after every run."""
    blocked = [output / name for name in writes if (output / name).is_dir()]
    if blocked:
        raise LlmsimError(f"{_names(blocked)} {'is a folder' if len(blocked) == 1 else 'are folders'} where llmsim "
                          f"{command} writes a file of that name: move {'it' if len(blocked) == 1 else 'them'} out, "
                          f"or name another folder", source=f"-o {output}")


def _refuse_replacing_other_files(output: Path, old: Sequence[Path], overwrite: bool) -> None:
    """``--overwrite`` replaces an earlier run's results, not whatever the
    folder holds: a mistyped ``-o`` naming a project folder would lose it,
    and so would a results folder someone kept notes in. Without it any
    file is refused, and the hint offers ``--overwrite`` only where it
    would be taken, never to be refused next."""
    if not any((output / m).is_file() for m in RUN_MARKERS):
        what = (f"--overwrite replaces a folder that holds an earlier run ({' or '.join(RUN_MARKERS)}); this one holds "
                f"other files ({_names(old)})" if overwrite else
                f"the folder already holds {len(old)} file(s) ({_names(old)}) and no earlier run "
                f"(a {' or '.join(RUN_MARKERS)} file)")
        raise LlmsimError(f"{what}: name another folder, or empty it first", source=f"-o {output}")
    foreign = [q.relative_to(output).as_posix() for p in old for q in _not_written_by_a_run(p)]
    if foreign:
        then = "" if overwrite else " and give --overwrite"
        raise LlmsimError(f"the folder holds an earlier run and {len(foreign)} file(s) llmsim did not write "
                          f"({first_few(foreign, 4)}): move them out{then}, or name another folder",
                          source=f"-o {output}")
    if not overwrite:
        raise LlmsimError(f"the folder already holds an earlier run ({len(old)} file(s): {_names(old)}); give "
                          f"--overwrite to replace it with this run's, or name another folder", source=f"-o {output}")


def _not_written_by_a_run(p: Path) -> list[Path]:
    """What under ``p`` no run wrote: ``p`` itself, or, in a ladder step's folder (a run folder of its own),
    the files in it that no run wrote, so that a refusal names a user's notes, not the step."""
    if p.is_symlink():
        return [p]
    if p.is_dir():
        if not (p / "results.json").is_file():
            return [p]
        return [q for child in sorted(p.iterdir()) for q in _not_written_by_a_run(child)]
    return [] if p.name in RUN_FILES or p.suffix == ".png" else [p]


def _commit(stage: Path, output: Path, overwrite: bool) -> None:
    if overwrite:
        for old in output.iterdir():
            if old == stage:
                continue
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
    for f in sorted(stage.iterdir(), key=lambda f: f.name == "results.json"):
        os.replace(f, output / f.name)


def write_run_files(folder: Path, out: RunOutput, *, plots: bool) -> None:
    """The run's files, written straight into ``folder`` (a staging folder)."""
    from ..metrics.results import write_results
    from ..metrics.table import write_requests

    # The fleet runner exposes a timeline; an older RunOutput has none.
    timeline = getattr(out, "timeline", None)
    folder.mkdir(parents=True, exist_ok=True)
    write_results(out.results, folder / "results.json")
    if out.timing:
        write_results(out.timing, folder / "run.json")
    write_requests(out.requests, folder / "requests")
    if timeline is not None:
        timeline.to_csv(folder / "timeline.csv", index=False)
    write_scenario(out.scenario, folder / "scenario.yaml")
    if plots:
        from ..report.page import write_report    # the page and matplotlib only when drawing
        from ..report.plots import write_run_plots

        from ..report.intervals import write_intervals_plot

        write_run_plots(folder, out.results, out.requests, timeline)
        write_intervals_plot(folder, out.results)
        write_report(folder)


def write_scenario(sc: Scenario, path: Path) -> None:
    """The scenario as run (variants and --set applied), in the file's own
    terms: what was set, and each pool's engine settings as its backend
    profile gave them (they are set on the pool as it loads: the release's
    settings stay pinned should the profile change), without llmsim's other
    defaults. It loads back to the same scenario (paths inside it are
    relative to the original file's folder)."""
    import yaml

    text = yaml.safe_dump(sc.model_dump(mode="json", exclude_unset=True), sort_keys=False, allow_unicode=True)
    path.write_text(f"# the scenario as run: {sc.name}\n" + text)


def output_dir(given: Optional[str], default: str, writes: Sequence[str] = (),
               inputs: Sequence[str | Path] = (), *, command: str) -> Path:
    """The results folder of a sweep or plan (``command``), checked before any
    run but not made until the first point lands (resumable: an earlier
    plan's or sweep's points in it are reused). None of the files it ``writes``
    there may be one of the ``inputs`` (a plan.json scenario in that folder)."""
    out = output_path(given) or Path(default)
    for name in writes:
        refuse_overwriting_input_files({"-o": out / name}, inputs, instead="a results folder")
    try:
        if out.exists() and not out.is_dir():
            raise LlmsimError("exists and is not a folder; -o names the folder results are written to",
                              source=f"-o {out}")
        if out.is_dir():
            _refuse_another_commands(out, command)
            _refuse_folders_in_the_way(out, command, writes)
            _refuse_replacing_a_strangers_file(out, command, writes)
        there = out
        while not there.exists() and there.parent != there:
            there = there.parent
        if not there.is_dir():
            raise OSError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
        if os.statvfs(there).f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        if not os.access(there, os.W_OK | os.X_OK):
            raise OSError(errno.EACCES, os.strerror(errno.EACCES))
    except OSError as e:
        raise os_error(e, out, "write into the results folder") from None
    return out
