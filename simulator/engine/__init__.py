"""engine."""
from __future__ import annotations


def compiled() -> bool:
    """Whether the engine runs as mypyc-compiled C (a regular ``pip install .``,
    see setup.py) rather than plain Python (a checkout, an editable install,
    ``LLMSIM_COMPILE=0``): the results are the same, the speed is not."""
    from . import replica

    return not replica.__file__.endswith(".py")
