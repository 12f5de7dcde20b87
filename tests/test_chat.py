"""The nanochat-compatible chat tokenizer (:mod:`tokenmill.chat`).

Every expectation is built here from the rules being tested: the expected ids are the
pieces of a conversation (special tokens looked up by name, text encoded with
``encode_ordinary``) concatenated in the documented order, with the documented mask value
for each piece. No id list is pasted in.
"""

from __future__ import annotations

import copy
import os
import pickle
import re

import pytest

import tokenmill
from tokenmill.chat import (
    BOS_TOKEN,
    CHAT_FILE,
    CHATML,
    NANOCHAT,
    SPECIAL_TOKENS,
    TEMPLATES,
    ChatTemplate,
    Tokenizer,
)
from tokenmill.corpus import stdlib_texts
from tokenmill.patterns import NANOCHAT_PATTERN

VOCAB = 512


# ----------------------------------------------------------------------------------------
# fixtures and helpers
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docs():
    return list(stdlib_texts(200_000))


@pytest.fixture(scope="module")
def tok(docs):
    return Tokenizer.train_from_iterator(docs, VOCAB, progress=False)


@pytest.fixture(scope="module")
def chatml(docs):
    return Tokenizer.train_from_iterator(docs, VOCAB, template=CHATML, progress=False)


def build(*pieces):
    """(ids, mask) from (ids-or-one-id, mask value) pieces, in order."""
    ids, mask = [], []
    for toks, m in pieces:
        toks = [toks] if isinstance(toks, int) else list(toks)
        ids += toks
        mask += [m] * len(toks)
    return ids, mask


def sp(t, name):
    """The id of special token ``name``, looked up in the encoding itself."""
    return t.enc._special_tokens[name]


def txt(t, s):
    return t.enc.encode_ordinary(s)


TOOL_CONVERSATION = {
    "messages": [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": "What is 6*7? Use python."},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me compute it."},
                {"type": "python", "text": "print(6*7)"},
                {"type": "python_output", "text": "42\n"},
                {"type": "text", "text": "The answer is 42."},
            ],
        },
    ]
}


def nanochat_expected(t, conversation_messages_after_merge):
    """nanochat's rules, piece by piece, for messages whose system text is already merged."""
    S = lambda name: sp(t, name)  # noqa: E731
    pieces = [(t.bos_token_id, 0)]
    for m in conversation_messages_after_merge:
        if m["role"] == "user":
            pieces += [(S("<|user_start|>"), 0), (txt(t, m["content"]), 0), (S("<|user_end|>"), 0)]
        else:
            pieces.append((S("<|assistant_start|>"), 0))
            content = m["content"]
            if isinstance(content, str):
                content = [{"type": "text", "text": content}]
            for p in content:
                if p["type"] == "text":
                    pieces.append((txt(t, p["text"]), 1))
                elif p["type"] == "python":
                    pieces += [(S("<|python_start|>"), 1), (txt(t, p["text"]), 1), (S("<|python_end|>"), 1)]
                else:
                    pieces += [(S("<|output_start|>"), 0), (txt(t, p["text"]), 0), (S("<|output_end|>"), 0)]
            pieces.append((S("<|assistant_end|>"), 1))
    return build(*pieces)


# ----------------------------------------------------------------------------------------
# vocabulary and special tokens
# ----------------------------------------------------------------------------------------


def test_default_special_tokens_are_nanochats_in_order(tok):
    assert SPECIAL_TOKENS == (
        "<|bos|>", "<|user_start|>", "<|user_end|>", "<|assistant_start|>", "<|assistant_end|>",
        "<|python_start|>", "<|python_end|>", "<|output_start|>", "<|output_end|>",
    )
    assert BOS_TOKEN == SPECIAL_TOKENS[0]
    # counted in vocab_size, appended after the learned ranks, in order
    assert tok.get_vocab_size() == VOCAB
    n_learned = len(tok.enc._mergeable_ranks)
    assert n_learned == VOCAB - len(SPECIAL_TOKENS)
    assert max(tok.enc._mergeable_ranks.values()) == n_learned - 1
    assert [tok.encode_special(s) for s in SPECIAL_TOKENS] == list(range(n_learned, VOCAB))
    assert tok.get_special_tokens() == set(SPECIAL_TOKENS)
    assert tok.get_bos_token_id() == tok.bos_token_id == tok.encode_special("<|bos|>")
    assert tok.enc._pat_str == NANOCHAT_PATTERN
    assert tok.template is NANOCHAT


def test_id_to_token_decode_and_encode_special(tok):
    assert tok.id_to_token(tok.encode_special("<|assistant_end|>")) == "<|assistant_end|>"
    assert tok.id_to_token(ord("a")) == "a"
    text = "def f(x):\n    return x + 1  # héllo 🌍"
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode_single_token_bytes(ord("b")) == b"b"
    with pytest.raises(KeyError, match="not a token"):
        tok.encode_special("<|nope|>")


def test_encode_prepend_append_single(tok):
    text = "hello world"
    base = tok.enc.encode_ordinary(text)
    bos, end = sp(tok, "<|bos|>"), sp(tok, "<|assistant_end|>")
    assert tok.encode(text) == base
    assert tok.encode(text, prepend="<|bos|>") == [bos] + base
    assert tok.encode(text, prepend=bos) == [bos] + base
    assert tok.encode(text, append="<|assistant_end|>") == base + [end]
    assert tok.encode(text, prepend=bos, append=end) == [bos] + base + [end]
    assert tok(text, prepend="<|bos|>") == [bos] + base  # __call__
    # special-token text inside the text is ordinary text
    assert bos not in tok.encode("<|bos|> x")
    assert tok.encode("<|bos|> x") == tok.enc.encode_ordinary("<|bos|> x")


def test_encode_batch(tok, docs):
    texts = [d[:300] for d in docs[:5]] + ["", "ünïcode ✓"]
    want = [tok.enc.encode_ordinary(t) for t in texts]
    assert tok.encode(texts) == want
    assert tok.encode(texts, num_threads=1) == want
    bos, end = sp(tok, "<|bos|>"), sp(tok, "<|user_end|>")
    got = tok.encode(texts, prepend="<|bos|>", append=end, num_threads=2)
    assert got == [[bos] + w + [end] for w in want]
    # rows are independent lists
    got[0].append(-1)
    assert got[1][-1] == end


def test_encode_rejects_bad_input(tok):
    with pytest.raises(ValueError, match="expected a str or a list of str"):
        tok.encode(123)
    with pytest.raises(TypeError):
        tok.encode(b"bytes")
    with pytest.raises(KeyError):
        tok.encode("x", prepend="<|missing|>")
    with pytest.raises(ValueError, match="not a token id"):
        tok.encode("x", append=VOCAB)
    with pytest.raises(TypeError, match="item 1"):
        tok.encode(["ok", 5])


# ----------------------------------------------------------------------------------------
# render_conversation: nanochat's semantics
# ----------------------------------------------------------------------------------------


def test_render_simple(tok):
    conv = {"messages": [{"role": "user", "content": "Hi there"}, {"role": "assistant", "content": "Hello!"}]}
    want = build(
        (sp(tok, "<|bos|>"), 0),
        (sp(tok, "<|user_start|>"), 0), (txt(tok, "Hi there"), 0), (sp(tok, "<|user_end|>"), 0),
        (sp(tok, "<|assistant_start|>"), 0), (txt(tok, "Hello!"), 1), (sp(tok, "<|assistant_end|>"), 1),
    )
    assert tok.render_conversation(conv) == want
    # a bare list of messages is the same conversation
    assert tok.render_conversation(conv["messages"]) == want


def test_render_system_message_merged_into_first_user(tok):
    conv = {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Why?"},
            {"role": "assistant", "content": "Because."},
        ]
    }
    before = copy.deepcopy(conv)
    ids, mask = tok.render_conversation(conv)
    assert conv == before  # not modified
    want = build(
        (sp(tok, "<|bos|>"), 0),
        (sp(tok, "<|user_start|>"), 0), (txt(tok, "Be brief.\n\nWhy?"), 0), (sp(tok, "<|user_end|>"), 0),
        (sp(tok, "<|assistant_start|>"), 0), (txt(tok, "Because."), 1), (sp(tok, "<|assistant_end|>"), 1),
    )
    assert (ids, mask) == want
    # the merged text is encoded as one string (not as two encodings glued together)
    assert tok.decode(ids[2 : ids.index(sp(tok, "<|user_end|>"))]) == "Be brief.\n\nWhy?"


def test_render_tool_calls(tok):
    ids, mask = tok.render_conversation(TOOL_CONVERSATION)
    S = lambda n: sp(tok, n)  # noqa: E731
    want = build(
        (S("<|bos|>"), 0),
        (S("<|user_start|>"), 0), (txt(tok, "You are terse.\n\nWhat is 6*7? Use python."), 0), (S("<|user_end|>"), 0),
        (S("<|assistant_start|>"), 0),
        (txt(tok, "Let me compute it."), 1),
        (S("<|python_start|>"), 1), (txt(tok, "print(6*7)"), 1), (S("<|python_end|>"), 1),
        (S("<|output_start|>"), 0), (txt(tok, "42\n"), 0), (S("<|output_end|>"), 0),
        (txt(tok, "The answer is 42."), 1),
        (S("<|assistant_end|>"), 1),
    )
    assert (ids, mask) == want
    # the supervised tokens spell exactly what the assistant writes
    supervised = tok.decode([i for i, m in zip(ids, mask) if m])
    assert supervised == "Let me compute it.<|python_start|>print(6*7)<|python_end|>The answer is 42.<|assistant_end|>"


def test_render_multi_turn(tok):
    msgs = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "two"},
        {"role": "user", "content": "three"},
        {"role": "assistant", "content": [{"type": "text", "text": "four"}]},
        {"role": "user", "content": "five"},  # may end on a user turn
    ]
    assert tok.render_conversation({"messages": msgs}) == nanochat_expected(tok, msgs)
    ids, mask = tok.render_conversation({"messages": msgs})
    assert ids.count(sp(tok, "<|assistant_end|>")) == 2
    assert sum(mask) == len(txt(tok, "two")) + len(txt(tok, "four")) + 2


def test_render_empty_assistant_parts_and_empty_text(tok):
    msgs = [{"role": "user", "content": ""}, {"role": "assistant", "content": []}]
    want = build(
        (sp(tok, "<|bos|>"), 0), (sp(tok, "<|user_start|>"), 0), (sp(tok, "<|user_end|>"), 0),
        (sp(tok, "<|assistant_start|>"), 0), (sp(tok, "<|assistant_end|>"), 1),
    )
    assert tok.render_conversation(msgs) == want


def test_render_special_token_text_in_content_stays_text(tok):
    sneaky = "<|assistant_end|><|bos|>"
    ids, mask = tok.render_conversation(
        [{"role": "user", "content": sneaky}, {"role": "assistant", "content": sneaky}]
    )
    assert ids.count(sp(tok, "<|assistant_end|>")) == 1  # only the real one
    assert ids.count(sp(tok, "<|bos|>")) == 1
    n = len(txt(tok, sneaky))
    assert ids[2 : 2 + n] == txt(tok, sneaky)  # after <|bos|> <|user_start|>
    assert ids[-1 - n : -1] == txt(tok, sneaky) and mask[-1 - n : -1] == [1] * n


def test_render_truncation(tok):
    ids, mask = tok.render_conversation(TOOL_CONVERSATION, max_tokens=None)
    n = len(ids)
    for k in (0, 1, 5, n - 1, n, n + 10):
        got_ids, got_mask = tok.render_conversation(TOOL_CONVERSATION, max_tokens=k)
        assert got_ids == ids[:k] and got_mask == mask[:k]
        assert len(got_ids) == len(got_mask) == min(k, n)
    # the default cap is nanochat's 2048
    long_conv = [{"role": "user", "content": "word " * 3000}, {"role": "assistant", "content": "ok"}]
    full, full_mask = tok.render_conversation(long_conv, max_tokens=None)
    assert len(full) > 2048
    got, got_mask = tok.render_conversation(long_conv)
    assert got == full[:2048] and got_mask == full_mask[:2048]
    with pytest.raises(ValueError, match="negative"):
        tok.render_conversation(long_conv, max_tokens=-1)
    with pytest.raises(TypeError):
        tok.render_conversation(long_conv, max_tokens="10")


# ----------------------------------------------------------------------------------------
# malformed conversations
# ----------------------------------------------------------------------------------------

U = {"role": "user", "content": "u"}
A = {"role": "assistant", "content": "a"}
SYS = {"role": "system", "content": "s"}

MALFORMED = [
    ("empty list", [], r"empty"),
    ("empty messages", {"messages": []}, r"empty"),
    ("no messages key", {"msgs": [U]}, r"no 'messages' key"),
    ("unknown role", [U, {"role": "bot", "content": "x"}], r"message 1 \(role 'bot'\): unknown role"),
    ("missing role", [U, {"content": "x"}], r"message 1 has no 'role'"),
    ("not a dict", [U, "hello"], r"message 1 is a str"),
    ("starts with assistant", [A, U], r"message 0 \(role 'assistant'\): expected a 'user'"),
    ("two users", [U, U], r"message 1 \(role 'user'\): expected a 'assistant'"),
    ("two assistants", [U, A, A], r"message 2 \(role 'assistant'\): expected a 'user'"),
    ("system not first", [U, A, SYS, U], r"message 2 \(role 'system'\): .*only allowed as the first"),
    ("system twice", [SYS, SYS, U], r"message 1 \(role 'system'\): .*only allowed as the first"),
    ("system alone", [SYS], r"message 0 \(role 'system'\): .*followed by a user"),
    ("system then assistant", [SYS, A], r"message 1 \(role 'assistant'\): expected a 'user'"),
    ("missing content", [U, {"role": "assistant"}], r"message 1 \(role 'assistant'\) has no 'content'"),
    ("user content list", [{"role": "user", "content": [{"type": "text", "text": "x"}]}],
     r"message 0 \(role 'user'\): content must be a str, got list"),
    ("system content None", [{"role": "system", "content": None}, U],
     r"message 0 \(role 'system'\): content must be a str, got NoneType"),
    ("assistant content int", [U, {"role": "assistant", "content": 3}],
     r"message 1 \(role 'assistant'\): content must be a str or a list of parts, got int"),
    ("unknown part type", [U, {"role": "assistant", "content": [{"type": "text", "text": "a"}, {"type": "image", "text": "b"}]}],
     r"message 1 \(role 'assistant'\), part 1: unknown part type 'image'"),
    ("part without type", [U, {"role": "assistant", "content": [{"text": "a"}]}],
     r"message 1 \(role 'assistant'\), part 0 has no 'type'"),
    ("part without text", [U, {"role": "assistant", "content": [{"type": "python"}]}],
     r"message 1 \(role 'assistant'\), part 0 \(type 'python'\) has no 'text'"),
    ("part text not str", [U, {"role": "assistant", "content": [{"type": "python_output", "text": 42}]}],
     r"message 1 \(role 'assistant'\), part 0 \(type 'python_output'\): text must be a str, got int"),
    ("part not a dict", [U, {"role": "assistant", "content": ["plain"]}],
     r"message 1 \(role 'assistant'\), part 0: expected a dict"),
    ("late error", [U, A, U, A, U, {"role": "user", "content": "x"}], r"message 5 \(role 'user'\)"),
]


@pytest.mark.parametrize("conversation, pattern", [c[1:] for c in MALFORMED], ids=[c[0] for c in MALFORMED])
def test_malformed_conversation_raises_value_error(tok, chatml, conversation, pattern):
    for t in (tok, chatml):
        with pytest.raises(ValueError, match=pattern) as info:
            t.render_conversation(conversation)
        assert not isinstance(info.value, AssertionError)
        last = conversation[-1] if isinstance(conversation, list) and conversation else None
        if isinstance(last, dict) and last.get("role") == "assistant":
            with pytest.raises(ValueError, match=pattern):
                t.render_for_completion(conversation)


def test_conversation_of_wrong_type(tok):
    with pytest.raises(TypeError, match="list of messages"):
        tok.render_conversation("hello")


# ----------------------------------------------------------------------------------------
# render_for_completion
# ----------------------------------------------------------------------------------------


def test_render_for_completion(tok):
    conv = copy.deepcopy(TOOL_CONVERSATION)
    conv["messages"] += [
        {"role": "user", "content": "And 7*8?"},
        {"role": "assistant", "content": "56."},
    ]
    before = copy.deepcopy(conv)
    got = tok.render_for_completion(conv)
    assert conv == before
    prompt, _ = tok.render_conversation({"messages": conv["messages"][:-1]})
    assert got == prompt + [sp(tok, "<|assistant_start|>")]
    # built from first principles too
    merged = [
        {"role": "user", "content": "You are terse.\n\nWhat is 6*7? Use python."},
        conv["messages"][2],
        {"role": "user", "content": "And 7*8?"},
    ]
    assert got == nanochat_expected(tok, merged)[0] + [sp(tok, "<|assistant_start|>")]


def test_render_for_completion_needs_assistant_last(tok):
    with pytest.raises(ValueError, match=r"message 2 \(role 'user'\).*last message"):
        tok.render_for_completion([U, A, U])
    with pytest.raises(ValueError, match="empty"):
        tok.render_for_completion([])


def test_tokenizer_without_template_cannot_render(tok):
    bare = Tokenizer(tok.enc, template=None)
    assert bare.encode("abc") == tok.encode("abc")
    with pytest.raises(ValueError, match="no chat template"):
        bare.render_conversation([U, A])
    with pytest.raises(ValueError, match="no chat template"):
        bare.render_for_completion([U, A])


# ----------------------------------------------------------------------------------------
# token_bytes
# ----------------------------------------------------------------------------------------


def test_token_bytes(tok, docs):
    tb = tok.token_bytes()
    assert isinstance(tb, list) and len(tb) == tok.get_vocab_size()
    specials = {tok.encode_special(s) for s in tok.get_special_tokens()}
    for i in range(tok.get_vocab_size()):
        if i in specials:
            assert tb[i] == 0
        else:
            assert tb[i] == len(tok.decode_single_token_bytes(i)) > 0
    assert tb[:256] == [1] * 256
    # bytes of a text == sum of its tokens' byte counts
    for text in [docs[3][:2000], "naïve café — 你好世界 🌍🌍", ""]:
        ids = tok.encode(text)
        assert sum(tb[i] for i in ids) == len(text.encode("utf-8"))
    # in a rendering, the special tokens count nothing
    ids, _ = tok.render_conversation(TOOL_CONVERSATION)
    plain = tok.enc.decode_bytes([i for i in ids if i not in specials])
    assert sum(tb[i] for i in ids) == len(plain)
    # a returned list is a copy
    tb[0] = 99
    assert tok.token_bytes()[0] == 1


def test_token_bytes_numpy(tok):
    np = pytest.importorskip("numpy")
    arr = tok.token_bytes(as_numpy=True)
    assert isinstance(arr, np.ndarray) and arr.dtype == np.int32
    assert arr.tolist() == tok.token_bytes()


# ----------------------------------------------------------------------------------------
# training, saving and loading
# ----------------------------------------------------------------------------------------


def test_train_save_from_directory_round_trip(tok, docs, tmp_path):
    out = tok.save(tmp_path / "tok")
    assert out == tmp_path / "tok"
    for f in ("tokenizer.tiktoken", "tokenmill.json", CHAT_FILE):
        assert (out / f).is_file()
    back = Tokenizer.from_directory(out)
    assert back.enc._mergeable_ranks == tok.enc._mergeable_ranks
    assert back.enc._special_tokens == tok.enc._special_tokens
    assert back.enc._pat_str == tok.enc._pat_str
    assert back.template == NANOCHAT and back.bos_token == BOS_TOKEN
    held_out = list(stdlib_texts(60_000, skip_bytes=400_000))
    assert held_out
    assert back.encode(held_out) == tok.encode(held_out)
    assert back.render_conversation(TOOL_CONVERSATION) == tok.render_conversation(TOOL_CONVERSATION)
    assert back.token_bytes() == tok.token_bytes()
    # the plain tokenmill layout (no chat file) loads with the nanochat template too
    tokenmill.save(tok.enc, tmp_path / "plain")
    plain = Tokenizer.from_directory(tmp_path / "plain")
    assert plain.template == NANOCHAT
    assert plain.render_conversation(TOOL_CONVERSATION) == tok.render_conversation(TOOL_CONVERSATION)


def test_chatml_round_trip_keeps_template(chatml, tmp_path):
    back = Tokenizer.from_directory(chatml.save(tmp_path / "cm"))
    assert back.template == CHATML
    assert back.render_conversation(TOOL_CONVERSATION) == chatml.render_conversation(TOOL_CONVERSATION)
    # asking for a template explicitly overrides the saved one (and is checked)
    with pytest.raises(ValueError, match="lacks"):
        Tokenizer.from_directory(tmp_path / "cm", template="nanochat")


def test_from_directory_nanochat_pickle(tok, tmp_path):
    tiktoken = pytest.importorskip("tiktoken")
    # what nanochat's save() writes: a pickled tiktoken.Encoding named tokenizer.pkl
    tt = tiktoken.Encoding(
        name="rustbpe",
        pat_str=tok.enc._pat_str,
        mergeable_ranks=dict(tok.enc._mergeable_ranks),
        special_tokens=dict(tok.enc._special_tokens),
    )
    (tmp_path / "tokenizer.pkl").write_bytes(pickle.dumps(tt))
    back = Tokenizer.from_directory(tmp_path)
    assert isinstance(back.enc, tokenmill.Encoding)
    assert back.template == NANOCHAT
    assert back.enc._mergeable_ranks == tok.enc._mergeable_ranks
    assert back.render_conversation(TOOL_CONVERSATION) == tok.render_conversation(TOOL_CONVERSATION)
    text = "x = [1, 2, 3]\nprint(sum(x))"
    assert back.encode(text) == tt.encode_ordinary(text)


class _Evil:
    def __reduce__(self):
        return (os.getcwd, ())


def test_from_directory_refuses_other_pickles(tmp_path):
    (tmp_path / "tokenizer.pkl").write_bytes(pickle.dumps(_Evil()))
    with pytest.raises(pickle.UnpicklingError, match="refusing"):
        Tokenizer.from_directory(tmp_path)


def test_from_directory_missing(tmp_path):
    with pytest.raises(FileNotFoundError, match="no tokenizer found"):
        Tokenizer.from_directory(tmp_path)


def test_train_vocab_too_small(docs):
    with pytest.raises(ValueError, match="vocab_size"):
        Tokenizer.train_from_iterator(docs[:2], 256 + len(SPECIAL_TOKENS) - 1, progress=False)


# ----------------------------------------------------------------------------------------
# templates
# ----------------------------------------------------------------------------------------


def test_construction_checks_template_tokens(tok, chatml):
    with pytest.raises(ValueError, match=r"chat template 'chatml' needs special tokens.*<\|im_start\|>"):
        Tokenizer(tok.enc, template=CHATML)
    with pytest.raises(ValueError, match=r"<\|user_start\|>"):
        Tokenizer(chatml.enc, template="nanochat")
    with pytest.raises(ValueError, match="BOS"):
        Tokenizer(tok.enc, bos_token="<|endoftext|>")
    with pytest.raises(ValueError, match="unknown chat template"):
        Tokenizer(tok.enc, template="llama")
    assert Tokenizer(chatml.enc, template="chatml").template is CHATML
    assert TEMPLATES == {"nanochat": NANOCHAT, "chatml": CHATML}


def test_chatml_layout_and_mask(chatml):
    t = chatml
    assert t.get_special_tokens() == {BOS_TOKEN, *CHATML.special_tokens}
    assert t.get_vocab_size() == VOCAB
    S = lambda n: sp(t, n)  # noqa: E731
    start, end = S("<|im_start|>"), S("<|im_end|>")
    ids, mask = t.render_conversation(TOOL_CONVERSATION)
    want = build(
        (S("<|bos|>"), 0),
        (start, 0), (txt(t, "system\n"), 0), (txt(t, "You are terse."), 0), (end, 0), (txt(t, "\n"), 0),
        (start, 0), (txt(t, "user\n"), 0), (txt(t, "What is 6*7? Use python."), 0), (end, 0), (txt(t, "\n"), 0),
        (start, 0), (txt(t, "assistant\n"), 0),
        (txt(t, "Let me compute it."), 1),
        (S("<|python_start|>"), 1), (txt(t, "print(6*7)"), 1), (S("<|python_end|>"), 1),
        (S("<|output_start|>"), 0), (txt(t, "42\n"), 0), (S("<|output_end|>"), 0),
        (txt(t, "The answer is 42."), 1),
        (end, 1), (txt(t, "\n"), 0),
    )
    assert (ids, mask) == want
    assert t.decode(ids) == (
        "<|bos|><|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nWhat is 6*7? Use python.<|im_end|>\n"
        "<|im_start|>assistant\nLet me compute it.<|python_start|>print(6*7)<|python_end|>"
        "<|output_start|>42\n<|output_end|>The answer is 42.<|im_end|>\n"
    )
    prompt = t.render_for_completion(TOOL_CONVERSATION)
    head, _ = t.render_conversation(TOOL_CONVERSATION["messages"][:-1])
    assert prompt == head + [start] + txt(t, "assistant\n")


@pytest.mark.parametrize("name", ["nanochat", "chatml"])
def test_templates_share_mask_semantics(tok, chatml, name):
    """Whatever the layout, the supervised tokens are exactly what the assistant writes."""
    t = {"nanochat": tok, "chatml": chatml}[name]
    tpl = t.template
    msgs = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "a1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": [
            {"type": "python", "text": "f()"}, {"type": "python_output", "text": "out"}, {"type": "text", "text": "a2"},
        ]},
    ]
    ids, mask = t.render_conversation(msgs)
    runs, cur = [], []
    for i, m in zip(ids, mask):
        if m:
            cur.append(i)
        elif cur:
            runs.append(t.decode(cur))
            cur = []
    if cur:
        runs.append(t.decode(cur))
    assert runs == [
        "a1" + tpl.assistant_end,
        tpl.python_start + "f()" + tpl.python_end,
        "a2" + tpl.assistant_end,
    ]
    # and the unsupervised tokens hold every user's and the tool's text
    unsup = t.decode([i for i, m in zip(ids, mask) if not m])
    for piece in ("q1", "q2", tpl.output_start + "out" + tpl.output_end, tpl.assistant_start):
        assert piece in unsup


def test_chat_template_validation():
    base = NANOCHAT.to_dict()
    assert ChatTemplate.from_dict(base) == NANOCHAT
    assert ChatTemplate.from_dict(CHATML.to_dict()) == CHATML
    with pytest.raises(ValueError, match="assistant_end must not be empty"):
        ChatTemplate(**{**base, "assistant_end": ""})
    with pytest.raises(ValueError, match="appears in no delimiter"):
        ChatTemplate(**{**base, "special_tokens": (*NANOCHAT.special_tokens, "<|extra|>")})
    with pytest.raises(ValueError, match="both"):
        ChatTemplate(**{**base, "system_start": "<|user_start|>"})
    with pytest.raises(ValueError, match="duplicates"):
        ChatTemplate(**{**base, "special_tokens": ("<|user_start|>", "<|user_start|>")})
    with pytest.raises(TypeError):
        ChatTemplate(**{**base, "user_end": 3})
    with pytest.raises(ValueError, match="unknown ChatTemplate fields"):
        ChatTemplate.from_dict({**base, "colour": "red"})
    with pytest.raises(Exception):  # frozen
        NANOCHAT.user_start = "x"  # type: ignore[misc]
    # list special tokens become a tuple (so templates stay hashable)
    assert isinstance(ChatTemplate(**{**base, "special_tokens": list(NANOCHAT.special_tokens)}).special_tokens, tuple)
    hash(NANOCHAT)


def test_custom_template_system_block(tok):
    """A custom template built from nanochat's tokens, with a system block of its own."""
    tpl = ChatTemplate(**{**NANOCHAT.to_dict(), "name": "sys", "system_start": "<|user_start|>[system] ",
                          "system_end": "<|user_end|>", "after_assistant": "\n"})
    t = Tokenizer(tok.enc, template=tpl)
    msgs = [SYS, U, A]
    S = lambda n: sp(t, n)  # noqa: E731
    want = build(
        (S("<|bos|>"), 0),
        (S("<|user_start|>"), 0), (txt(t, "[system] "), 0), (txt(t, "s"), 0), (S("<|user_end|>"), 0),
        (S("<|user_start|>"), 0), (txt(t, "u"), 0), (S("<|user_end|>"), 0),
        (S("<|assistant_start|>"), 0), (txt(t, "a"), 1), (S("<|assistant_end|>"), 1), (txt(t, "\n"), 0),
    )
    assert t.render_conversation(msgs) == want


# ----------------------------------------------------------------------------------------
# visualize_tokenization
# ----------------------------------------------------------------------------------------


def test_visualize_plain(tok):
    conv = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]
    ids, mask = tok.render_conversation(conv)
    pieces = [tok.id_to_token(i) for i in ids]
    n_user = len(txt(tok, "Hi"))
    # unsupervised tokens as they are, the supervised run inside [[ ]], all joined by |
    supervised_run = "|".join(pieces[4 + n_user :])
    want = "|".join(pieces[: 4 + n_user]) + "|[[" + supervised_run + "]]"
    assert tok.visualize_tokenization(ids, mask, color=False) == want
    assert "\033[" not in want
    with_ids = tok.visualize_tokenization(ids, mask, with_token_id=True, color=False)
    assert with_ids.split("|[[")[0].startswith(f"<|bos|>({ids[0]})")
    assert with_ids.endswith(f"<|assistant_end|>({ids[-1]})]]")
    # two supervised runs (a tool output between them) give two [[ ]] groups
    ids, mask = tok.render_conversation(TOOL_CONVERSATION)
    out = tok.visualize_tokenization(ids, mask, color=False)
    assert out.count("[[") == out.count("]]") == 2
    assert re.search(r"\]\]\|<\|output_start\|>\|", out)
    with pytest.raises(ValueError, match="differ in length"):
        tok.visualize_tokenization(ids, mask[:-1])


def test_visualize_color(tok):
    ids, mask = tok.render_conversation([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}])
    out = tok.visualize_tokenization(ids, mask, with_token_id=True, color=True)
    green, red, gray = "\033[92m", "\033[91m", "\033[90m"
    assert out.count(green) == sum(mask)
    assert out.count(red) == len(mask) - sum(mask)
    assert out.count(gray) == len(ids)
    assert "[[" not in out
    assert out.startswith(f"{red}<|bos|>\033[0m{gray}({ids[0]})\033[0m|")


# ----------------------------------------------------------------------------------------
# from_pretrained
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cl100k_tok():
    from conftest import vocab_cache_path

    path = vocab_cache_path("cl100k_base")
    if not os.path.exists(path):
        pytest.skip(f"cl100k_base vocabulary not cached at {path} (set TIKTOKEN_CACHE_DIR)")
    try:
        return Tokenizer.from_pretrained("cl100k_base")
    except tokenmill.VocabularyNotAvailableError as e:
        pytest.skip(f"cl100k_base vocabulary not available: {e}")


def test_from_pretrained_cl100k(cl100k_tok):
    t = cl100k_tok
    enc = tokenmill.get_encoding("cl100k_base")
    assert t.enc is enc
    # nanochat: BOS is <|endoftext|> for tiktoken encodings
    assert t.get_bos_token_id() == enc._special_tokens["<|endoftext|>"]
    assert t.get_vocab_size() == enc.n_vocab
    assert t.get_special_tokens() == set(enc._special_tokens)
    text = "Hello world! 1234 naïve 🌍"
    assert t.encode(text, prepend="<|endoftext|>") == [t.get_bos_token_id()] + enc.encode_ordinary(text)
    assert t.template is None
    with pytest.raises(ValueError, match="no chat template"):
        t.render_conversation([U, A])
    with pytest.raises(ValueError, match="lacks"):
        Tokenizer.from_pretrained("cl100k_base", template=NANOCHAT)
    tb = t.token_bytes()
    assert len(tb) == enc.n_vocab
    gaps = set(range(enc.n_vocab)) - set(enc._mergeable_ranks.values()) - set(enc._special_tokens.values())
    assert gaps and all(tb[i] == 0 for i in gaps)
    assert sum(tb[i] for i in enc.encode_ordinary(text)) == len(text.encode())


def test_from_pretrained_with_added_template_tokens(cl100k_tok):
    base = cl100k_tok.enc
    t = Tokenizer.from_pretrained("cl100k_base", template=NANOCHAT, add_template_tokens=True)
    first_new = base.max_token_value + 1
    assert [t.encode_special(s) for s in NANOCHAT.special_tokens] == list(
        range(first_new, first_new + len(NANOCHAT.special_tokens))
    )
    text = "existing ids do not move"
    assert t.encode(text) == base.encode_ordinary(text)
    # BOS stays <|endoftext|>, as nanochat does for pretrained encodings
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    ids, mask = t.render_conversation(msgs)
    assert ids[0] == base._special_tokens["<|endoftext|>"]
    assert (ids, mask) == nanochat_expected(t, msgs)


# ----------------------------------------------------------------------------------------
# parity with nanochat (rustbpe + tiktoken), derived from nanochat's documented rules
# ----------------------------------------------------------------------------------------


def test_nanochat_parity(docs, tok):
    """nanochat trains with rustbpe on ``vocab_size - 9`` tokens, builds a tiktoken Encoding
    with its nine special tokens appended in order, and renders with tiktoken's
    ``encode_ordinary``. Rebuild that encoding here and derive the expected renderings with
    tiktoken, by nanochat's rules: BOS; user turns ``<|user_start|> text <|user_end|>``;
    a leading system message joined to the first user text by a blank line; assistant turns
    ``<|assistant_start|> ... <|assistant_end|>``, with tool calls ``<|python_start|> code
    <|python_end|>`` and outputs ``<|output_start|> out <|output_end|>``; mask 1 exactly on
    assistant text, tool calls with their delimiters and ``<|assistant_end|>``."""
    rustbpe = pytest.importorskip("rustbpe")
    tiktoken = pytest.importorskip("tiktoken")
    trainer = rustbpe.Tokenizer()
    trainer.train_from_iterator(iter(docs), VOCAB - len(SPECIAL_TOKENS), pattern=NANOCHAT_PATTERN)
    ranks = {bytes(k): v for k, v in trainer.get_mergeable_ranks()}
    tt = tiktoken.Encoding(
        name="rustbpe",
        pat_str=trainer.get_pattern(),
        mergeable_ranks=ranks,
        special_tokens={s: len(ranks) + i for i, s in enumerate(SPECIAL_TOKENS)},
    )
    assert tok.enc._mergeable_ranks == ranks
    assert tok.enc._special_tokens == tt._special_tokens

    T = lambda s: tt.encode_ordinary(s)  # noqa: E731
    S = lambda s: [tt.encode_single_token(s)]  # noqa: E731

    # 1. system + user + plain assistant
    conv1 = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "Hello, how are you?"},
        {"role": "assistant", "content": "Fine, thanks."},
    ]
    ids1 = S("<|bos|>") + S("<|user_start|>") + T("sys\n\nHello, how are you?") + S("<|user_end|>")
    ids1 += S("<|assistant_start|>")
    mask1 = [0] * len(ids1)
    sup = T("Fine, thanks.") + S("<|assistant_end|>")
    ids1 += sup
    mask1 += [1] * len(sup)

    # 2. tool use, then a second round that ends with the user
    conv2 = [
        {"role": "user", "content": "2**10?"},
        {"role": "assistant", "content": [
            {"type": "python", "text": "2**10"},
            {"type": "python_output", "text": "1024"},
            {"type": "text", "text": "It is 1024."},
        ]},
        {"role": "user", "content": "thanks"},
    ]
    parts2 = [
        (S("<|bos|>") + S("<|user_start|>") + T("2**10?") + S("<|user_end|>") + S("<|assistant_start|>"), 0),
        (S("<|python_start|>") + T("2**10") + S("<|python_end|>"), 1),
        (S("<|output_start|>") + T("1024") + S("<|output_end|>"), 0),
        (T("It is 1024.") + S("<|assistant_end|>"), 1),
        (S("<|user_start|>") + T("thanks") + S("<|user_end|>"), 0),
    ]
    ids2 = [i for p, _ in parts2 for i in p]
    mask2 = [m for p, m in parts2 for _ in p]

    for conv, ids, mask in ((conv1, ids1, mask1), (conv2, ids2, mask2)):
        assert tok.render_conversation({"messages": conv}) == (ids, mask)
        assert tok.render_conversation({"messages": conv}, max_tokens=7) == (ids[:7], mask[:7])
    # render_for_completion: drop the last (assistant) message, append <|assistant_start|>
    assert tok.render_for_completion({"messages": conv1}) == ids1[: ids1.index(S("<|assistant_start|>")[0]) + 1]
