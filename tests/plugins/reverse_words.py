"""A plain v1 taskset with no Env of its own (taskset id ``reverse-words``), for showing that
``--env.id stepwise-refine`` wraps any taskset. Tests put this folder on ``PYTHONPATH``."""

import verifiers.v1 as vf


class ReverseData(vf.TaskData):
    words: str


class ReverseTask(vf.Task[ReverseData]):
    @vf.reward
    async def in_place(self, task: ReverseData, trace: vf.Trace) -> float:
        """The fraction of words in their reversed position."""
        target = task.words.split()[::-1]
        return sum(a == b for a, b in zip(trace.last_reply.split(), target)) / len(target)


class ReverseTaskset(vf.Taskset[ReverseTask]):
    def load(self):
        for words in ("one two three four", "red green blue"):
            yield ReverseTask(ReverseData(words=words, prompt=f"Reverse the order of these words: {words}"))


__all__ = ["ReverseTaskset"]
