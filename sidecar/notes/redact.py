"""Secret redaction (pure): what an agent writes to memory never carries a live credential.

Each match is replaced by a visible ``[REDACTED:kind]`` marker, so the note still says that a
secret was there. Patterns aim at formats with a recognisable shape (key prefixes, PEM blocks,
URL credentials, ``password = ...`` assignments) so ordinary prose survives untouched.
Imports nothing of the project.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    kind: str
    pattern: re.Pattern[str]
    group: int = 0  # the part of the match that is the secret (0: all of it)
    # A test of the secret part, done in code: a lookahead in the pattern scanned the rest of the
    # run at every try (quadratic: 100 kB of "secret:" took 16 s).
    accept: Callable[[str], bool] | None = None


_BREAK = re.compile(r"\r\n|\r|\n")
# A password-like value holds a digit or a symbol ("password: changeme" is prose, not a secret).
_SECRETISH = re.compile(r"[0-9_\-+/=!@#$%^&*]")
# Markdown emphasis and code marks around a key or its value: "**Password**: x", "`api_key`: x".
_MARKS = r"[*_`]{0,2}"
# A few words between the key and its colon, as people write them ("the WiFi password is: …",
# "das WLAN-Passwort lautet: …", "Kennwort für das NAS: …"): small words and the usual devices only,
# so "API key rotation schedule: 2026-12-01" keeps its date (a memory write removes text for good).
_SAID = (
    r"(?:\s+(?:is|was|for|of|the|my|our|to|on|ist|war|lautet|für|fuer|vom|von|des|der|die|das|den|"
    r"dem|zum|zur|am|im|mein|meine|meines|unser|unsere|wlan|wifi|wi-fi|nas|router|server|admin|root|"
    r"account|konto|e-mail|email|mail)){0,4}"
    # and what the secret is for, in up to four words of any kind, before its verb or colon ("The
    # PIN for the front door is 4711", "Password for the Netflix account: Sommer2024!"): only the
    # small words above passed, so a door or a service named left the PIN in clear
    r"(?:\s+(?:for|für|fuer)(?:\s+[^\W\d_][\w'’-]*){1,4})?"
)

# Names, not secrets, of any length: versions ("v1.2.3", "2.4.1-rc1", "3.0.0+build.5"), dates and
# times ("2026-12-01", "2026-12-01T10:00") and processor architectures ("x86_64", "aarch64",
# "armv7l", "i686", "win32", "ppc64le", "x86_64-linux-gnu"): after "secret:" or "is" they were
# redacted for good. Each is a whole value of that shape, its tails named: a value that only
# starts like one ("12.34.56-Geheim", "win32-Secret", "x86_Pass", "1.2.3-abc9") is a secret.
_NAMES = (
    r"[vV]?\d+(?:\.\d+)+[^\W_]*"
    r"(?:[-~.](?i:rc|alpha|beta|pre|preview|dev|snapshot|post|final|lts)\.?\d*)?(?:\+(?:build\.?)?\d+)?"
    r"|\d{4}-\d\d-\d\d(?:[T ]\d\d:\d\d(?::\d\d)?)?"
    r"|(?i:x86(?:[-_]64)?|x64|amd64|arm64(?:e|ec)?|aarch64(?:_be)?|armv\d+[a-z]*|i[3-6]86|win(?:32|64)"
    r"|ppc64(?:le)?|s390x|riscv(?:32|64)|mips(?:64)?(?:el|le)?|loongarch64|sparc64)"
    r"(?:-(?:unknown|pc|apple|linux|gnu|gnueabi|gnueabihf|musl|musleabihf|msvc|windows|darwin|android"
    r"|androideabi|eabi|eabihf|none|w64|mingw32|elf|freebsd))*"
)
_NAMED = re.compile(_NAMES)
# Shapes of words, not secrets, that hold a digit or a symbol; a write removes text for good, so a
# value of these shapes stays: letters joined by - _ . ("single-use", "hashed_pw", "E-Mail-basiert"),
# a code or a word with one hyphen and a word ("2FA-protected", "sha256-hashed", "1Password-managed",
# "ask-bob"), digits then letters ("8-chars", "24h", "1Password"), letters then digits after a
# hyphen ("SHA-256"), dotted names ("settings.API_KEY"), addresses
# ("https://vault.example.com/item/42"), the names of hashes and encodings ("sha256", "AES256"),
# and the names above.
_WORDISH = re.compile(
    r"[^\W\d_]+(?:[-_.][^\W\d_]+)+"
    r"|[^\W_]+-[^\W\d_]{3,}"
    r"|\d+[-_.]?[^\W\d_]+"
    r"|[^\W\d_]+-\d+"
    r"|[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+"
    r"|[a-zA-Z][a-zA-Z0-9+.-]*://\S*"
    r"|(?i:sha|md|aes|rsa|base|utf|ipv|crc|pbkdf|argon|ed|wpa)\d+[^\W_]*"
    r"|" + _NAMES
)
_DIGIT = re.compile(r"\d")
_LETTER = re.compile(r"[^\W\d_]")


def _short_value_is_secret(value: str) -> bool:
    """A value after a colon: 8 or more characters, or 6-7 with a digit and no word's shape
    ("hunter2", not "8-chars"); never a version, a date or an architecture ("secret: x86_64")."""
    if _NAMED.fullmatch(value):
        return False
    return len(value) >= 8 or (_DIGIT.search(value) is not None and not _WORDISH.fullmatch(value))


def _said_value_is_secret(value: str) -> bool:
    """A value after "is"/"ist"/"lautet" without a colon, where prose and code go on with words
    ("the password is single-use", "if secret is DEFAULT_SECRET:"): a digit and a letter, and no
    word's shape ("Sommer2024!", "hunter22", "c0rrect-horse-battery")."""
    return (
        _DIGIT.search(value) is not None
        and _LETTER.search(value) is not None
        and "[REDACTED:" not in value
        and not _WORDISH.fullmatch(value)
    )


# The words that name a secret, English and German.
_KEYS = (
    r"(?:password|passwd|pwd|pw|passphrase|secret|client_secret|api[_ -]?key|"
    r"access[_-]?token|auth[_-]?token|secret[_-]?key|private[_-]?key|"
    r"passw(?:o|ö|oe)rt|kennwort|(?:wlan|wifi|api|netzwerk)[_ -]?schl(?:ü|ue)ssel)\b"
)


# A PIN: digits only ("PIN: 4711", "die PIN lautet 4711"), named by these words alone ("pin" is
# also a connector's: "the LED pin is 13", "Data pin: GPIO17" stay, having fewer digits or letters).
# A name of any kind that ends in PIN holds one ("SIM_PIN = 1234", "sim_pin: 1234", "BANK_PIN"),
# also when it says it is a code ("SIM_PIN_CODE"): a connector's constant with a PIN's digits
# ("LED_PIN = 1023") is redacted too, a false positive being cheaper than a PIN left in clear.
_PIN_KEYS = r"(?:pin|puk|geheimzahl)(?:[-_ ]?(?:code|nummer|number))?\b"
# A PIN's digits, in one run or in groups parted by single spaces as cards print them ("1234
# 5678": only its first group was redacted); a date's hyphens are no groups ("PIN: 2025-01-02").
_PIN_DIGITS = r"(\d{2,4}(?: \d{2,4}){1,3}|\d{4,8})"
# Digits only as a password or PIN after "is"/"ist"/"lautet": 4 or more of them (or groups parted
# by spaces: "1234 5678") ending the clause ("the PIN is 4711", "Passwort ist 12345678."); "the
# password is 12 characters long", "The secret is 42.", "Das Passwort ist 2026 abgelaufen" stay.
# A year ending the clause is taken as the value it is said to be ("Das Passwort war 2023"): a
# year and a password of four digits cannot be told apart there, and a password left in clear
# costs more than a year redacted.
_DIGITS_SAID = (
    r"\s+(?:is|was|ist|war|lautet)\s+"
    + _MARKS
    + r"[\"']?(?!\[REDACTED:)(\d{2,4}(?: \d{2,4})+|\d{4,})(?![\w-])"
    + r"(?=[\"'`*_]*(?:[.,;!?)]|[ \t]*$|\s+(?:and|und|or|oder|but|aber)\b))"
)
# A login written as "user / password" (spaces around the slash) or "user:password" right after a
# word for it ("NAS login admin / Tr0ub4dor&3", "Zugang: admin:Sommer2024!"). Those words head
# sign-up links, paths, rooms and "service/user" pairs as often ("Anmeldung: https://eveeno.com/
# anmeldung2025", "credentials: ~/.aws/credentials2", "Login: Linux/Ubuntu22.04", "Login:
# Steam/anna_gamer99"), and a write removes text for good: the user is a plain name (a letter
# first, no URL's scheme: the colon is not followed by "/"), and the password must hold a digit, a
# letter and a symbol no name or address is made of (see _login_secret).
_LOGIN = (
    r"(?i)(?<![a-z0-9])(?:login|log-in|logon|sign-in|credentials|creds|username|zugang(?:sdaten)?|"
    r"anmeldedaten|anmeldung|benutzername)\b"
    + _MARKS
    + r"[ \t]*:?[ \t]*"
    + _MARKS
    + r"[a-z][\w.@+-]{0,63}"
    + _MARKS
    + r"(?:[ \t]+/[ \t]+|:(?![/\\]))"
    + _MARKS
    + r"[\"']?(?!\[REDACTED:)([^\s\"'`]{3,}[^\s\"'`.,;:)])"
)
# A password's symbol: not one of names, paths and addresses ("anna_gamer99", "Ubuntu22.04",
# "srv-backup-01", "anna.mueller@firma2.de"; "@" counts outside an address: "P@ssw0rd").
_LOGIN_SYMBOL = re.compile(r"[!#$%&*+=?^~§€<>@]")
_EMAIL = re.compile(r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+")


def _login_secret(value: str) -> bool:
    """A password beside a user name: a digit, a letter and a symbol (see _LOGIN), or digits
    only, six or more ("Login: admin / 12345678" stayed in clear): no system, room or release
    is named by digits alone after a user name and a slash."""
    if value.isdigit():
        return len(value) >= 6
    return (
        _said_value_is_secret(value)
        and _LOGIN_SYMBOL.search(value) is not None
        and "/" not in value  # a path or an address, never a value to remove
        and _EMAIL.fullmatch(value) is None
    )


def _after_colon(kind: str, keys: str, value: str, accept: Callable[[str], bool] | None = None) -> Rule:
    """A secret named by ``keys`` (a few words may follow, see _SAID), then a colon or an equals
    sign and ``value`` (its one group), marks and quotes allowed around both."""
    return Rule(
        kind,
        re.compile(
            r"(?i)(?<![a-z0-9])"
            + keys
            + _MARKS
            + _SAID
            + r"[\"']?\s*[:=]"
            + _MARKS
            + r"\s*"
            + _MARKS
            + r"[\"']?(?!\[REDACTED:)"
            + value
        ),
        1,
        accept,
    )


RULES: tuple[Rule, ...] = (
    Rule(
        "private_key",
        re.compile(
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----.*?"
            r"(?:-----END (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----|\Z)",
            re.S,
        ),
    ),
    Rule("aws_access_key", re.compile(r"\b(?:AKIA|ASIA|AGPA|AIDA|AROA)[0-9A-Z]{16}\b")),
    Rule(
        "aws_secret_key",
        re.compile(r"(?i)\baws_?secret_?access_?key\b[\"']?\s*[:=]\s*[\"']?([A-Za-z0-9/+=]{40})"),
        1,
    ),
    Rule("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{50,})\b")),
    Rule("gitlab_token", re.compile(r"\bglpat-[A-Za-z0-9_-]{20,}\b")),
    Rule("anthropic_key", re.compile(r"\bsk-ant-[A-Za-z0-9_-]{20,}")),
    Rule("openai_key", re.compile(r"\bsk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}")),
    Rule("stripe_key", re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{16,}\b")),
    Rule("slack_token", re.compile(r"\bxox[abposr]-[A-Za-z0-9-]{10,}\b")),
    Rule("slack_webhook", re.compile(r"https://hooks\.slack\.com/services/[A-Za-z0-9/]{20,}")),
    Rule("google_api_key", re.compile(r"\bAIza[0-9A-Za-z_-]{35}\b")),
    Rule("huggingface_token", re.compile(r"\bhf_[A-Za-z0-9]{30,}\b")),
    Rule("npm_token", re.compile(r"\bnpm_[A-Za-z0-9]{36}\b")),
    # Starts where a run of token characters starts: from every "-eyJ" inside one, the match
    # scanned the rest of the run (quadratic).
    Rule(
        "jwt", re.compile(r"(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}")
    ),
    Rule("bearer_token", re.compile(r"(?i)\bBearer\s+([A-Za-z0-9._~+/-]{16,}=*)"), 1),
    Rule(
        "basic_auth",
        re.compile(r"(?i)\bAuthorization:\s*Basic\s+([A-Za-z0-9+/]{12,}=*)"),
        1,
    ),
    # scheme://user:password@host: only the password goes.
    Rule("url_password", re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]{1,20}://[^\s:/@]+:([^\s@/]{3,})@[^\s/]+"), 1),
    # password = "..." / api_key: ... / **Password**: ... / "Kennwort für das NAS: ..."; the value
    # must look like a secret (6+ characters, no spaces, a digit or a symbol among them:
    # "password: hunter2" reached disk in clear with 8 asked for).
    _after_colon(
        "password",
        _KEYS,
        r"([^\s\"'`]{6,})",
        # a value an earlier rule redacted part of (a URL's password after "pw:") keeps the rest
        lambda value: (
            _SECRETISH.search(value) is not None
            and "[REDACTED:" not in value
            and _short_value_is_secret(value)
        ),
    ),
    # Without a colon: "the wifi password is Sommer2024!", "das WLAN-Passwort lautet hunter22".
    # The value is the word right after the verb (a full stop ending the sentence is not part of
    # it) and must look like a secret (see _said_value_is_secret), so "the password is 12
    # characters long", "the password is single-use" and "the API key is in 1Password" stay.
    Rule(
        "password",
        re.compile(
            r"(?i)(?<![a-z0-9])"
            + _KEYS
            + _MARKS
            + _SAID
            + r"\s+(?:is|was|ist|war|lautet)\s+"
            + _MARKS
            + r"[\"']?(?!\[REDACTED:)([^\s\"'`]{5,}[^\s\"'`.,;:)])"
        ),
        1,
        accept=_said_value_is_secret,
    ),
    Rule("password", re.compile(r"(?i)(?<![a-z0-9])" + _KEYS + _MARKS + _SAID + _DIGITS_SAID, re.M), 1),
    Rule("pin", re.compile(r"(?i)(?<![a-z0-9])" + _PIN_KEYS + _MARKS + _SAID + _DIGITS_SAID, re.M), 1),
    # "PIN: 4711", "PIN-Code = 123456", "PIN: 1234 5678" (4 to 8 digits, up to 12 in groups; a
    # password after a colon is the rule above)
    _after_colon(
        "pin",
        _PIN_KEYS,
        _PIN_DIGITS + r"(?![\w.,:/-]*\w)",
        lambda value: 4 <= len(value.replace(" ", "")) <= 12,
    ),
    Rule("password", re.compile(_LOGIN), 1, accept=_login_secret),
)


def _luhn(digits: str) -> bool:
    total = 0
    for i, ch in enumerate(reversed(digits)):
        d = int(ch) * (2 if i % 2 else 1)
        total += d - 9 if d > 9 else d
    return total % 10 == 0


_CARD = re.compile(r"(?<![\d-])(?:\d[ -]?){12,18}\d(?![\d-])")

# Beyond what memory writes redact, text shown to agents from the user's own notes also hides
# payment card numbers (Luhn-checked, so order numbers and phone numbers stay) and the password
# of connection strings in key=value form (ADO/ODBC/JDBC: "Server=db;Password=...").
MASK_RULES: tuple[Rule, ...] = (
    *RULES,
    Rule(
        "connection_string",
        re.compile(r"(?i)(?:^|;)\s*(?:password|pwd)\s*=\s*(?!\[REDACTED:)([^;\s][^;]*)"),
        1,
    ),
)


# The issuer prefixes of the card networks (Visa, Mastercard, Amex, Discover, JCB, Diners, UnionPay,
# Maestro): a write removes text for good, so beside Luhn (which one number in ten passes) the number
# must start as a card does.
_ISSUER = re.compile(r"4|5[1-5]|2[2-7]|3[47]|3[0689]|35|6(?:011|5|4[4-9]|2)|5[06-9]|6")


def _cards(text: str, counts: dict[str, int], issuer: bool) -> str:
    def card(m: re.Match[str]) -> str:
        digits = re.sub(r"\D", "", m.group(0))
        if not 13 <= len(digits) <= 19 or not _luhn(digits) or (issuer and not _ISSUER.match(digits)):
            return m.group(0)
        counts["card_number"] = counts.get("card_number", 0) + 1
        return "[REDACTED:card_number]"

    return _CARD.sub(card, text)


def mask(text: str, *, keep_lines: bool = False) -> tuple[str, dict[str, int]]:
    """What an agent may read of a note: :data:`MASK_RULES` and card numbers replaced by markers.
    ``keep_lines``: a secret over several lines (a private key) leaves as many line breaks after
    its marker, so line numbers stay those of the file (a range of lines is cut after masking)."""
    text, counts = redact(text, MASK_RULES, keep_lines=keep_lines)
    return _cards(text, counts, issuer=False), counts


def redact_written(text: str) -> tuple[str, dict[str, int]]:
    """What a memory write keeps of ``text``: :data:`RULES` and card numbers (Luhn and an issuer's
    prefix) replaced by markers. A card number an agent noted reached disk in clear."""
    text, counts = redact(text)
    return _cards(text, counts, issuer=True), counts


def redact_entry(key: str, value: str) -> tuple[str, dict[str, int]]:
    """A front matter value as a memory write keeps it, read with its key: ``password:
    hunter2hunter2`` in front matter reached disk in clear (the value alone is no secret's
    shape; the same line in the text was redacted)."""
    head = f"{key}: "
    text, counts = redact_written(head + value)
    return (text[len(head) :], counts) if text.startswith(head) else redact_written(value)


@functools.lru_cache(maxsize=8192)  # titles and headings repeat in every hit of their note
def masked_line(text: str) -> str:
    """``text`` (a title, heading, description) as :func:`mask` shows it: a secret in a note's
    title or a heading reached agents in every hit's title and section line unmasked."""
    return mask(text)[0] if text else text


def redact(
    text: str, rules: tuple[Rule, ...] = RULES, *, keep_lines: bool = False
) -> tuple[str, dict[str, int]]:
    """Replace every secret by ``[REDACTED:kind]``; returns the text and counts per kind
    (``keep_lines``: see :func:`mask`)."""
    counts: dict[str, int] = {}
    for rule in rules:

        def repl(m: re.Match[str], rule: Rule = rule) -> str:
            if rule.accept is not None and not rule.accept(m.group(rule.group)):
                return m.group(0)
            counts[rule.kind] = counts.get(rule.kind, 0) + 1
            marker = f"[REDACTED:{rule.kind}]"
            if keep_lines:  # a line ends at \n, \r\n or \r, as notes' lines are counted
                marker += "\n" * len(_BREAK.findall(m.group(rule.group)))
            if rule.group == 0:
                return marker
            start, end = m.span(rule.group)
            return m.group(0)[: start - m.start()] + marker + m.group(0)[end - m.start() :]

        text = rule.pattern.sub(repl, text)
    return text, counts
