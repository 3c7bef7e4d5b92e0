"""The bubblewrap sandbox's system-call filter: kernel keyrings, user namespaces, ``fallocate``,
io_uring.

A seccomp BPF program made by libseccomp (through ``pyseccomp``, a ctypes binding of the
system's ``libseccomp.so.2``), the library container runtimes use, for the native ABI and its
compatibility ABIs (i386 and x32 on x86_64, arm on aarch64: ``int 0x80`` is no way around it).
bubblewrap installs it (``--seccomp FD``) right before it execs the command, after
``no_new_privs``, so every process of the command inherits it and none can remove it. Docker's
default profile refuses the same calls (and many more).

- ``add_key``, ``request_key``, ``keyctl``: EPERM. Kernel keyrings are state no namespace
  separates: a key added by one process can be found by another (a later episode, a later
  eval), so code run at grading could stash the hidden tests there.
- ``unshare`` and ``clone`` with ``CLONE_NEWUSER``: EPERM (``clone3``, whose flags a filter
  cannot read, ENOSYS: glibc falls back to ``clone``). A user namespace of its own would hand
  the command every capability in it, and the kernel surface that opens.
- ``fallocate``: EOPNOTSUPP, as on a file system without it (glibc then writes): its
  ``KEEP_SIZE`` mode reserves disk past the file-size limit.
- ``io_uring_setup``: ENOSYS. io_uring's operations never pass through seccomp.
"""

from __future__ import annotations

import errno
import functools
import os
import platform

__all__ = ["REFUSED", "FilterUnavailable", "filter_program"]

REFUSED = ("add_key", "request_key", "keyctl")
"""The keyring calls, refused with EPERM."""
CLONE_NEWUSER = 0x10000000
_COMPAT_ABIS = {"x86_64": ("X86", "X32"), "aarch64": ("ARM",)}
"""ABIs the kernel also accepts from a native process, by machine."""
_INSTALL_HINT = "install it with `apt-get install -y libseccomp2` (Debian/Ubuntu) or `dnf install libseccomp`"


class FilterUnavailable(RuntimeError):
    """The filter cannot be compiled here (no libseccomp)."""


@functools.cache
def filter_program() -> bytes:
    """The compiled filter (made once per process)."""
    try:
        import pyseccomp as seccomp
    except ImportError as error:
        raise FilterUnavailable(f"pyseccomp is not installed ({error}); reinstall stepwise-swe-bench") from error
    except RuntimeError as error:  # pyseccomp found no libseccomp.so
        raise FilterUnavailable(f"libseccomp is not installed ({error}); {_INSTALL_HINT}") from error
    program = seccomp.SyscallFilter(seccomp.ALLOW)
    for abi in _COMPAT_ABIS.get(platform.machine(), ()):
        program.add_arch(getattr(seccomp.Arch, abi))
    for name in REFUSED:
        program.add_rule(seccomp.ERRNO(errno.EPERM), name)
    for call in ("unshare", "clone"):
        program.add_rule(
            seccomp.ERRNO(errno.EPERM), call, seccomp.Arg(0, seccomp.MASKED_EQ, CLONE_NEWUSER, CLONE_NEWUSER)
        )
    program.add_rule(seccomp.ERRNO(errno.ENOSYS), "clone3")
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
