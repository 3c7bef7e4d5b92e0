"""The disk cap of an episode: the bytes and inodes its repository may take, in total.

Where the kernel can enforce it (root: mounting is allowed), a repository directory is the
mount point of a file system of its own (``make_volume``): ext4 in a sparse image file beside it
(``.<name>.img``), ``disk_mb`` large with ``inodes`` inodes, loop-mounted ``nosuid,nodev``. A
write past either fails with ENOSPC inside the sandbox, the host's file system holds only what
was written, and a command that fills it gets a note on its result. Chosen by measurement on
this project's machine (see the README): a size-limited tmpfs mounts in ~5 ms but holds its
contents in unswappable memory, so an episode could pin ``disk_mb`` of RAM; an ext4 image is
disk. Each image is a sparse copy of an empty one made once per process with mke2fs (~2 ms
against 10-40 ms for mkfs), attached to a loop device and mounted with system calls (5-10 ms
against 24-120 ms for mount(8) on the loaded machine). No journal (a volume is thrown away with
its episode); inode tables are left uninitialised by mkfs and by the kernel
(``noinit_itable``), so a new image takes ~2 MiB of the host's disk. The loop device detaches
itself when unmounted.

Each volume is recorded in ``/run/stepwise-swe-bench-volumes`` (root only) with its image and
its maker (pid and start time); the maker releases what is left of its own at exit, and one
whose maker is gone (a crashed run) is unmounted and deleted by the next process that makes a
volume.

Elsewhere (an ordinary user) ``TreeWatch`` measures the repository while each command runs
(every ``WATCH_INTERVAL_S``, and once after) and kills a command that took the tree past a cap;
a command may still delete files of a tree that is over it. Its bound is what a command writes
between two measurements: the interval (50 ms, or five times the last walk for a big tree) plus
the walk, at the rate it writes (page cache takes ~1-3 GB/s here, so a 1 GiB ``dd`` is stopped
within a few hundred MiB past the cap; see the tests for what was measured), with files of at
most ``file_size_mb`` each (RLIMIT_FSIZE). Deleted files that a process still holds open are
counted too (they take space until closed).

Setuid and setgid bits: a volume is mounted ``nosuid`` (and bubblewrap binds are ``nosuid``),
so a bit set there takes effect nowhere and is left. A tree without a volume is a directory of
the host's own file system, where another user could run such a file as the repository's owner:
the walk after each command (``TreeWatch``) clears every setuid/setgid bit it finds, by file
descriptor (never following a link the command may have put in the path).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import errno
import fcntl
import functools
import json
import logging
import os
import shutil
import stat
import struct
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from .process import Breach
from .proctree import descendants, open_deleted_files, start_time
from .rundir import root_only_dir

__all__ = ["TreeWatch", "VolumeGuard", "make_volume", "release", "tree_usage"]

MIB = 1024 * 1024
WATCH_INTERVAL_S = 0.05
"""How often ``TreeWatch`` measures a running command's tree: this often, or five times as
long as the last walk took (a big tree), whichever is longer."""
_FULL_BYTES = MIB
"""A volume with less free space than this counts as full."""
_MKFS = "/usr/sbin/mke2fs"
"""e2fsprogs, by absolute path."""
_MKFS_OPTIONS = [
    "-q", "-F", "-t", "ext4", "-m", "0", "-O", "^has_journal",
    "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard",
]  # fmt: skip
_MS_NOSUID, _MS_NODEV, _MS_NOATIME, _MNT_DETACH = 0x2, 0x4, 0x400, 0x2
_LOOP_CTL_GET_FREE, _LOOP_CONFIGURE, _LO_FLAGS_AUTOCLEAR = 0x4C82, 0x4C0A, 0x4
_log = logging.getLogger(__name__)


def _cap_words(disk_mb: int, inodes: int) -> str:
    return f"the episode's disk cap of {disk_mb} MiB and {inodes} files"


@functools.cache
def _registry() -> Path:
    return root_only_dir("stepwise-swe-bench-volumes")


def _image(path: Path) -> Path:
    return path.parent / f".{path.name}.img"


def make_volume(path: Path, disk_mb: int, inodes: int) -> bool:
    """Make the empty directory ``path`` (created if missing) the mount point of its own
    volume. False where volumes cannot be made here (not root, no mke2fs, no loop devices):
    then the commands' ``TreeWatch`` enforces the caps."""
    path = Path(path).absolute()
    if os.geteuid() != 0 or not os.access(_MKFS, os.X_OK) or not os.path.exists("/dev/loop-control"):
        return False
    _sweep()
    path.mkdir(exist_ok=True)
    if os.path.ismount(path):
        raise RuntimeError(f"{path} is a mount point already")
    image = _image(path)
    image.unlink(missing_ok=True)  # a crashed run's, over a directory it no longer mounts
    record = _registry() / uuid.uuid4().hex
    pid = os.getpid()
    try:
        _copy_sparse(_template(disk_mb, inodes), image)
        # Recorded once its image exists (a sweep takes a record without one for stale), and
        # before the mount, so a crash leaves no mount unrecorded.
        record.write_text(json.dumps({"mount": str(path), "image": str(image), "pid": pid, "start": start_time(pid)}))
        _mount(image, path)
    except OSError as error:
        image.unlink(missing_ok=True)
        record.unlink(missing_ok=True)
        _log.warning("no volume for %s (%s): the disk cap is enforced by a watcher", path, error)
        return False
    return True


_TEMPLATES_LOCK = threading.Lock()


@functools.cache
def _templates() -> Path:
    root = Path(tempfile.mkdtemp(prefix="stepwise-swe-bench-volumes-"))
    atexit.register(shutil.rmtree, root, True)
    return root


def _template(disk_mb: int, inodes: int) -> Path:
    """An empty volume image of this size (no ``lost+found``: the model's /testbed holds only
    the repository), made once per process: copying its few allocated MiB is faster than mkfs."""
    with _TEMPLATES_LOCK:
        return _make_template(disk_mb, inodes)


@functools.cache
def _make_template(disk_mb: int, inodes: int) -> Path:
    image = _templates() / f"{disk_mb}-{inodes}.img"
    with open(image, "wb") as file:
        file.truncate(disk_mb * MIB)
    done = subprocess.run(
        [_MKFS, *_MKFS_OPTIONS, "-N", str(inodes), str(image)], capture_output=True, text=True, env={}
    )
    if done.returncode != 0:
        raise OSError(errno.EIO, f"mke2fs failed: {done.stderr.strip()[-300:]}")
    mount = Path(tempfile.mkdtemp(dir=_templates()))
    _mount(image, mount)
    try:
        (mount / "lost+found").rmdir()
    finally:
        _umount(mount)
        mount.rmdir()
    return image


def _copy_sparse(source: Path, dest: Path) -> None:
    """Copy a sparse file's data extents only."""
    with open(source, "rb") as src, open(dest, "xb") as out:
        out.truncate(os.fstat(src.fileno()).st_size)
        offset = 0
        while True:
            try:
                offset = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError as error:  # ENXIO: no data past offset
                if error.errno == errno.ENXIO:
                    return
                raise
            end = os.lseek(src.fileno(), offset, os.SEEK_HOLE)
            while offset < end:
                copied = os.copy_file_range(src.fileno(), out.fileno(), end - offset, offset, offset)
                if copied == 0:
                    raise OSError(errno.EIO, f"short copy of {source}")
                offset += copied


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _mount(image: Path, path: Path) -> None:
    """Attach ``image`` to a free loop device (detached again when unmounted) and mount it at
    ``path`` (nosuid, nodev). System calls, not mount(8): a fifth of the time."""
    control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    try:
        while True:  # another process may take the free device first
            number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
            device = f"/dev/loop{number}"
            loop = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            try:
                backing = os.open(image, os.O_RDWR | os.O_CLOEXEC)
                try:
                    name = os.fsencode(image)[:63]
                    info = struct.pack(
                        "=5Q4I64s64s32s2Q", 0, 0, 0, 0, 0, 0, 0, 0, _LO_FLAGS_AUTOCLEAR, name, b"", b"", 0, 0
                    )
                    fcntl.ioctl(loop, _LOOP_CONFIGURE, struct.pack("=II", backing, 0) + info + bytes(64))
                except OSError as error:
                    if error.errno == errno.EBUSY:
                        continue
                    raise
                finally:
                    os.close(backing)
                flags = _MS_NOSUID | _MS_NODEV | _MS_NOATIME
                if _libc().mount(device.encode(), os.fsencode(path), b"ext4", flags, b"noinit_itable") != 0:
                    code = ctypes.get_errno()
                    raise OSError(code, f"mount {device} on {path}: {os.strerror(code)}")
                return
            finally:
                os.close(loop)  # the mount holds the device; autoclear frees it at unmount
    finally:
        os.close(control)


def _umount(path: Path) -> None:
    """Unmount ``path``; lazily if it is still busy (it goes when the last process holding it
    does)."""
    if _libc().umount2(os.fsencode(path), 0) != 0 and _libc().umount2(os.fsencode(path), _MNT_DETACH) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"umount {path}: {os.strerror(error)}")


def release(path: Path) -> None:
    """Unmount ``path``'s volume and delete its image, if it has one (its tree is being
    removed: the mount point is left, empty, on the parent file system)."""
    if os.geteuid() != 0:
        return
    path = Path(path).absolute()
    for record in _records():
        if record[1].get("mount") == str(path):
            _drop(*record)


def _records() -> list[tuple[Path, dict]]:
    found = []
    with contextlib.suppress(FileNotFoundError):
        for entry in _registry().iterdir():
            with contextlib.suppress(OSError, ValueError):
                found.append((entry, json.loads(entry.read_text())))
    return found


def _drop(record: Path, volume: dict) -> None:
    mount = Path(volume["mount"])
    if os.path.ismount(mount):
        _umount(mount)
    Path(volume["image"]).unlink(missing_ok=True)
    record.unlink(missing_ok=True)


@atexit.register
def _release_own() -> None:
    """At exit, the volumes this process made and never released (its episodes' trees were
    not removed)."""
    if os.geteuid() == 0 and os.path.isdir("/run/stepwise-swe-bench-volumes"):
        for record, volume in _records():
            if volume.get("pid") == os.getpid():
                with contextlib.suppress(OSError):
                    _drop(record, volume)


def _sweep() -> None:
    """Remove the volumes of makers that are gone (crashed runs), and those whose image is
    gone (the runtime's directory was deleted under them)."""
    for record, volume in _records():
        gone = start_time(int(volume.get("pid", 0))) != volume.get("start")
        if gone or not Path(volume["image"]).exists():
            with contextlib.suppress(OSError):
                _drop(record, volume)


class VolumeGuard:
    """A command on a volume: the kernel enforces the caps; after it ends, a full volume is
    noted on its result."""

    blocking = False
    interval_s: float | None = None
    room: int | None = None
    """No file-size bound of its own: the volume's size is the bound."""

    def __init__(self, path: Path, disk_mb: int, inodes: int) -> None:
        self.path, self.disk_mb, self.inodes = path, disk_mb, inodes

    def start(self, pid: int) -> None:
        pass

    def breach(self, running: bool) -> Breach | None:
        if running:
            return None
        free = os.statvfs(self.path)
        if free.f_bavail * free.f_frsize < _FULL_BYTES or free.f_favail == 0:
            return Breach("exit", f"{_cap_words(self.disk_mb, self.inodes)} is reached: remove files to write more")
        return None


_SETID = stat.S_ISUID | stat.S_ISGID


def tree_usage(
    path: Path, pids: Sequence[int] = (), setid: list[tuple[str, os.stat_result]] | None = None
) -> tuple[int, int]:
    """Allocated bytes and inodes of the tree at ``path`` (each inode once, however many hard
    links it has; symlinks not followed; other file systems not entered), plus deleted files
    that ``pids`` hold open on it. Directories its owner made unreadable are given back their
    owner's permissions first (as before every command). ``setid`` collects the entries with a
    setuid or setgid bit."""
    device = os.lstat(path).st_dev
    seen: dict[int, int] = {}
    stack = [os.fspath(path)]
    while stack:
        directory = stack.pop()
        try:
            entries = list(os.scandir(directory))
        except PermissionError:
            with contextlib.suppress(OSError):
                os.chmod(directory, stat.S_IMODE(os.lstat(directory).st_mode) | stat.S_IRWXU)
            try:
                entries = list(os.scandir(directory))
            except OSError:
                continue
        except OSError:  # removed meanwhile
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            seen[info.st_ino] = info.st_blocks * 512
            if setid is not None and info.st_mode & _SETID and not stat.S_ISLNK(info.st_mode):
                setid.append((entry.path, info))
            if stat.S_ISDIR(info.st_mode) and info.st_dev == device:
                stack.append(entry.path)
    for info in open_deleted_files(pids, device):
        seen[info.st_ino] = info.st_blocks * 512
    root = os.lstat(path)
    seen[root.st_ino] = root.st_blocks * 512
    return sum(seen.values()), len(seen)


def clear_setid(found: Sequence[tuple[str, os.stat_result]]) -> None:
    """Clear the setuid/setgid bits of what ``tree_usage`` found, through an ``O_PATH`` descriptor
    of the very inode it saw (same device and inode number, else left: the path changed)."""
    for path, seen in found:
        try:
            fd = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            continue
        try:
            now = os.fstat(fd)
            if (now.st_dev, now.st_ino) == (seen.st_dev, seen.st_ino) and now.st_mode & _SETID:
                os.chmod(f"/proc/self/fd/{fd}", stat.S_IMODE(now.st_mode) & ~_SETID)
        except OSError:
            pass
        finally:
            os.close(fd)


class TreeWatch:
    """No volume: the tree's bytes and inodes, measured while a command runs."""

    blocking = True
    interval_s: float | None = WATCH_INTERVAL_S

    def __init__(self, path: Path, disk_mb: int, inodes: int) -> None:
        """Measures the tree as it is before the command: construct it off the event loop."""
        self.path, self.disk_mb, self.inodes = path, disk_mb, inodes
        self.before = tree_usage(path)
        """Bytes and inodes when the command started."""
        self.room: int | None = max(0, disk_mb * MIB - self.before[0])
        """What is left under the byte cap: the command's file-size limit (RLIMIT_FSIZE), so the
        kernel stops any one file at the cap however fast it is written."""
        self.root: int | None = None
        self.peak = self.before

    def start(self, pid: int) -> None:
        self.root = pid

    def breach(self, running: bool) -> Breach | None:
        started = time.monotonic()
        pids = descendants(self.root) if running and self.root is not None else []
        setid: list[tuple[str, os.stat_result]] = []
        used = tree_usage(self.path, pids, setid if not running else None)
        clear_setid(setid)
        self.interval_s = max(WATCH_INTERVAL_S, 5 * (time.monotonic() - started))
        self.peak = (max(self.peak[0], used[0]), max(self.peak[1], used[1]))
        over = (used[0] > self.disk_mb * MIB and used[0] > self.before[0]) or (
            used[1] > self.inodes and used[1] > self.before[1]
        )
        words = _cap_words(self.disk_mb, self.inodes)
        if over and running:
            return Breach("disk_limit", words)
        if over:
            past = f"the repository went past {words} ({used[0] // MIB} MiB, {used[1]} files)"
            return Breach("exit", f"{past}: remove files")
        if not running and (self._full(self.before) or self._full(used)):
            # As on a full volume; full at the start, the command could write no file at all.
            return Breach("exit", f"{words} is reached: remove files to write more")
        return None

    def _full(self, used: tuple[int, int]) -> bool:
        return self.disk_mb * MIB - used[0] < _FULL_BYTES or used[1] >= self.inodes
