"""No kernel keyring shared with a sandboxed command: a system-call filter and a fresh session
keyring.

Kernel keyrings are state the namespaces do not separate: a key added by one process can be found
by another uid (user keyrings, possessor permissions, ``request_key``), and a child inherits its
parent's session keyring, so without a filter code run during grading could stash the hidden
tests in a key that a later rollout, or a later eval, reads. Two layers:

- ``filter_program``: a seccomp BPF program, made by libseccomp (through ``pyseccomp``, a ctypes
  binding of the system's ``libseccomp.so.2``), that makes ``add_key``, ``request_key`` and
  ``keyctl`` fail with EPERM, as container runtimes' default profiles do, for the native ABI and
  its compatibility ABIs (i386 and x32 on x86_64, arm on aarch64: ``int 0x80`` is no way around
  it). Everything else is allowed. bubblewrap installs it (``--seccomp FD``) right before it execs
  the command, after ``no_new_privs``, so every process of the command inherits it and none can
  remove it. The same filter keeps the disk cap's file-size limit (RLIMIT_FSIZE, ``volume``)
  the only fast way to allocate: ``fallocate`` fails with EOPNOTSUPP, as on a file system
  without it (glibc's ``posix_fallocate`` then writes a byte per block): it allocates ~1 TB/s
  here, so a watcher's 50 ms between samples would be the host's whole disk, and its
  ``KEEP_SIZE`` and ``INSERT_RANGE`` modes are not checked against RLIMIT_FSIZE at all.
  ``io_uring_setup`` fails with ENOSYS (no ring: its operations bypass seccomp).
- ``fresh_session_keyring``: the thread that starts a sandbox joins a new, empty, anonymous
  session keyring first (``KEYCTL_JOIN_SESSION_KEYRING``; the kernel keeps it per thread), so the
  command inherits a keyring that holds nothing and that no other command and not the host
  process that runs ``vf-eval`` possesses: even a filter bypass would find nothing there. Each
  keyring counts against its user's key quota until the last command holding it ends (an
  ordinary user's is 200 keys, ``/proc/sys/kernel/keys/maxkeys``; root's 1,000,000): past the
  quota a command gets the keyring its thread joined last (fresh once, never the host's) and a
  warning is logged once per thread; a thread that never joined one raises.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import logging
import os
import platform
import threading
import types

__all__ = ["REFUSED", "KeyringUnavailable", "filter_program", "fresh_session_keyring"]

REFUSED = ("add_key", "request_key", "keyctl")
"""System calls a sandboxed command may not make."""
_COMPAT_ABIS = {"x86_64": ("X86", "X32"), "aarch64": ("ARM",)}
"""ABIs the kernel also accepts from a native process, by machine."""
_KEYCTL_JOIN_SESSION_KEYRING = 1
_joined = threading.local()
_log = logging.getLogger(__name__)
_INSTALL_HINT = "install it with `apt-get install -y libseccomp2` (Debian/Ubuntu) or `dnf install libseccomp`"


class KeyringUnavailable(RuntimeError):
    """The keyring calls cannot be filtered here (no libseccomp)."""


def _libseccomp() -> types.ModuleType:
    """``pyseccomp``, imported only when a sandbox is made (it loads ``libseccomp.so.2``)."""
    try:
        import pyseccomp
    except ImportError as error:
        raise KeyringUnavailable(f"pyseccomp is not installed ({error}); reinstall stepwise-swe-bench") from error
    except RuntimeError as error:  # pyseccomp found no libseccomp.so
        raise KeyringUnavailable(f"libseccomp is not installed ({error}); {_INSTALL_HINT}") from error
    return pyseccomp


@functools.cache
def filter_program() -> bytes:
    """The compiled filter (made once per process)."""
    seccomp = _libseccomp()
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    for abi in _COMPAT_ABIS.get(platform.machine(), ()):
        program.add_arch(getattr(seccomp.Arch, abi))
    for name in REFUSED:
        program.add_rule(seccomp.ERRNO(1), name)  # EPERM
    program.add_rule(seccomp.ERRNO(errno.EOPNOTSUPP), "fallocate")
    program.add_rule(seccomp.ERRNO(errno.ENOSYS), "io_uring_setup")
    out = os.memfd_create("stepwise-swe-bench-seccomp")
    try:
        with open(out, "rb", closefd=False) as file:
            program.export_bpf(file)
            file.seek(0)
            return file.read()
    finally:
        os.close(out)


@functools.cache
def _keyctl() -> tuple[ctypes.CDLL, int]:
    seccomp = _libseccomp()
    return ctypes.CDLL(None, use_errno=True), seccomp.resolve_syscall(seccomp.system_arch(), "keyctl")


def fresh_session_keyring() -> None:
    """Give the calling thread a new, empty session keyring: what a sandbox it starts next
    inherits. Call it right before the sandbox's process is created, in the same thread."""
    libc, number = _keyctl()
    if libc.syscall(number, _KEYCTL_JOIN_SESSION_KEYRING, None) >= 0:  # its serial
        _joined.fresh = True
        return
    error = ctypes.get_errno()
    if error == errno.EDQUOT and getattr(_joined, "fresh", False):
        if not getattr(_joined, "warned", False):
            _joined.warned = True
            _log.warning("key quota reached: sandboxed commands of this thread share its last session keyring")
        return
    raise OSError(error, f"keyctl(KEYCTL_JOIN_SESSION_KEYRING) before a sandbox: {os.strerror(error)}")
