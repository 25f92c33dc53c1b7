"""`offhook simulate`: play Twilio's part of a phone call against a running server.

The simulator does what Twilio and a caller do together, in real time:

1. POST the voice webhook with Twilio's form parameters (signed when a token is given);
2. read the TwiML's `<Connect><Stream>` and open that WebSocket (handshake signed);
3. send `connected`, `start`, then one 20 ms mu-law `media` frame every 20 ms;
4. play the bot's audio through a model of Twilio's playout buffer (TwilioPlayout),
   echoing marks when their audio has played and at once on `clear`;
5. speak a script of caller turns, timed against what the caller has *heard*;
6. hang up with `stop`, and report latencies, marks, clears and protocol violations.

This module is the command line (`build_parser`, `main`) and the simulator's public
face: everything it exports is defined in one of

- ops.twilio_caller: the simulated Twilio caller, `simulate_call(SimulationConfig)`;
- ops.twilio_webhook: the webhook's form, the TwiML's stream, SimulationError;
- ops.caller_script: what the caller says and when (CallerTurn, CallerScript), what it
  hears (BotEar), and the answering machine;
- ops.simulate_report: CallReport and TurnResult, and the report printed here;
- ops.line: the caller's line conditions (noise, echo).

Clock: every time in the report is milliseconds since the `start` event (see
ops.twilio_caller). Errors: SimulationError (setup failed: webhook refused, TwiML without
a stream, socket refused). Anything the server does wrong *during* the call is reported,
not raised.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from ops.caller_script import (
    BEEP_HZ,
    BEEP_MS,
    BOT_DONE_SILENCE_MS,
    BOT_GONE_MS,
    DTMF_SPACING_MS,
    RATE,
    UTTERANCE_GAP_MS,
    VOICED_DBFS,
    After,
    BotEar,
    CallerScript,
    CallerTurn,
    PreparedTurn,
    answering_machine,
)
from ops.caller_voice import CallerVoiceError
from ops.line import NOISE_KINDS, LineConditions
from ops.simulate_report import CallReport, TurnResult, print_report, turn_results
from ops.twilio_caller import (
    FRAME_S,
    FRAME_SAMPLES,
    MULAW_SILENCE_FRAME,
    SimulationConfig,
    simulate_call,
)
from ops.twilio_webhook import (
    TWILIO_USER_AGENT,
    WEBHOOK_PATH,
    SimulationError,
    StreamTarget,
    check_stream_host,
    connect_uri,
    parse_twiml,
    twiml_warnings,
    voice_webhook_params,
)

__all__ = [
    "BEEP_HZ",
    "BEEP_MS",
    "BOT_DONE_SILENCE_MS",
    "BOT_GONE_MS",
    "DTMF_SPACING_MS",
    "FRAME_S",
    "FRAME_SAMPLES",
    "MULAW_SILENCE_FRAME",
    "RATE",
    "TWILIO_USER_AGENT",
    "UTTERANCE_GAP_MS",
    "VOICED_DBFS",
    "WEBHOOK_PATH",
    "After",
    "BotEar",
    "CallReport",
    "CallerScript",
    "CallerTurn",
    "PreparedTurn",
    "SimulationConfig",
    "SimulationError",
    "StreamTarget",
    "TurnResult",
    "answering_machine",
    "build_parser",
    "check_stream_host",
    "connect_uri",
    "main",
    "parse_twiml",
    "print_report",
    "simulate_call",
    "turn_results",
    "twiml_warnings",
    "voice_webhook_params",
]


class _AppendTurn(argparse.Action):
    """Collects --say/--wav/--dtmf/--barge-in into one list, in command-line order."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[object] | None,
        option_string: str | None = None,
    ) -> None:
        turns = [*(getattr(namespace, self.dest, None) or []), (self.const, str(values))]
        setattr(namespace, self.dest, turns)


def _turn_from_arg(kind: str, value: str) -> CallerTurn:
    match kind:
        case "say":
            return CallerTurn(text=value)
        case "wav":
            return CallerTurn(wav=Path(value))
        case "dtmf":
            return CallerTurn(dtmf=value)
        case "barge-in":
            return CallerTurn(text=value, after=After.BOT_SPEAKING, delay_ms=800)
    raise ValueError(f"unknown turn kind {kind!r}")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="offhook simulate",
        description="Call an offhook server the way Twilio does and measure what the caller hears.",
    )
    parser.add_argument("--url", default="http://127.0.0.1:8080", help="server base URL")
    parser.add_argument(
        "--auth-token",
        default=os.environ.get("TWILIO_AUTH_TOKEN"),
        help="sign requests like Twilio (default: $TWILIO_AUTH_TOKEN)",
    )
    parser.add_argument(
        "--account-sid",
        default=os.environ.get("TWILIO_ACCOUNT_SID"),
        help="the AccountSid to call as (default: $TWILIO_ACCOUNT_SID, else a random one)",
    )
    turn_help = "in command-line order, one caller turn each"
    parser.set_defaults(turns=[])
    parser.add_argument(
        "--say",
        dest="turns",
        action=_AppendTurn,
        const="say",
        metavar="TEXT",
        help=f"say TEXT once the bot is done ({turn_help})",
    )
    parser.add_argument(
        "--wav",
        dest="turns",
        action=_AppendTurn,
        const="wav",
        metavar="PATH",
        help=f"play a WAV file once the bot is done ({turn_help})",
    )
    parser.add_argument(
        "--dtmf",
        dest="turns",
        action=_AppendTurn,
        const="dtmf",
        metavar="DIGITS",
        help=f"key DIGITS once the bot is done ({turn_help})",
    )
    parser.add_argument(
        "--barge-in",
        dest="turns",
        action=_AppendTurn,
        const="barge-in",
        metavar="TEXT",
        help=f"say TEXT 800 ms into the bot's next utterance ({turn_help})",
    )
    parser.add_argument(
        "--echo-db",
        type=float,
        default=None,
        help="leak the bot's audio into the caller's microphone this many dB down",
    )
    parser.add_argument(
        "--echo-delay-ms",
        type=int,
        default=0,
        help="the echo's round trip (speakerphones: 60-400 ms)",
    )
    parser.add_argument(
        "--noise",
        choices=NOISE_KINDS,
        default=None,
        help="continuous background: white, pink, or babble (several voices)",
    )
    parser.add_argument(
        "--snr-db", type=float, default=15.0, help="caller speech over the background"
    )
    parser.add_argument(
        "--record",
        type=Path,
        default=None,
        metavar="OUT.wav",
        help="stereo WAV: caller left, bot as heard right",
    )
    parser.add_argument("--voice", choices=("espeak", "piper"), default="espeak")
    parser.add_argument(
        "--connect-to",
        default=None,
        metavar="HOST[:PORT]",
        help="open the media stream here instead of the TwiML's host",
    )
    parser.add_argument(
        "--answering-machine",
        default=None,
        metavar="GREETING",
        help="play an answering machine: GREETING, then a beep, then silence (before any turns)",
    )
    parser.add_argument("--hangup-after-ms", type=int, default=4000)
    parser.add_argument("--max-call-s", type=float, default=120.0)
    return parser


def main(argv: list[str] | None = None) -> int:
    """`offhook simulate`: 0 success, 1 protocol violations or no bot audio, 2 setup failed."""
    args = build_parser().parse_args(argv)
    try:
        config = SimulationConfig(
            base_url=args.url.rstrip("/"),
            auth_token=args.auth_token or None,
            account_sid=args.account_sid or None,
            turns=[
                *(answering_machine(args.answering_machine) if args.answering_machine else []),
                *(_turn_from_arg(kind, value) for kind, value in args.turns),
            ],
            connect_to=args.connect_to,
            hangup_after_ms=args.hangup_after_ms,
            max_call_s=args.max_call_s,
            line=LineConditions(
                noise=args.noise,
                snr_db=args.snr_db,
                echo_db=args.echo_db,
                echo_delay_ms=args.echo_delay_ms,
            ),
            voice_engine=args.voice,
            record_path=args.record,
        )
        report = asyncio.run(simulate_call(config))
    except (SimulationError, CallerVoiceError, ValueError, OSError) as exc:
        print(f"offhook simulate: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    print_report(report)
    if report.protocol_violations:
        return 1
    if not report.bot_utterances:
        print("offhook simulate: the caller heard no bot audio", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
