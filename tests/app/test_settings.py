"""Settings from environment variables: parsed, checked, described."""

import re
from pathlib import Path

import pytest

from agents.turns.config import TurnTaking
from agents.turns.settings import turn_taking
from app.settings import Settings, SettingsError


def test_from_env_reads_the_process_environment_by_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PORT", "9191")
    assert Settings.from_env().port == 9191


def test_from_env_reads_only_the_mapping_it_is_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PORT", "9191")
    assert Settings.from_env({}).port == 8080


def test_from_env_parses_integers() -> None:
    settings = Settings.from_env({"PORT": " 9090 ", "MAX_CALLS": "12"})
    assert settings.port == 9090
    assert settings.max_calls == 12


def test_from_env_parses_floats() -> None:
    settings = Settings.from_env({"END_OF_TURN_THRESHOLD": "0.75", "ECHO_MARGIN_DB": "6"})
    assert settings.end_of_turn_threshold == 0.75
    assert settings.echo_margin_db == 6.0
    assert isinstance(settings.echo_margin_db, float)


@pytest.mark.parametrize("raw", ["1", "true", "TRUE", "yes", "on", " On "])
def test_from_env_parses_true_booleans(raw: str) -> None:
    assert Settings.from_env({"DENOISE": raw}).denoise is True


@pytest.mark.parametrize("raw", ["0", "false", "False", "no", "off", ""])
def test_from_env_parses_false_booleans(raw: str) -> None:
    assert Settings.from_env({"DENOISE": raw}).denoise is False


def test_from_env_keeps_strings_as_given_but_trimmed() -> None:
    settings = Settings.from_env({"GREETING": "  Hi, this is the bot.  "})
    assert settings.greeting == "Hi, this is the bot."


def test_from_env_ignores_unrelated_variables() -> None:
    assert Settings.from_env({"HOME": "/root", "port": "1"}).port == 8080


def test_keyword_overrides_win_over_the_environment() -> None:
    assert Settings.from_env({"PORT": "9090"}, port=7070).port == 7070


@pytest.mark.parametrize(
    ("env", "raw", "kind"),
    [
        ("PORT", "80a", "int"),
        ("MAX_CALLS", "2.5", "int"),
        ("LLM_TEMPERATURE", "warm", "float"),
        ("DENOISE", "maybe", "bool"),
    ],
)
def test_from_env_rejects_bad_values_naming_the_variable(env: str, raw: str, kind: str) -> None:
    with pytest.raises(SettingsError, match=rf"^{env} must be a {kind}, got '{raw}'$"):
        Settings.from_env({env: raw})


@pytest.mark.parametrize("url", ["bot.example.com", "ws://bot.example.com", "wss://x"])
def test_check_refuses_a_public_url_without_an_http_scheme(url: str) -> None:
    with pytest.raises(SettingsError, match="PUBLIC_URL"):
        Settings.from_env({"PUBLIC_URL": url})


@pytest.mark.parametrize("url", ["http://127.0.0.1:8080", "https://bot.example.com"])
def test_check_accepts_an_http_or_https_public_url(url: str) -> None:
    assert Settings.from_env({"PUBLIC_URL": url}).public_url == url


@pytest.mark.parametrize("chunk_ms", ["19", "1001", "0"])
def test_check_refuses_a_chunk_length_out_of_range(chunk_ms: str) -> None:
    with pytest.raises(SettingsError, match="CHUNK_MS"):
        Settings.from_env({"CHUNK_MS": chunk_ms})


@pytest.mark.parametrize("chunk_ms", ["20", "1000"])
def test_check_accepts_the_ends_of_the_chunk_range(chunk_ms: str) -> None:
    assert Settings.from_env({"CHUNK_MS": chunk_ms}).chunk_ms == int(chunk_ms)


def test_a_hosted_turn_judge_is_for_the_words_judge_only() -> None:
    hosted = {"TURN_JUDGE_URL": "http://judge.example:8080/v1"}
    assert Settings.from_env(hosted).turn_judge_url == "http://judge.example:8080/v1"
    with pytest.raises(SettingsError, match="TURN_JUDGE=words"):
        Settings.from_env({**hosted, "TURN_JUDGE": "voice"})


def test_the_fused_judges_weights_are_the_ones_fitted_for_the_operators_hearing() -> None:
    fitted = "bias=8.84,words=8,sure_wait_ms=200,unsure_wait_ms=1800"
    weights = turn_taking(Settings.from_env({"TURN_JUDGE_WEIGHTS": fitted})).fused
    assert (weights.bias, weights.words, weights.unsure_wait_ms) == (8.84, 8.0, 1800)
    assert weights.smart_turn == TurnTaking().fused.smart_turn, "a field left out is kept"
    assert turn_taking(Settings.from_env({})).fused == TurnTaking().fused


@pytest.mark.parametrize(
    ("spec", "reason"),
    [
        ("bias=8,tip=3", "'tip' is none of the weights (bias, words, smart_turn"),
        ("words", "words needs a value: words=N"),
        ("bias=8,bias=9", "bias is given twice"),
        ("sure_wait_ms=200.5", "sure_wait_ms is whole milliseconds"),
        ("words=eight", "words must be a number"),
        ("bias=inf", "bias must be a finite number"),
        ("smart_turn=-1", "smart_turn must be >= 0"),
        ("sure_wait_ms=2000,unsure_wait_ms=1000", "sure_wait_ms <= unsure_wait_ms"),
        ("unsure_wait_ms=60000", "<= 10000"),
    ],
)
def test_weights_that_are_no_fitted_judge_are_refused_naming_the_field(
    spec: str, reason: str
) -> None:
    with pytest.raises(SettingsError, match=f"TURN_JUDGE_WEIGHTS: .*{re.escape(reason)}"):
        Settings.from_env({"TURN_JUDGE_WEIGHTS": spec})


def test_the_fused_judges_weights_need_the_fused_judge() -> None:
    with pytest.raises(SettingsError, match="TURN_JUDGE_WEIGHTS weighs the words judge"):
        Settings.from_env({"TURN_JUDGE_WEIGHTS": "bias=8", "TURN_JUDGE": "voice"})


def test_the_turn_judge_is_the_words_judge_or_the_voice() -> None:
    assert Settings.from_env({}).turn_judge == "words"
    assert Settings.from_env({"TURN_JUDGE": "voice"}).turn_judge == "voice"
    with pytest.raises(SettingsError, match="TURN_JUDGE=rules is gone"):
        Settings.from_env({"TURN_JUDGE": "rules"})
    with pytest.raises(SettingsError, match="'words' or 'voice'"):
        Settings.from_env({"TURN_JUDGE": "smart"})


def test_check_refuses_an_llm_endpoint_without_a_model() -> None:
    with pytest.raises(SettingsError, match="LLM_MODEL"):
        Settings.from_env({"LLM_BASE_URL": "https://api.example.com/v1"})


def test_check_accepts_an_llm_endpoint_with_a_model() -> None:
    settings = Settings.from_env(
        {"LLM_BASE_URL": "https://api.example.com/v1", "LLM_MODEL": "small-model"}
    )
    assert settings.llm_model == "small-model"


def test_check_refuses_a_max_silence_below_the_min_silence() -> None:
    environ = {"END_OF_TURN_MIN_SILENCE_MS": "500", "END_OF_TURN_MAX_SILENCE_MS": "400"}
    with pytest.raises(SettingsError, match="END_OF_TURN_MAX_SILENCE_MS"):
        Settings.from_env(environ)


def test_check_refuses_no_calls_at_all() -> None:
    with pytest.raises(SettingsError, match="MAX_CALLS"):
        Settings.from_env({"MAX_CALLS": "0"})


def test_check_refuses_a_hold_duck_that_is_a_boost_or_too_deep_to_bring_back() -> None:
    for value in ("-6", "31"):
        with pytest.raises(SettingsError, match="HOLD_DUCK_DB"):
            Settings.from_env({"HOLD_DUCK_DB": value})
    assert Settings.from_env({"HOLD_DUCK_DB": "20"}).hold_duck_db == 20.0


def test_the_quiet_that_lowers_a_silenced_bot_reaches_the_turn_engine() -> None:
    assert turn_taking(Settings.from_env({})).lowered_again_quiet_ms == 60
    assert turn_taking(Settings.from_env({"HOLD_QUIET_LOWERS_MS": "0"})).lowered_again_quiet_ms == 0
    with pytest.raises(SettingsError, match="HOLD_QUIET_LOWERS_MS"):
        Settings.from_env({"HOLD_QUIET_LOWERS_MS": "-1"})


def test_check_refuses_shared_servers_past_the_last_port() -> None:
    with pytest.raises(SettingsError, match="LLM_EMBEDDED_SHARED"):
        Settings.from_env({"LLM_EMBEDDED_SHARED": "-1"})
    environ = {"LLM_EMBEDDED_PORT": "65535", "LLM_EMBEDDED_SHARED": "2"}
    with pytest.raises(SettingsError, match="no room for 2 servers"):
        Settings.from_env(environ)
    assert Settings.from_env({"LLM_EMBEDDED_PORT": "65535"}).llm_embedded_port == 65535
    with pytest.raises(SettingsError, match=r"within 0\.\.65535"):
        Settings.from_env({"LLM_EMBEDDED_PORT": "-5"})


def test_check_also_applies_to_keyword_overrides() -> None:
    with pytest.raises(SettingsError, match="CHUNK_MS"):
        Settings.from_env({}, chunk_ms=5)


def test_the_token_secret_is_the_explicit_secret_first() -> None:
    settings = Settings.from_env(
        {"CALL_TOKEN_SECRET": "explicit-secret-16b", "TWILIO_AUTH_TOKEN": "auth"}
    )
    assert settings.token_secret == b"explicit-secret-16b"


def test_the_token_secret_is_derived_from_the_auth_token_next() -> None:
    settings = Settings.from_env({"TWILIO_AUTH_TOKEN": "auth"})
    assert settings.token_secret == b"offhook-call-token:auth"


def test_the_token_secret_is_random_per_process_otherwise() -> None:
    first, second = Settings.from_env({}), Settings.from_env({})
    assert len(first.token_secret) == 64
    assert first.token_secret != second.token_secret


def test_the_persona_is_the_system_prompt() -> None:
    settings = Settings.from_env({"SYSTEM_PROMPT": "You sell pizza."})
    assert settings.persona() == "You sell pizza."


def test_the_system_prompt_file_wins_over_the_system_prompt(tmp_path: Path) -> None:
    prompt = tmp_path / "persona.txt"
    prompt.write_text("You book tables.\n", encoding="utf-8")
    settings = Settings.from_env(
        {"SYSTEM_PROMPT": "You sell pizza.", "SYSTEM_PROMPT_FILE": str(prompt)}
    )
    assert settings.persona() == "You book tables."


def test_describe_lists_every_variable_with_its_meaning() -> None:
    rows = Settings.describe()
    variables = [variable for variable, _, _ in rows]
    assert len(variables) == len(set(variables))
    assert {"PORT", "TWILIO_AUTH_TOKEN", "CHUNK_MS", "SYSTEM_PROMPT_FILE"} <= set(variables)
    assert all(doc for _, _, doc in rows)


def test_describe_shows_current_values() -> None:
    rows = {variable: value for variable, value, _ in Settings.describe(Settings(port=9090))}
    assert rows["PORT"] == "9090"
    assert rows["DENOISE"] == "False"


def test_describe_masks_secrets() -> None:
    settings = Settings.from_env(
        {
            "TWILIO_AUTH_TOKEN": "auth-token",
            "CALL_TOKEN_SECRET": "s3-0123456789abcdef",
            "LLM_API_KEY": "sk-1",
        }
    )
    rows = {variable: value for variable, value, _ in Settings.describe(settings)}
    assert rows["TWILIO_AUTH_TOKEN"] == "***"
    assert rows["CALL_TOKEN_SECRET"] == "***"
    assert rows["LLM_API_KEY"] == "***"
    assert not any(secret in value for value in rows.values() for secret in ("auth-token", "sk-1"))


def test_describe_shows_an_empty_secret_as_empty() -> None:
    rows = {variable: value for variable, value, _ in Settings.describe(Settings())}
    assert rows["TWILIO_AUTH_TOKEN"] == ""


def test_describe_never_lists_the_random_token_fallback() -> None:
    settings = Settings()
    assert not any(settings._token_fallback in value for _, value, _ in settings.describe(settings))


# --- exposure: who can reach the server ------------------------------------------------


def test_an_unsigned_server_listens_on_loopback_by_default() -> None:
    settings = Settings.from_env({})
    settings.check_exposure()
    assert settings.bind_host == "127.0.0.1"


def test_a_signed_server_listens_everywhere_by_default() -> None:
    settings = Settings.from_env(
        {"TWILIO_AUTH_TOKEN": "t" * 32, "PUBLIC_URL": "https://bot.example.com"}
    )
    settings.check_exposure()
    assert settings.bind_host == "0.0.0.0"


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "10.0.0.5", "bot.example.com"])
def test_an_unsigned_server_on_a_public_interface_is_refused(host: str) -> None:
    settings = Settings.from_env({"HOST": host})
    with pytest.raises(SettingsError, match="ALLOW_UNSIGNED=1"):
        settings.check_exposure()


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "127.0.0.2"])
def test_an_unsigned_server_on_loopback_is_allowed(host: str) -> None:
    Settings.from_env({"HOST": host}).check_exposure()


def test_allow_unsigned_lets_an_unsigned_server_listen_everywhere() -> None:
    Settings.from_env({"HOST": "0.0.0.0", "ALLOW_UNSIGNED": "1"}).check_exposure()


def test_a_token_without_a_public_url_is_refused() -> None:
    settings = Settings.from_env({"TWILIO_AUTH_TOKEN": "t" * 32})
    with pytest.raises(SettingsError, match="PUBLIC_URL is required"):
        settings.check_exposure()


def test_offhook_serve_refuses_a_token_without_a_public_url(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from cli.main import main

    monkeypatch.setenv("TWILIO_AUTH_TOKEN", "t" * 32)
    monkeypatch.delenv("PUBLIC_URL", raising=False)

    assert main(["serve", "--port", "1"]) == 2
    assert "PUBLIC_URL is required" in capsys.readouterr().err


def test_repr_hides_secrets() -> None:
    settings = Settings.from_env(
        {
            "TWILIO_AUTH_TOKEN": "twilio-secret-123",
            "CALL_TOKEN_SECRET": "call-secret-456-0123456789",
            "LLM_API_KEY": "sk-secret-789",
        }
    )
    shown = repr(settings) + str(settings)
    for secret in ("twilio-secret-123", "call-secret-456", "sk-secret-789"):
        assert secret not in shown
    assert "max_calls=4" in shown


def test_an_unreadable_persona_file_is_a_settings_error(tmp_path: Path) -> None:
    settings = Settings.from_env({"SYSTEM_PROMPT_FILE": str(tmp_path / "missing.txt")})
    with pytest.raises(SettingsError, match="SYSTEM_PROMPT_FILE"):
        settings.persona()


def test_a_malformed_account_sid_is_refused() -> None:
    with pytest.raises(SettingsError, match="TWILIO_ACCOUNT_SID"):
        Settings.from_env({"TWILIO_ACCOUNT_SID": "AC123"})


def test_urls_are_shown_without_their_credentials_or_query() -> None:
    settings = Settings.from_env(
        {}, llm_base_url="https://user:pw@llm.example.com/v1?key=sk-secret", llm_model="m"
    )
    listed = dict((row[0], row[1]) for row in Settings.describe(settings))
    for shown in (listed["LLM_BASE_URL"], repr(settings)):
        assert "pw" not in shown and "sk-secret" not in shown and "user" not in shown
        assert "llm.example.com/v1" in shown
    assert settings.llm_base_url.endswith("key=sk-secret")  # the value itself is intact


def test_a_short_call_token_secret_is_a_settings_error() -> None:
    with pytest.raises(SettingsError, match="CALL_TOKEN_SECRET must be at least 16 bytes"):
        Settings.from_env({"CALL_TOKEN_SECRET": "short"})


def test_the_configuration_page_is_the_settings_object_as_it_is() -> None:
    from app.configuration_page import configuration_markdown

    page = Path(__file__).parents[2] / "docs" / "configuration.md"
    assert page.read_text(encoding="utf-8") == configuration_markdown(), (
        "docs/configuration.md is out of date: offhook settings --markdown > docs/configuration.md"
    )
    assert all(f"`{env}`" in page.read_text() for env, _, _ in Settings.describe())
