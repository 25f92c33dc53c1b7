"""`python -m benchmarks`: every benchmark `offhook bench` had is here, and each JSON it
writes says which commit, machine, options and settings made it."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from benchmarks.__main__ import OWN_ARGUMENTS, _own, parser
from benchmarks.provenance import (
    add_seed_and_json,
    app_settings,
    fresh_seed,
    options,
    provenance,
    write_result,
)

# What `offhook bench --help` offered, the scripts with their own arguments, the turn
# judges on fresh corpus speech, the cluster on one box, and the comparison of turns runs.
NAMES = {"call", "frontend", "recorder", "units", "takeover", "pool", "hearing", "stt"}
NAMES |= {"turns", "lanes", "soak", "abuse", "llm", "stt-evidence", "llama-build", "judge"}
NAMES |= {"cluster", "held-words", "judge-people", "llama-beside", "hotwords", "turns-compare"}


def _commands() -> set[str]:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return set(sub.choices)


def test_every_benchmark_is_a_command() -> None:
    assert _commands() == NAMES
    assert set(OWN_ARGUMENTS) <= NAMES


def test_every_measuring_command_runs_something_and_can_write_json() -> None:
    for name in NAMES - set(OWN_ARGUMENTS):
        args = parser().parse_args([name, "--json", "out.json"])
        assert callable(args.run), name
        assert args.json == Path("out.json")


def test_provenance_names_the_commit_machine_options_and_settings() -> None:
    args = argparse.Namespace(
        calls=2, voice="piper", record_dir=Path("/tmp/x"), json=Path("o.json"), run=print
    )
    made = provenance("call", ["--calls", "2"], options(args))

    assert made["benchmark"] == "call"
    assert made["command"] == "python -m benchmarks call --calls 2"
    assert made["commit"] == "unknown" or re.fullmatch(r"[0-9a-f]{40}", str(made["commit"]))
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+00:00", str(made["date"]))
    assert {"cpu", "arch", "cores", "os", "python"} <= set(made["machine"])
    assert made["options"] == {"calls": 2, "voice": "piper", "record_dir": "/tmp/x"}
    assert isinstance(made["settings"], dict)
    json.dumps(made)


def test_a_result_file_is_its_provenance_then_its_figures(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    write_result(path, "hotwords", ["--seed", "5"], {"seed": 5}, {"seed": 5, "at": Path("/x")})

    saved = json.loads(path.read_text())
    assert list(saved) == ["provenance", "seed", "at"]
    assert saved["provenance"]["command"] == "python -m benchmarks hotwords --seed 5"
    assert saved["at"] == "/x"
    with pytest.raises(ValueError, match="provenance"):
        write_result(path, "hotwords", [], {}, {"provenance": "mine"})


def test_a_seed_given_repeats_a_run_and_none_draws_a_new_one() -> None:
    assert fresh_seed(0) == 0 and fresh_seed(123) == 123
    assert 0 <= fresh_seed(None) < 1_000_000


def test_provenance_keeps_tokens_out() -> None:
    args = argparse.Namespace(auth_token="s3cret-token", url="http://x")
    made = provenance("turns", ["--auth-token", "s3cret-token", "--auth-token=s3cret-token"])
    made["options"] = options(args)
    assert "s3cret-token" not in json.dumps(made)


def test_provenance_shows_a_servers_url_without_its_credentials() -> None:
    url = "https://user:s3cret@judge.example/v1?api_key=k3y"
    argv = ["--judge-url", url, f"--stt-url={url}", "--items", "40"]
    made = provenance("judge", argv, {"judge_url": url, "stt_url": "", "items": 40})
    shown = json.dumps(made)
    assert "s3cret" not in shown and "k3y" not in shown
    assert made["options"] == {
        "judge_url": "https://***@judge.example/v1?***",
        "stt_url": "",
        "items": 40,
    }
    assert made["command"].endswith(
        "--judge-url https://***@judge.example/v1?*** "
        "--stt-url=https://***@judge.example/v1?*** --items 40"
    )


def test_settings_are_those_that_differ_from_their_defaults_secrets_masked() -> None:
    environ = {"STT_MODEL": "base", "TWILIO_AUTH_TOKEN": "s3cret-token", "UNRELATED": "x"}
    assert app_settings({}) == {}
    assert app_settings(environ) == {"STT_MODEL": "base", "TWILIO_AUTH_TOKEN": "***"}
    assert "error" in app_settings({"CHUNK_MS": "5"})


def test_offhook_has_no_bench_command(capsys: pytest.CaptureFixture[str]) -> None:
    from cli.main import main

    with pytest.raises(SystemExit) as exit_:
        main(["bench", "call"])
    assert exit_.value.code == 2
    assert "invalid choice: 'bench'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["hotwords", "held-words", "judge", "judge-people"])
def test_a_bench_that_draws_its_material_fresh_takes_a_seed_and_a_json(
    name: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        _own(name)(["--help"])
    assert exit_.value.code == 0
    shown = capsys.readouterr().out
    assert "--seed SEED" in shown and "--json JSON" in shown


def test_the_seed_and_json_options_read_a_number_and_a_path() -> None:
    bench = argparse.ArgumentParser()
    add_seed_and_json(bench)
    args = bench.parse_args(["--seed", "5", "--json", "out.json"])
    assert (args.seed, args.json) == (5, Path("out.json"))
    assert bench.parse_args([]).seed is None
