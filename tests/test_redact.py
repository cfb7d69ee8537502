"""Secret redaction: real-looking secrets are replaced, ordinary text survives byte for byte."""

from __future__ import annotations

import pytest

from sidecar.notes.redact import mask, redact, redact_entry, redact_written

PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDx4Xo2Yz8mBVx8lAX9QF3n6c3aN2x1k3m2W8QvQ2n8pAAAAJgW8d7xFvHe\n"
    "-----END OPENSSH PRIVATE KEY-----"
)

SECRETS = [
    (PEM, "private_key"),
    (
        "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo\n"
        "-----END RSA PRIVATE KEY-----",
        "private_key",
    ),
    ("aws key AKIAIOSFODNN7EXAMPLE in the env", "aws_access_key"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "aws_secret_key"),
    ("token ghp_1234567890abcdefghijABCDEFGHIJ123456 for CI", "github_token"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVW", "github_token"),
    ("glpat-abcdefghij1234567890", "gitlab_token"),
    ("OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuvwxyz0123456789", "openai_key"),
    ("key sk-ant-api03-abcdefghijklmnopqrstuvwxyz-0123456789", "anthropic_key"),
    ("stripe sk_live_51HabcdefghijklmnopqrstuV", "stripe_key"),
    ("slack xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "slack_token"),
    ("hook https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX", "slack_webhook"),
    ("maps AIzaSyA1234567890abcdefghijklmnopqrstuv", "google_api_key"),
    ("hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "huggingface_token"),
    ("curl -H 'Authorization: Bearer abcdef0123456789abcdef0123456789'", "bearer_token"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZDEyMw==", "basic_auth"),
    ("postgres://admin:S3cr3t-Passw0rd@db.example.com:5432/app", "url_password"),
    ("mongodb+srv://user:hunter22@cluster0.example.net/test", "url_password"),
    (
        "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U",
        "jwt",
    ),
    ("password: Tr0ub4dor&3", "password"),
    ('DB_PASSWORD="c0rrect-horse-battery"', "password"),
    ("api_key = 9f8e7d6c5b4a39281706f5e4d3c2b1a0", "password"),
    ("Passwort für das NAS: password=NasAdmin2026!", "password"),
    ("**Password**: Tr0ub4dor-horse-staple", "password"),  # Markdown emphasis around the key
    ("- **API key:** 9f8e7d6c5b4a39281706", "password"),
    ("`password`: `hunter2hunter2`", "password"),
    ("*secret*=**s3cr3t-value**", "password"),
    # German keys, and a few words between a key and its colon
    ("Kennwort: Mondlicht!Milch99", "password"),
    ("Passwort: Sternschnuppe!Saft11", "password"),
    ("PW: Nordlicht!Wasser55", "password"),
    ("Das WLAN Passwort ist: Sternschnuppe!Saft11", "password"),
    ("Kennwort für das NAS: Mondlicht!Milch99", "password"),
    ("WLAN-Schlüssel: 8472-1934-5521", "password"),
    ("the WiFi password is: Regenbogen!Tee77", "password"),
    # short values, and phrasings without a colon
    ("password: hunter2", "password"),
    ("The wifi password is Sommer2024!", "password"),
    ("Das WLAN-Passwort ist Sommer2024!", "password"),
    ("Das Passwort lautet hunter22.", "password"),
    ("the password is c0rrect-horse-battery", "password"),
    ("the password was hunter2.", "password"),
    ("password: abc123", "password"),
    # digits only after "is"/"ist"/"lautet", and PINs
    ("the PIN is 4711", "pin"),
    ("Die PIN lautet 4711.", "pin"),
    ("my PIN number is 123456!", "pin"),
    ("PIN: 4711", "pin"),
    ("**SIM-PIN-Code** = 0815", "pin"),
    ("Passwort ist 12345678", "password"),
    ("the password is 12345678, the user admin", "password"),
    ("Das WLAN-Passwort ist 4711 und der Name Fritz", "password"),
    # a login as "user / password" or "user:password"
    ("NAS login admin / Tr0ub4dor&3", "password"),
    ("Zugang: admin:Sommer2024!", "password"),
    ("Login: anna@firma.de / P@ssw0rd1", "password"),
    # a value that only starts like a version or an architecture
    ("password: 12.34.56-Geheim", "password"),
    ("password: win32-Secret", "password"),
    ("password: x86_Pass", "password"),
    ("the password is 1.2.3-abc9", "password"),
    ("Zugangsdaten **admin** / `Mondlicht!99`", "password"),
]


@pytest.mark.parametrize(("text", "kind"), SECRETS)
def test_secret_samples_are_redacted(text: str, kind: str) -> None:
    """Each real-looking secret is replaced by a [REDACTED:kind] marker."""
    clean, counts = redact(text)
    assert f"[REDACTED:{kind}]" in clean
    assert counts.get(kind, 0) >= 1


def test_a_short_or_colonless_password_written_to_memory_never_reaches_disk() -> None:
    """What a memory write keeps: "password: hunter2" (7 characters) and "The wifi password is
    Sommer2024!" (no colon) reached disk in clear; the sentence around them stays."""
    kept, counts = redact_written(
        "password: hunter2\nThe wifi password is Sommer2024!\nDer Router steht im Flur.\n"
    )
    assert "hunter2" not in kept and "Sommer2024" not in kept and counts == {"password": 2}
    assert kept.endswith("The wifi password is [REDACTED:password]\nDer Router steht im Flur.\n")


def test_secret_value_does_not_survive() -> None:
    """Not a single character run of the secret remains next to the marker."""
    clean, _ = redact("postgres://admin:S3cr3t-Passw0rd@db.example.com/app and " + PEM)
    assert "S3cr3t" not in clean and "b3BlbnNz" not in clean
    assert "postgres://admin:[REDACTED:url_password]@db.example.com/app" in clean


ORDINARY = [
    "# Backups\n\nWe back up the NAS with restic every night at 2am. The password manager holds the key.",
    "Die Kündigung muss schriftlich erfolgen; das Passwort steht im Tresor, nicht hier.",
    "Use scikit-learn (sk-learn) and the token bucket algorithm; a token economy is not a key.",
    "See https://example.com/docs/setup?x=1 and git@github.com:user/repo.git for the code.",
    "password: see the vault entry 'NAS admin'",
    "The API key is stored in 1Password under 'OpenAI'.",
    "```python\ndef check(password: str) -> bool:\n    return len(password) > 8\n```",
    "Termine: 2026-09-01, 14:30; Raum B-204; Tel. +49 30 1234567",
    "[[Projects/Boat|the boat]] needs #maintenance before May.",
    "SELECT * FROM users WHERE name = 'bob';",
    "ssh-keygen -t ed25519 -C 'me@example.com' creates a key pair; keep the private half secret.",
    "AKIA alone is just four letters, Bearer of good news, sk- prefix alone.",
    "**Password**: changeme is what the manual says; **secret**: the garden gate",
    "Passwort: mindestens acht Zeichen, ein Sonderzeichen",
    "Das Passwort ist: steht im Tresor",
    "API key rotation schedule: 2026-12-01",
    "Kennwort vergessen? Siehe: Zurücksetzen",
    # without a colon: what follows "is" is prose unless it looks like a secret
    "The password is 12 characters long.",
    "the WiFi password is printed on the router",
    "Das Passwort ist 16 Zeichen lang und wird alle 90 Tage geändert.",
    "The API key is in 1Password.",
    "the password is at least 8 characters; my password is too short",
    "the password was reset on 2026-12-01",
    "The password is 2FA-protected, das Passwort ist 24h-gültig.",
    "The secret is out. The secret is 42.",
    "Password: min. 8 chars; password: 8+ characters; pw: 1234",
    "password: changeme",
]


# Words and code after "is"/"ist"/"war" without a colon: a memory write lost them for good and
# search masked them in the user's own notes.
SAID_WORDS = [
    "the password is single-use",
    "the password is admin-only",
    "the password is company-wide",
    "the password is randomly-generated",
    "the password is system-generated",
    "the secret is write-only",
    "the secret is base64-encoded",
    "the password is bcrypt-hashed",
    "the password is sha256-hashed",
    "the password is 1Password-managed",
    "the password is user_supplied",
    "The API key is environment-specific.",
    "Das Passwort ist Admin-Sache.",
    "Das WLAN-Passwort ist Fritzbox-Standard",
    "Das Passwort war E-Mail-basiert",
    "Das Passwort ist zufällig-generiert",
    "if secret is DEFAULT_SECRET:",
    "assert api_key is settings.API_KEY",
    "assert password is hashed_pw",
    "the password was reset-by-admin",
    "the password is 1Password",
    "the password is https://vault.example.com/item/42",
    "the password is SHA256",
]
# A colon and a 6-7 character value: words, versions and algorithm names, not secrets.
SHORT_WORDS = ["password: 8-chars", "secret: v1.2.3", "password: SHA-256", "password: ask-bob", "pw: min-6"]


# Names, numbers and logins that are no secret, beside the key words or not: a memory write lost
# "x86_64" after "secret:" for good ("x86_64" has a digit and a letter and no word's shape).
NAMES_AND_NUMBERS = [
    "password: x86_64",
    "secret: aarch64",
    "the secret is x86_64",
    "the API key is arm64-only",
    "secret: x86_64-linux-gnu",
    "Build for x86_64, aarch64, armv7l and i686; the secret is amd64",
    "secret: 2.4.1-rc1",
    "the password is v3.2.1",
    "password: 3.0.0+build.5",
    "password: 2026-12-01",
    "the password is 2026-12-01T10:00",
    "the password was reset on 2026-12-01",
    "the password is valid until 31.12.2026",
    "Das Passwort ist 2026 abgelaufen",
    "the PIN was set on 01.02.2025",
    "PIN: 2025-01-02",
    "The PIN is 4 digits long, die PIN ist vierstellig",
    "the PIN is 1234 by default and must be changed",
    "the LED pin is 13; GPIO pin: 17; Data pin: GPIO17",
    "Raum 4711",
    "Treffen in Raum 4711, Tel. 0171 4711 0815",
    "Call +49 30 1234567 or 030-1234567 about the password reset",
    "ISBN 978-3-16-148410-0",
    "ISBN: 9783161484100",
    "Die PUK steht im Brief, Nummer 12345678",
    "login Google / OAuth2",
    "Login: bob / password",
    "login page / dashboard",
    "Zugang: Tür 3 / Raum 4711",
]


# What follows "Anmeldung", "Login", "Zugang", "credentials" in notes: sign-up links, paths, rooms,
# systems and "service/user" pairs. The login rule replaced them for good ("Anmeldung:
# https:[REDACTED:password]") and hid them from agents reading the user's own notes.
LOGIN_WORDS_NOT_SECRETS = [
    "Anmeldung: https://eveeno.com/anmeldung2025",
    "Zur Anmeldung: https://forms.gle/aBc123XyZ",
    "Login: https://portal.example.com/login?id=42",
    "Login: https://portal.example.com/login?id=42&x=1",
    "Login: http://fritz.box:8080/login2?a=1&b=2",
    "Zugang: https://nextcloud.example.de/s/aB3dE9",
    "credentials: ~/.aws/credentials2",
    "creds: vault/kv/prod/db01",
    "Anmeldung: Raum/B2.04",
    "Zugang: Keller/Abteil-12a",
    "Anmeldung: Kita/Gruppe-3b",
    "Login: Linux/Ubuntu22.04",
    "Login: Linux / Ubuntu22.04",
    "Login: Windows/Win11Pro",
    "Login: Windows / Win11Pro",
    "Anmeldung: iPhone/iOS17.2",
    "Login: Steam/anna_gamer99",
    "Login: Steam / anna_gamer99",
    "Login: anna@firma.de / Outlook365",
    "Login: Konto/DE89370400440532013000",
    "Anmeldung: 10:30h-12:00h",
    "Zugangsdaten: Server/srv-backup-01",
    "Username: anna / anna.mueller@firma2.de",
    "Login: root@srv01:/home/anna2",
    "Zugang: Server:/srv/data2",
    "Login: SSO/Okta-2FA!",
    "Login: admin | Rolle: Admin-2",
    "| Login | Anna | Room-12b |",
    "Anmeldung: Zoom|ID 845 2239 1180",
    "Anmeldung: bis 15.3./spätestens 20.3.",
    "Login: <user>/<pass1>",
    "Benutzername: Mustermann:Erika2",
]


@pytest.mark.parametrize("text", LOGIN_WORDS_NOT_SECRETS)
def test_links_paths_and_names_after_login_words_survive_a_write_and_the_mask(text: str) -> None:
    """A URL, a path, a room, a system or a user name after "Anmeldung"/"Login"/"Zugang" is no
    password: a memory write, a front matter entry and the search mask keep it."""
    assert redact_written(text) == (text, {})
    assert mask(text) == (text, {})
    key, _, value = text.partition(": ")
    if value:
        assert redact_entry(key.lower(), value) == (value, {})


@pytest.mark.parametrize("text", NAMES_AND_NUMBERS)
def test_names_and_numbers_survive_a_write(text: str) -> None:
    """Architectures, versions, dates, phone-like numbers, rooms, ISBNs and logins without a
    secret stay as written, however near a key word they stand."""
    assert redact_written(text) == (text, {})


def test_a_digit_only_password_pin_or_free_form_login_never_reaches_disk() -> None:
    """ "the PIN is 4711", "Passwort ist 12345678" and "NAS login admin / Tr0ub4dor&3" reached disk
    in clear through a memory write; the sentences around them stay."""
    kept, counts = redact_written(
        "the PIN is 4711\nPasswort ist 12345678.\nNAS login admin / Tr0ub4dor&3\nRaum 4711\n"
    )
    assert "4711\n" not in kept.split("Raum")[0] and "12345678" not in kept and "Tr0ub4dor" not in kept
    assert kept == (
        "the PIN is [REDACTED:pin]\nPasswort ist [REDACTED:password].\n"
        "NAS login admin / [REDACTED:password]\nRaum 4711\n"
    )
    assert counts == {"pin": 1, "password": 2}


@pytest.mark.parametrize("text", SAID_WORDS + SHORT_WORDS)
def test_words_after_a_key_survive_a_write_and_the_search_mask(text: str) -> None:
    """Only a value with a digit and a letter and no word's shape is a secret here."""
    from sidecar.notes.redact import mask

    assert redact_written(text) == (text, {})
    assert mask(text) == (text, {})


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_survives_untouched(text: str) -> None:
    """Notes about passwords, tokens and keys that contain none stay byte-identical."""
    assert redact(text) == (text, {})


def test_mask_adds_card_numbers_and_connection_strings() -> None:
    """What agents read of the user's notes also hides Luhn-valid card numbers and
    connection-string passwords; order and phone numbers stay."""
    from sidecar.notes.redact import mask

    text = (
        "visa 4111 1111 1111 1111, amex 3782-822463-10005, order 1234 5678 9012 3456, "
        "phone +49 170 1234567; Server=db1;User Id=sa;Password=correct horse;Encrypt=true"
    )
    clean, counts = mask(text)
    assert counts == {"connection_string": 1, "card_number": 2}
    assert "4111" not in clean and "3782" not in clean and "horse" not in clean
    assert "1234 5678 9012 3456" in clean and "+49 170 1234567" in clean and "Encrypt=true" in clean
    assert mask("nothing secret here")[1] == {}


@pytest.mark.parametrize(
    "unit",
    [
        "secret:",
        "-eyJ",
        "password=",
        "**password**:",
        "eyJaaaaaaaaaa.",
        "ab://c:dddd",
        "login a / ",
        "PIN is 1111 ",
    ],
)
def test_masking_is_linear_on_hostile_runs(unit: str) -> None:
    """200 kB of one rule's opener takes well under a second: the password rule's lookahead and
    the token rule's start inside a run were quadratic (100 kB of "secret:" took 16 s, and
    masking runs on every title, heading and outline description an agent reads)."""
    import time

    from sidecar.notes.redact import mask

    text = unit * (200_000 // len(unit))
    started = time.perf_counter()
    mask(text)
    assert time.perf_counter() - started < 2.0


@pytest.mark.parametrize("eol", ["\n", "\r\n", "\r"])
def test_masking_that_keeps_lines_keeps_every_kind_of_line_end(eol: str) -> None:
    """A masked secret over several lines leaves as many lines, whatever ends them (a note with
    lines ended by a lone CR shifted the lines of a range read after masking)."""
    from sidecar.notes.chunking import line_count
    from sidecar.notes.redact import mask

    text = eol.join(["a", *PEM.split("\n"), "b", ""])
    masked, counts = mask(text, keep_lines=True)
    assert counts == {"private_key": 1} and line_count(masked) == line_count(text)


def test_a_key_before_a_url_keeps_the_url_but_its_password() -> None:
    """'pw: postgres://u:…@db/x' lost its whole URL once 'pw' was a key: the URL's password is
    the secret, its host and path stay."""
    clean, counts = redact("pw: postgres://u:Hunter2222@db/x")
    assert clean == "pw: postgres://u:[REDACTED:url_password]@db/x" and counts == {"url_password": 1}


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        # what the secret is for, between its noun and the verb or colon
        ("The PIN for the front door is 4711", "The PIN for the front door is [REDACTED:pin]"),
        (
            "Die PIN für die Haustür im Keller ist 4711.",
            "Die PIN für die Haustür im Keller ist [REDACTED:pin].",
        ),
        ("PIN for the garage: 8472", "PIN for the garage: [REDACTED:pin]"),
        (
            "The password for Anna's Netflix account is Sommer2024!",
            "The password for Anna's Netflix account is [REDACTED:password]",
        ),
        # a login pair whose password is digits only
        ("Login: admin / 12345678", "Login: admin / [REDACTED:password]"),
        ("Zugang: admin:90817263", "Zugang: admin:[REDACTED:password]"),
        # digits in groups parted by spaces: all of them, not the first group
        ("PIN: 1234 5678", "PIN: [REDACTED:pin]"),
        ("The PUK is 1234 5678.", "The PUK is [REDACTED:pin]."),
        ("SIM_PIN_CODE = 4711", "SIM_PIN_CODE = [REDACTED:pin]"),  # the name says it is a code
        # a year said as the password is redacted: four digits ending the clause cannot be told
        # from a year there, and a password left in clear costs more than a year hidden
        ("Das Passwort war 2023", "Das Passwort war [REDACTED:password]"),
    ],
)
def test_secrets_for_something_in_groups_or_after_a_login_are_redacted(text: str, kept: str) -> None:
    """A PIN "for the front door", a login whose password is digits only, and a PIN in groups
    ("1234 5678": half of it stayed) reached disk in clear; the sentence around them stays."""
    assert redact_written(text)[0] == kept
    assert mask(text)[0] == kept


@pytest.mark.parametrize(
    "text",
    [
        "the password for this account is 12 characters long",
        "The PIN for the card is 4 digits long",
        "the password for the NAS is printed on the router",
        "PIN for GPIO pin: 17",
        "PIN: 2025-01-02",
        "The PIN is 1234 by default",
    ],
)
def test_code_names_and_prose_about_a_secret_for_something_stay(text: str) -> None:
    """Prose about what a secret is for, with no value of a secret's shape, stays as written."""
    assert redact_written(text) == (text, {})
    assert mask(text) == (text, {})


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("SIM_PIN = 1234", "SIM_PIN = [REDACTED:pin]"),
        ('SIM_PIN="1234"', 'SIM_PIN="[REDACTED:pin]"'),
        ("sim_pin: 1234", "sim_pin: [REDACTED:pin]"),
        ('"sim_pin": "1234"', '"sim_pin": "[REDACTED:pin]"'),
        ("export BANK_PIN=4711", "export BANK_PIN=[REDACTED:pin]"),
        ("CARD_PIN: 4711", "CARD_PIN: [REDACTED:pin]"),
        ("DEFAULT_PIN = 0000", "DEFAULT_PIN = [REDACTED:pin]"),
        # a connector's constant with a PIN's digits is redacted too: the cheaper error
        ("LED_PIN = 1023", "LED_PIN = [REDACTED:pin]"),
    ],
)
def test_a_pin_in_a_code_name_is_redacted(text: str, kept: str) -> None:
    """A name ending in PIN holds a PIN ("SIM_PIN = 1234" stayed in clear in writes and reads
    when a snake_case name ending in PIN was taken for a connector's constant)."""
    assert redact_written(text)[0] == kept
    assert mask(text)[0] == kept


def test_a_pin_under_a_code_name_in_front_matter_is_redacted() -> None:
    """A front matter key ending in pin holds a PIN ("sim_pin: 1234" stayed in clear)."""
    assert redact_entry("sim_pin", "1234")[0] == "[REDACTED:pin]"
