"""Files and bundle directories written atomically: a reader (or the next run) sees the old or the new, never a mix.

* ``write_text(path, text)``: into a temporary file beside ``path``, flushed to disk, then
  ``os.replace`` (atomic on POSIX within one file system).
* ``write_dir(path, fill)``: ``fill(tmp)`` writes every file of a bundle into a temporary sibling
  directory ``.NAME.partial-PID-XXXX``; only when it returned is the bundle swapped in. On Linux the
  swap is one ``renameat2(RENAME_EXCHANGE)`` of the old and new directories (the old one is then
  deleted); elsewhere the old directory is renamed aside, the new one renamed in, and the old one
  deleted, so a process killed between the two renames leaves no bundle at ``path`` (the old one
  survives under its aside name) but never a mix. A failure (a full disk, a kill) leaves the previous
  bundle as it was; temporary siblings left by killed processes are removed by the next write.

A bundle directory is replaced as a whole, so ``bundle_dir_problem`` refuses a directory that holds
anything but bundle files before the work begins. Only the previous bundle's files as they were then
(``bundle_files``) are deleted at the swap: a file that appeared in the directory while the kernel ran
is kept (moved in beside the new bundle), or, if the new bundle takes its name, the save is refused.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
from collections.abc import Callable
from pathlib import Path

PARTIAL = ".partial-"
PROBE = ".probe-"  # bundle_dir_problem's test directory (not a bundle being written)
BUNDLE_FILES = ("launch.json", "timing.json", "arrays.npz", "runs.npz")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sibling(target: Path, make: Callable[[Path], object], kind: str = PARTIAL) -> Path:
    """A new temporary sibling of ``target`` (``.NAME.partial-PID-XXXXXXXX``), made by ``make``.

    Made with the usual modes (0o777 / 0o666 less the umask), not tempfile's private 0o700 / 0o600,
    so the bundle or file renamed into place has the permissions a plain write would have given it.
    """
    while True:
        tmp = target.parent / f".{target.name}{kind}{os.getpid()}-{secrets.token_hex(4)}"
        try:
            make(tmp)
            return tmp
        except FileExistsError:
            continue


def _mkdir(path: Path) -> None:
    os.mkdir(path, 0o777)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (a temporary file beside it, then os.replace)."""
    target = Path(path)
    _remove_stale(target.parent, target.name)
    fd = None

    def create(p: Path) -> None:
        nonlocal fd
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)

    tmp = _sibling(target, create)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | Path, text: str) -> None:
    write_bytes(path, text.encode())


def is_bundle_file(name: str) -> bool:
    return name in BUNDLE_FILES or name.endswith(".parquet") or name == ".visualizer-write-test"


def bundle_dir_problem(path: str | Path) -> str | None:
    """Why ``path`` cannot receive a bundle (None if it can): checked before any work is done.

    It must be new, an empty directory or a previous bundle (only bundle files), and its parent
    must take a new directory (the temporary sibling the bundle is written into).
    """
    target = Path(path).absolute()
    try:
        if target.exists() or target.is_symlink():
            if not target.is_dir():
                return f"{path} exists and is not a directory"
            if os.path.ismount(target):
                return f"{path} is a mount point, which cannot be swapped; give a directory inside it"
            foreign = sorted(p.name for p in target.iterdir() if not (p.is_file() and is_bundle_file(p.name)))
            if foreign:
                shown = ", ".join(foreign[:3]) + (", ..." if len(foreign) > 3 else "")
                return (
                    f"{path} holds files that are not part of a capture bundle ({shown}); a capture replaces "
                    "the whole directory, so give a new or empty directory or a previous bundle's"
                )
        parent = target.resolve().parent
        parent.mkdir(parents=True, exist_ok=True)
        os.rmdir(_sibling(parent / target.name, _mkdir, PROBE))
    except OSError as exc:
        return f"cannot write to {path}: {exc.strerror or exc}"
    return None


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths in one step (Linux renameat2); False where the system cannot."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (38, 22, 95):  # ENOSYS, EINVAL (file system without exchange), EOPNOTSUPP
        return False
    raise OSError(err, os.strerror(err), str(b))


def _remove_stale(parent: Path, name: str) -> None:
    """Temporary siblings of ``name`` left by processes that no longer run (killed mid-write)."""
    for kind in (PARTIAL, PROBE):
        _remove_stale_kind(parent, f".{name}{kind}")


def _remove_stale_kind(parent: Path, prefix: str) -> None:
    for entry in parent.glob(f"{prefix}*"):
        pid = entry.name[len(prefix) :].split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            os.kill(int(pid), 0)
            continue  # still running: maybe writing this very bundle
        except ProcessLookupError:
            pass
        except OSError:
            continue
        if entry.is_dir() and not entry.is_symlink():
            _remove_bundle_dir(entry)
        else:
            entry.unlink(missing_ok=True)


def _remove_bundle_dir(directory: Path) -> None:
    """A killed run's sibling: its bundle files are deleted, and it is removed only if that empties it.
    A process killed mid-swap may have left a file the user made there (on its way to the new
    bundle): then the directory stays, hidden, with it."""
    try:
        with os.scandir(directory) as entries:
            for entry in entries:
                if is_bundle_file(entry.name) and entry.is_file(follow_symlinks=False):
                    os.unlink(entry.path)
                elif entry.name == "old" and entry.is_dir(follow_symlinks=False):  # write_dir's aside
                    _remove_bundle_dir(Path(entry.path))
        os.rmdir(directory)
    except OSError:
        pass


def bundle_files(path: str | Path) -> dict[str, tuple[int, int, int, int]]:
    """The bundle files in ``path`` now, by name: (device, inode, size, mtime). Taken when the out
    directory is checked, before the kernel runs: the previous bundle a capture may replace is these
    files, unchanged; anything else found at the swap appeared during the run and is kept."""
    target = Path(path).absolute()
    out = {}
    try:
        with os.scandir(target.resolve()) as entries:
            for entry in entries:
                if is_bundle_file(entry.name) and entry.is_file(follow_symlinks=False):
                    out[entry.name] = _identity(entry.stat(follow_symlinks=False))
    except (FileNotFoundError, NotADirectoryError):
        pass
    return out


def _identity(st: os.stat_result) -> tuple[int, int, int, int]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)


class OutDirChanged(OSError):
    """A file with a name the new bundle takes appeared (or changed) in the out directory during the run."""


def _not_replaceable(directory: Path, replaceable: dict) -> list[str]:
    """Entries of ``directory`` that are not the previous bundle's files as they were checked."""
    out = []
    with os.scandir(directory) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False) and replaceable.get(entry.name) == _identity(
                entry.stat(follow_symlinks=False)
            ):
                continue
            out.append(entry.name)
    return out


def _retire(old: Path, new: Path, replaceable: dict) -> list[str]:
    """Delete the previous bundle's files from ``old`` (swapped out); move everything else (made
    during the run) into ``new`` beside the new bundle. Only files inspected here are deleted, and
    ``old`` is removed only once empty. Returns the names kept."""
    kept = []
    while True:
        for name in _not_replaceable(old, replaceable):
            dest = new / name
            if dest.exists() or dest.is_symlink():  # appeared in the instant of the swap: never overwrite
                dest = new / f"{name}.kept-{secrets.token_hex(4)}"
            os.rename(old / name, dest)
            kept.append(dest.name)
        for name in replaceable:
            try:
                st = os.lstat(old / name)
            except FileNotFoundError:
                continue
            if _identity(st) == replaceable[name] and not os.path.islink(old / name):
                os.unlink(old / name)
        try:
            os.rmdir(old)
            return kept
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            # something arrived meanwhile: look again


def write_dir(path: str | Path, fill: Callable[[Path], object], replaceable: dict | None = None):
    """Write a bundle directory atomically: ``fill(tmp_dir)`` writes its files; returns what fill returned.

    Every file ``fill`` leaves in the directory is flushed to disk before the swap. ``replaceable``:
    ``bundle_files(path)`` as it was before the work began (default: now); only those files, unchanged,
    are deleted with the previous bundle. Anything else there (a file the user made in the directory
    while the kernel ran) is kept, moved in beside the new bundle; one that has a name the new bundle
    takes makes the save fail (``OutDirChanged``) with nothing changed.
    """
    target = Path(path).absolute()
    if target.is_symlink():
        target = target.resolve()
    if replaceable is None:
        replaceable = bundle_files(target)
    parent = target.parent
    parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(parent, target.name)
    tmp = _sibling(target, _mkdir)
    swapped = False
    try:
        result = fill(tmp)
        for entry in tmp.iterdir():
            _fsync(entry)
        _fsync(tmp)
        if target.exists():
            ours = {e.name for e in tmp.iterdir()}
            clash = sorted(n for n in _not_replaceable(target, replaceable) if n in ours)
            if clash:
                raise OutDirChanged(
                    errno.EEXIST,
                    f"{', '.join(clash[:3])} appeared or changed in it while the kernel ran (left as it is)",
                )
        try:
            os.rename(tmp, target)  # a new directory (or an empty one made during the run)
            swapped = True
        except OSError as exc:
            if exc.errno not in (errno.ENOTEMPTY, errno.EEXIST):
                raise
            if _exchange(tmp, target):  # tmp now holds the previous directory
                swapped = True
                _retire(tmp, target, replaceable)
            else:
                aside = _sibling(target, _mkdir)
                os.rename(target, aside / "old")
                try:
                    os.rename(tmp, target)
                except BaseException:
                    os.rename(aside / "old", target)  # put the previous bundle back
                    raise
                swapped = True
                _retire(aside / "old", target, replaceable)
                os.rmdir(aside)
        _fsync(parent)
    except BaseException:
        if not swapped:
            shutil.rmtree(tmp, ignore_errors=True)  # only our own new files: the swap has not happened
        raise
    return result
