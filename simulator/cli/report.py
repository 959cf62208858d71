"""``llmsim report DIR``: (re)draw report.html from the results in a folder."""
from __future__ import annotations

from pathlib import Path

import typer

from ..errors import LlmsimError
from ..report.run_folder import FOLDER_KINDS
from .app import app
from .output import console
from .rundir import os_error
from .examples import epilog


#: The files a results folder is known by (the ones its page is drawn from); naming one of them names its folder.
RESULT_FILES = tuple(name for _, names in FOLDER_KINDS for name in names)


@app.command("report", epilog=epilog("report"))
def report(folder: Path = typer.Argument(..., help="a folder llmsim run -o, run --ladder -o, plan or sweep wrote (or its results.json, ladder.json, plan.json or sweep table)")
           ) -> None:
    """Write DIR/report.html: the answer, per-pool tables and interactive charts in one self-contained page."""
    if folder.is_file() and folder.name in RESULT_FILES:
        folder = folder.parent      # the page is its folder's: results.json named for its run folder
    elif folder.is_file():
        raise LlmsimError(f"is a file, not a results folder; name the folder llmsim run -o, plan or sweep wrote "
                          f"(the one holding {', '.join(RESULT_FILES)})", source=folder)
    elif not folder.is_dir():
        raise LlmsimError("no such folder; name the folder llmsim run -o, plan or sweep wrote", source=folder)
    from ..report.page import write_report

    try:
        path = write_report(folder)
    except OSError as e:
        raise os_error(e, folder, "write report.html") from None
    console.print(f"wrote {path}", markup=False)
