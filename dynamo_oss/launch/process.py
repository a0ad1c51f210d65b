"""One supervised child process: started in its own process group, its output prefixed
with its name and kept in a log file, stopped politely and then firmly.

Children run in their own session so a Ctrl-C at the terminal reaches only the
supervisor, which then drains them in order; and each asks the kernel to kill it if the
supervisor dies, so a crashed supervisor leaves nothing behind.
"""

from __future__ import annotations

import asyncio
import ctypes
import os
import signal
import sys
import time
from pathlib import Path

from dynamo_oss.deployment.processes import ProcessPlan
from dynamo_oss.launch.terminal import for_terminal

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


class ManagedProcess:
    def __init__(self, plan: ProcessPlan, log_dir: Path, name_width: int, verbose: bool = False) -> None:
        self.plan = plan
        self.verbose = verbose  # echo every line, not only `terminal.for_terminal` ones
        self.draining = False  # once set, the process's shutdown chatter goes to its log file only
        self.retired = False  # stopped on purpose by a resize: not restarted
        self.log_path = log_dir / f"{plan.name}.log"
        self.prefix = f"{plan.name:<{name_width}} | "
        self.process: asyncio.subprocess.Process | None = None
        self.started_at = 0.0
        self.restarts = 0
        self._pump: asyncio.Task | None = None

    @property
    def name(self) -> str:
        return self.plan.name

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def running(self) -> bool:
        return self.process is not None and self.process.returncode is None

    async def start(self) -> None:
        self.process = await asyncio.create_subprocess_exec(
            *self.plan.argv,
            env=self._environment(),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent,
            limit=1 << 20,  # worker log lines can be long (request dumps)
        )
        self.started_at = time.monotonic()
        self._pump = asyncio.create_task(self._pump_output(self.process))

    async def restart_after(self, delay_s: float, max_delay_s: float, stopping: asyncio.Event) -> bool:
        """Start again after `delay_s`. While a file it takes a secret from cannot be read (a TLS file
        mid-rotation), say why and try again, waiting twice as long each time up to `max_delay_s`.
        False when `stopping` is set first."""
        while True:
            try:
                await asyncio.wait_for(stopping.wait(), delay_s)
                return False
            except asyncio.TimeoutError:
                pass  # the wait is the backoff
            try:
                await self.start()
                return True
            except OSError as error:
                delay_s = min(delay_s * 2, max_delay_s)
                self.say(f"cannot start: {error}; trying again in {delay_s:.0f} s")

    def _environment(self) -> dict[str, str]:
        inherited = {name: value for name, value in os.environ.items() if name not in self.plan.env_unset}
        from_files = {name: path.read_text() for name, path in self.plan.env_from_files.items()}
        return {**inherited, **self.plan.env, **from_files}

    async def wait(self) -> int:
        assert self.process is not None
        code = await self.process.wait()
        if self._pump is not None:
            await self._pump  # the last lines a crashing process printed are worth seeing
        return code

    async def stop(self, grace_s: float) -> None:
        """SIGTERM the process group, give it `grace_s` to drain, then SIGKILL what is left."""
        if not self.running:
            return
        assert self.process is not None
        self._signal_group(signal.SIGTERM)
        try:
            await asyncio.wait_for(self.wait(), grace_s)
        except asyncio.TimeoutError:
            self.say(f"did not stop within {grace_s:.0f} s; killing it")
            self._signal_group(signal.SIGKILL)
            await self.wait()
        # Children the process left in its group (engine helpers) go with it.
        self._signal_group(signal.SIGKILL)

    def say(self, message: str) -> None:
        """A supervisor message about this process, in its own log stream."""
        line = f"[dynamo-oss] {message}"
        print(self.prefix + line, flush=True)
        with self.log_path.open("a") as log:
            log.write(line + "\n")

    def _signal_group(self, sig: signal.Signals) -> None:
        assert self.process is not None
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass

    async def _pump_output(self, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        with self.log_path.open("a") as log:
            async for raw in process.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                log.write(line + "\n")
                log.flush()
                if self.verbose or (self.plan.terminal and for_terminal(line) and not self.draining):
                    sys.stdout.write(self.prefix + line + "\n")
                    sys.stdout.flush()
