"""Helpers for comparing tokenmill against tiktoken with readable failure messages."""

from __future__ import annotations

from typing import Any, Callable


def short(obj: Any, limit: int = 300) -> str:
    r = repr(obj)
    if len(r) <= limit:
        return r
    return f"{r[: limit // 2]}...<{len(r) - limit} chars>...{r[-limit // 2 :]}"


def outcome(fn: Callable[[], Any]):
    """("ok", result) or ("err", exception) of calling fn()."""
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - we compare whatever is raised
        return ("err", e)


def _token_context(enc, ids, i: int) -> str:
    lo, hi = max(0, i - 3), i + 4
    window = list(ids[lo:hi])
    try:
        pieces = enc.decode_tokens_bytes(window)
    except Exception:  # noqa: BLE001
        pieces = "?"
    return f"ids[{lo}:{hi}]={window} pieces={pieces}"


def assert_ids_equal(got, expected, text=None, tt=None, what: str = "ids") -> None:
    """Assert two token-id sequences are equal; on mismatch show where they first diverge."""
    got = list(got)
    expected = list(expected)
    if got == expected:
        return
    n = min(len(got), len(expected))
    i = next((k for k in range(n) if got[k] != expected[k]), n)
    lines = [
        f"{what} differ from tiktoken at index {i} "
        f"(tokenmill len {len(got)}, tiktoken len {len(expected)})"
    ]
    if tt is not None:
        lines.append(f"  tokenmill: {_token_context(tt, got, i)}")
        lines.append(f"  tiktoken : {_token_context(tt, expected, i)}")
        try:
            offset = len(tt.decode_bytes(expected[:i]))
            lines.append(f"  byte offset of divergence: {offset}")
            if isinstance(text, str):
                raw = text.encode("utf-8", "surrogatepass")
                lines.append(f"  text around it: {raw[max(0, offset - 40): offset + 40]!r}")
        except Exception:  # noqa: BLE001
            pass
    else:
        lines.append(f"  tokenmill: {got[max(0, i - 3): i + 4]}")
        lines.append(f"  tiktoken : {expected[max(0, i - 3): i + 4]}")
    if text is not None:
        lines.append(f"  input: {short(text)}")
    raise AssertionError("\n".join(lines))


def _describe_difference(got, exp) -> str:
    if isinstance(got, tuple) and isinstance(exp, tuple) and len(got) == len(exp):
        parts = []
        for k, (g, e) in enumerate(zip(got, exp)):
            if g == e:
                continue
            if isinstance(g, (set, frozenset)) and isinstance(e, (set, frozenset)):
                parts.append(
                    f"element {k}: only in tokenmill {short(sorted(g - e), 200)}, "
                    f"only in tiktoken {short(sorted(e - g), 200)}"
                )
            else:
                parts.append(f"element {k}: tokenmill {short(g)} != tiktoken {short(e)}")
        return "tokenmill and tiktoken differ: " + "; ".join(parts)
    return f"tokenmill {short(got)} != tiktoken {short(exp)}"


def assert_same_outcome(
    tm_call: Callable[[], Any],
    tt_call: Callable[[], Any],
    *,
    normalize: Callable[[Any], Any] = lambda x: x,
    context: str = "",
):
    """Call both; if tiktoken raises, tokenmill must raise an instance of the same exception
    type; otherwise tokenmill must return an equal (normalized) value. Returns tiktoken's
    outcome tuple."""
    tt_res = outcome(tt_call)
    tm_res = outcome(tm_call)
    ctx = f" [{context}]" if context else ""
    if tt_res[0] == "err":
        tt_exc = tt_res[1]
        assert tm_res[0] == "err", (
            f"tiktoken raised {type(tt_exc).__name__}({short(str(tt_exc), 200)}) "
            f"but tokenmill returned {short(tm_res[1])}{ctx}"
        )
        assert isinstance(tm_res[1], type(tt_exc)), (
            f"tiktoken raised {type(tt_exc).__name__}({short(str(tt_exc), 200)}) but tokenmill "
            f"raised {type(tm_res[1]).__name__}({short(str(tm_res[1]), 200)}){ctx}"
        )
    else:
        if tm_res[0] == "err":
            raise AssertionError(
                f"tokenmill raised {type(tm_res[1]).__name__}({short(str(tm_res[1]), 300)}) "
                f"but tiktoken returned {short(tt_res[1])}{ctx}"
            ) from tm_res[1]
        got, exp = normalize(tm_res[1]), normalize(tt_res[1])
        assert got == exp, _describe_difference(got, exp) + ctx
    return tt_res


def unstable_key(result):
    """Normalise encode_with_unstable output: completions come from a hash set in tiktoken,
    so their order is arbitrary; compare them as a set of tuples."""
    stable, completions = result
    return (list(stable), frozenset(map(tuple, completions)), len(completions))
