"""The data directory and its files are the service user's alone (issue 36).

SQLite stores, approved mail, logs, traces and the generated admin token were created world-readable
(0644 files in a 0755 directory).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path: Path) -> Path:
    """``path`` as a directory, each part of it this call creates made 0700.

    (``mkdir(parents=True)`` gives the parents the umask's mode.) A directory that already exists keeps
    its mode: it may be a shared one (``/tmp``) the deployment chose to put a store in.
    """
    missing, parent = [], path
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    for directory in reversed(missing):
        directory.mkdir(mode=DIR_MODE, exist_ok=True)
        os.chmod(directory, DIR_MODE)  # mkdir's mode is masked by the umask
    return path


def private_file(path: Path) -> None:
    """Create ``path`` empty and 0600 if it is missing; take group and other access away if it exists.

    An existing file was created before this rule. SQLite gives its -wal and -shm files the database
    file's mode.
    """
    try:
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))
    except FileExistsError:
        if path.stat().st_mode & 0o077:
            os.chmod(path, FILE_MODE)


def generated_secret(path: Path, generate: Callable[[], str]) -> str:
    """The secret kept in ``path``, written there (0600, in a 0700 directory) by ``generate`` when absent.

    Created exclusively: of two processes generating at once, the first file stands and both read it.
    """
    if not path.exists():
        private_dir(path.parent)
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            pass
        else:
            with os.fdopen(fd, "w") as out:
                out.write(generate() + "\n")
    return path.read_text().strip()
