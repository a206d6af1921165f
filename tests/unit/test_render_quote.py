"""Per-format quoting: sh words read back by a real sh, systemd words by a reference
reading of systemd's rules (specifiers, C-escaped double quotes, `$$`), Compose `$$`."""

from __future__ import annotations

import re
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from deskside.render import quote

TEXT = st.text(
    alphabet=st.characters(blacklist_categories=["Cs"], blacklist_characters="\x00"),
    max_size=40,
)
WORD = st.text(
    alphabet=st.characters(
        blacklist_categories=["Cs", "Zs", "Zl", "Zp", "Cc"], blacklist_characters="\x00"
    ),
    min_size=1,
    max_size=40,
)


def sh_words(script_words: str) -> list[str]:
    done = subprocess.run(
        ["sh", "-c", f"printf '%s\\0' {script_words}"],
        capture_output=True,
        check=True,
        env={"PATH": "/usr/bin:/bin", "HOME": "/nonexistent"},
    )
    return done.stdout.decode().split("\0")[:-1]


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXT, min_size=1, max_size=4))
def test_sh_words_read_back_exactly(values: list[str]) -> None:
    assert sh_words(" ".join(quote.sh(v) for v in values)) == values


def test_sh_quotes_what_shellcheck_or_sh_would_misread() -> None:
    assert quote.sh("plain-1.2") == "plain-1.2"
    for value in ("=a", "~/x", "a b", "", "$x", "a*", "#c", "it's"):
        assert quote.sh(value).startswith("'"), value


@settings(max_examples=200, deadline=None)
@given(TEXT)
def test_env_file_value_is_exact_for_sh_or_refused(value: str) -> None:
    spelled = quote.env_file_value(value)
    if any(c in value for c in "'\\\r\n"):
        assert spelled is None
        return
    assert spelled is not None
    # Compose reads single-quoted values literally and unquoted ones as the bare word;
    # nothing it would interpolate ($) or cut (' #') is left unquoted
    if not spelled.startswith("'"):
        assert re.fullmatch(r"[A-Za-z0-9_./:,+@%^-]*", spelled)


@settings(max_examples=40, deadline=None)
@given(TEXT.filter(lambda v: not any(c in v for c in "'\\\r\n")))
def test_env_file_value_read_back_by_sh(value: str) -> None:
    spelled = quote.env_file_value(value)
    assert spelled is not None
    done = subprocess.run(
        ["sh", "-c", f"X={spelled}\nprintf '%s' \"$X\""],
        capture_output=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.decode() == value


def systemd_split(line: str) -> list[str]:
    """systemd's reading of a command line, for the subset deskside writes: specifiers
    (only %% allowed), words split on blanks, double quotes with C escapes, then $$."""
    assert re.search(r"%[^%]", line.replace("%%", "")) is None, "unescaped specifier"
    line = line.replace("%%", "%")
    words: list[str] = []
    i = 0
    while i < len(line):
        if line[i] == " ":
            i += 1
            continue
        word = ""
        if line[i] == '"':
            i += 1
            while line[i] != '"':
                if line[i] == "\\":
                    i += 1
                word += line[i]
                i += 1
            i += 1
            assert i == len(line) or line[i] == " ", "a quote must end a word"
        else:
            while i < len(line) and line[i] != " ":
                assert line[i] not in "\"'\\", "quote or escape inside a bare word"
                word += line[i]
                i += 1
        words.append(word)
    out = []
    for word in words:
        assert re.search(r"\$(?!\$)", word.replace("$$", "")) is None, "unescaped $"
        out.append(word.replace("$$", "$"))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(WORD, min_size=1, max_size=4))
def test_systemd_words_read_back_exactly(values: list[str]) -> None:
    assert systemd_split(quote.systemd_command(values)) == values


def test_systemd_word_examples() -> None:
    assert quote.systemd_word("/opt/deskside/x") == "/opt/deskside/x"
    assert quote.systemd_word("/a%h$HOME") == '"/a%%h$$HOME"'
    assert quote.systemd_word('a"b\\c') == '"a\\"b\\\\c"'


def test_compose_string_escapes_every_dollar() -> None:
    assert quote.compose_string("a$b${c}$$") == "a$$b$${c}$$$$"
