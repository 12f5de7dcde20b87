"""Progress reporting for long jobs: a tqdm bar on a terminal, log lines otherwise.

Off a terminal (CI logs, batch jobs) a line is written at every 1% of a known total, or
every few seconds when the total is unknown.
"""

from __future__ import annotations

import sys
import time
from typing import Any, Optional


class Progress:
    """A progress reporter.

    Args:
        desc: What is being done (e.g. ``"counting"``).
        total: The total amount of work, if known.
        unit: The unit of :meth:`update` amounts.
        enabled: ``False`` silences it entirely.
    """

    _LOG_INTERVAL_S = 5.0

    def __init__(self, desc: str, total: Optional[int] = None, unit: str = "it", enabled: bool = True):
        self.desc, self.total, self.unit, self.enabled = desc, total, unit, enabled
        self.n = 0
        self._bar: Any = None
        self._last_pct = -1
        self._last_log = time.monotonic()
        self._start = time.monotonic()
        if enabled and sys.stderr.isatty():
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=total, desc=desc, unit=unit, unit_scale=True, dynamic_ncols=True)
            except ImportError:
                self._bar = None

    def update(self, n: int = 1, **postfix: object) -> None:
        """Adds ``n`` to the amount done; ``postfix`` items are shown beside it."""
        if not self.enabled:
            return
        self.n += n
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.update(n)
            return
        now = time.monotonic()
        if self.total:
            pct = min(100, self.n * 100 // self.total)
            if pct == self._last_pct:
                return
            self._last_pct = pct
            head = f"{pct:3d}% ({self.n:,}/{self.total:,} {self.unit})"
        else:
            if now - self._last_log < self._LOG_INTERVAL_S:
                return
            head = f"{self.n:,} {self.unit}"
        self._last_log = now
        extra = "".join(f", {k}={v}" for k, v in postfix.items())
        print(f"tokenmill: {self.desc}: {head}{extra} [{now - self._start:.1f}s]", file=sys.stderr, flush=True)

    def close(self, **postfix: object) -> None:
        """Ends the report (a final line off a terminal)."""
        if not self.enabled:
            return
        if self._bar is not None:
            if postfix:
                self._bar.set_postfix(postfix, refresh=False)
            self._bar.close()
            return
        extra = "".join(f", {k}={v}" for k, v in postfix.items())
        elapsed = time.monotonic() - self._start
        print(f"tokenmill: {self.desc}: done, {self.n:,} {self.unit}{extra} [{elapsed:.1f}s]", file=sys.stderr, flush=True)
