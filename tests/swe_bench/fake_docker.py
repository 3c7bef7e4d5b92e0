"""A stand-in for the ``docker`` CLI: records every invocation and answers like an engine would.

No docker engine runs on the test machine, so this lets verifiers' real ``DockerRuntime`` and this
package's container sandbox run against it, and lets the test read exactly what would have been
run. Environment: ``FAKE_DOCKER_DIR`` (log and written files), ``FAKE_DOCKER_HEAD`` (what
``git rev-parse HEAD`` prints in the container), ``FAKE_DOCKER_EVAL_LOG`` (a file whose content
the grading script prints), ``FAKE_DOCKER_VERDICT_LOG`` (what a grading script given stdin, the
test call of ``verdict``, prints).
"""

import array
import json
import os
import socket
import sys
from pathlib import Path

STATUS = "__stepwise_swe_bench_status"
state = Path(os.environ["FAKE_DOCKER_DIR"])
argv = sys.argv[1:]
stdin = b""
if "-i" in argv[:2] or (argv[:1] == ["exec"] and "-i" in argv):
    stdin = sys.stdin.buffer.read()
with (state / "calls.jsonl").open("a") as log:
    log.write(json.dumps({"argv": argv, "stdin": stdin.decode(errors="replace")}) + "\n")


def after_container(args: list[str]) -> list[str]:
    """The command an ``exec`` runs: everything after the container name."""
    i = 1
    while i < len(args):
        if args[i] in ("--env", "--workdir", "--user"):
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return args[i + 1 :]
    return []


command = argv[0] if argv else ""
if command == "version":
    print("Client: fake\nServer: fake")
elif command == "image":  # `image inspect` of verifiers' network helper: cached
    print("[{}]")
elif command == "run" and "--detach" in argv:
    print("f" * 64)
elif command == "run" and "--volume" in argv:
    # The proxy helper: hand a listening socket back over the control socket, as
    # verifiers' _PASS_LISTENER does inside the container's network namespace.
    volume = argv[argv.index("--volume") + 1].split(":")[0]
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    control = socket.socket(socket.AF_UNIX)
    control.connect(f"{volume}/control.sock")
    fds = array.array("i", [listener.fileno()])
    control.sendmsg([b"listener"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
elif command == "run":  # the network cut, in a helper sharing the container's namespace
    pass
elif command == "inspect":
    config = {"Env": ["PATH=/usr/bin:/bin"], "User": "", "Image": "swebench-image", "WorkingDir": "/testbed"}
    print(json.dumps(config))
elif command == "port":
    print("127.0.0.1:49999")
elif command == "exec":
    inner = after_container(argv)
    if inner[:2] == ["/bin/bash", "-c"] and len(inner) >= 5:
        user_command = inner[4]
        status = 0
        if user_command == "git rev-parse HEAD":
            print(os.environ["FAKE_DOCKER_HEAD"])
        elif " diff --binary " in user_command or " diff --cached --raw " in user_command:
            pass  # the model changed nothing (its diff, and the grading copy's, are empty)
        elif "stepwise-stdin-" in user_command and "bash /tmp/stepwise-eval-" in user_command:
            print(Path(os.environ["FAKE_DOCKER_VERDICT_LOG"]).read_text(), end="")
            status = 1  # pytest's status beside the report's failed decoys
        elif user_command.startswith("bash /tmp/stepwise-eval-"):
            print(Path(os.environ["FAKE_DOCKER_EVAL_LOG"]).read_text(), end="")
        else:
            print(f"ran: {user_command}")
        print(f"{STATUS} {status}", file=sys.stderr)
    elif inner[:2] == ["sh", "-c"] and "cat >" in inner[2]:
        target = inner[2].rsplit("cat > ", 1)[1].strip("'")
        (state / "files").mkdir(exist_ok=True)
        (state / "files" / Path(target).name).write_bytes(stdin)
elif command == "rm":
    pass
else:
    print(f"fake docker: unexpected {argv}", file=sys.stderr)
    sys.exit(1)
