"""Looking up encodings by name.

:func:`get_encoding` builds an :class:`~tokenmill.Encoding` the first time a name is asked for
and hands out that same object afterwards. Names come from two places:

* the built-in pretrained encodings of :mod:`tokenmill.pretrained` (``gpt2``, ``r50k_base``,
  ``p50k_base``, ``p50k_edit``, ``cl100k_base``, ``o200k_base``, ``o200k_harmony``);
* third-party tiktoken plugins: modules of the ``tiktoken_ext`` namespace package that define
  an ``ENCODING_CONSTRUCTORS`` dict. They are looked for once, the first time a name is not a
  built-in one or the list of names is requested. A plugin may add new names but cannot
  replace a built-in; ``tiktoken_ext.openai_public`` (tiktoken's own definitions of the
  built-ins) is skipped. A plugin that fails to import is reported with a warning and
  otherwise ignored.
"""

from __future__ import annotations

import importlib
import pkgutil
import threading
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, List

from tokenmill.pretrained import ENCODING_CONSTRUCTORS as _BUILTIN_CONSTRUCTORS

if TYPE_CHECKING:  # pragma: no cover
    from tokenmill.core import Encoding

__all__ = ["get_encoding", "list_encoding_names", "ENCODINGS", "ENCODING_CONSTRUCTORS"]

_PLUGIN_NAMESPACE = "tiktoken_ext"
# tiktoken's definitions of the encodings tokenmill already ships.
_SKIPPED_PLUGINS = frozenset({"tiktoken_ext.openai_public"})

_lock = threading.RLock()

#: Encodings built so far, by name. Filled by :func:`get_encoding`.
ENCODINGS: Dict[str, "Encoding"] = {}

#: Every known encoding name -> function returning the ``Encoding`` keyword arguments. Starts
#: with the built-ins; plugin encodings are added on first discovery.
ENCODING_CONSTRUCTORS: Dict[str, Callable[[], Dict[str, Any]]] = dict(_BUILTIN_CONSTRUCTORS)

_plugins_discovered = False
_plugin_modules: List[str] = []


def _plugin_module_names() -> List[str]:
    """Names of the submodules of the ``tiktoken_ext`` namespace package, if it exists."""
    try:
        namespace = importlib.import_module(_PLUGIN_NAMESPACE)
    except ImportError:
        return []
    path = getattr(namespace, "__path__", None)
    if path is None:
        return []
    return sorted(
        info.name for info in pkgutil.iter_modules(path, _PLUGIN_NAMESPACE + ".")
    )


def _discover_plugins() -> None:
    """Merge the constructors of third-party tiktoken plugins in (once; caller holds _lock)."""
    global _plugins_discovered
    if _plugins_discovered:
        return
    _plugins_discovered = True
    found: List[str] = []
    for module_name in _plugin_module_names():
        if module_name in _SKIPPED_PLUGINS:
            continue
        try:
            module = importlib.import_module(module_name)
        except Exception as e:  # noqa: BLE001 - a broken plugin must not break the built-ins
            warnings.warn(
                f"tokenmill: ignoring tiktoken plugin {module_name}, which failed to import: "
                f"{type(e).__name__}: {e}",
                RuntimeWarning,
                stacklevel=3,
            )
            continue
        constructors = getattr(module, "ENCODING_CONSTRUCTORS", None)
        if not isinstance(constructors, dict):
            warnings.warn(
                f"tokenmill: ignoring tiktoken plugin {module_name}: it has no "
                f"ENCODING_CONSTRUCTORS dict",
                RuntimeWarning,
                stacklevel=3,
            )
            continue
        found.append(module_name)
        for name, constructor in constructors.items():
            if name in _BUILTIN_CONSTRUCTORS:
                continue  # tokenmill's own definition wins
            if name in ENCODING_CONSTRUCTORS:
                warnings.warn(
                    f"tokenmill: encoding {name!r} from tiktoken plugin {module_name} is "
                    f"already defined by another plugin; keeping the first definition",
                    RuntimeWarning,
                    stacklevel=3,
                )
                continue
            ENCODING_CONSTRUCTORS[name] = constructor
    _plugin_modules[:] = found


def _reset() -> None:
    """Forget built encodings and plugin discovery (for tests)."""
    global _plugins_discovered
    with _lock:
        ENCODINGS.clear()
        ENCODING_CONSTRUCTORS.clear()
        ENCODING_CONSTRUCTORS.update(_BUILTIN_CONSTRUCTORS)
        _plugin_modules.clear()
        _plugins_discovered = False


def get_encoding(encoding_name: str) -> "Encoding":
    """Return the encoding called ``encoding_name``, building it on first use.

    Repeated calls (from any thread) return the very same object. Building a pretrained
    encoding may need its vocabulary file; see :mod:`tokenmill.load` for the cache and the
    ``TOKENMILL_OFFLINE`` switch.

    Raises:
        ValueError: ``encoding_name`` is not a string, or no encoding has that name (the
            message lists the known names).
        tokenmill.load.VocabularyNotAvailableError: the vocabulary could not be obtained.
    """
    if not isinstance(encoding_name, str):
        raise ValueError(
            f"get_encoding() takes the encoding name as a str, not {type(encoding_name).__name__}"
        )
    encoding = ENCODINGS.get(encoding_name)
    if encoding is not None:
        return encoding

    with _lock:
        encoding = ENCODINGS.get(encoding_name)
        if encoding is not None:
            return encoding
        constructor = ENCODING_CONSTRUCTORS.get(encoding_name)
        if constructor is None:
            _discover_plugins()
            constructor = ENCODING_CONSTRUCTORS.get(encoding_name)
        if constructor is None:
            known = ", ".join(sorted(ENCODING_CONSTRUCTORS))
            plugins = ", ".join(_plugin_modules) or "none"
            raise ValueError(
                f"Unknown encoding {encoding_name!r}. Known encodings: {known}. "
                f"(tiktoken plugins loaded: {plugins})"
            )
        from tokenmill.core import Encoding

        encoding = Encoding(**constructor())
        ENCODINGS[encoding_name] = encoding
        return encoding


def list_encoding_names() -> List[str]:
    """Names accepted by :func:`get_encoding`: the built-ins first, then plugin encodings."""
    with _lock:
        _discover_plugins()
        return list(ENCODING_CONSTRUCTORS)
