"""`topicmatch route --connect` and ``$SPARK_REMOTE``: which session the command asks for, and
the errors it gives before Spark runs anything. `route()` and the command on a Spark Connect
session: test_spark.py. A whole run of `--connect local[N]`, which starts a second JVM and
Connect server (about 50 s on a loaded 2-core machine), is left out of the suite."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("pyspark", reason="PySpark is not installed: pip install -e '.[spark]'")
pytest.importorskip(
    "grpc", reason="Spark Connect needs pyspark[connect]: pip install -e '.[spark]'"
)

from topicmatch import cli  # noqa: E402

#: What PySpark puts in the environment of a process with a session; a child process given
#: them would take itself for part of this process's session.
SESSION_VARIABLES = (
    "SPARK_REMOTE",
    "SPARK_LOCAL_REMOTE",
    "SPARK_CONNECT_MODE_ENABLED",
    "SPARK_CONNECT_AUTHENTICATE_TOKEN",
    "PYSPARK_GATEWAY_PORT",
    "PYSPARK_GATEWAY_SECRET",
)


def run(command: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    """`command` in a new process with none of this process's session; `env` added."""
    clean = {k: v for k, v in os.environ.items() if k not in SESSION_VARIABLES}
    clean["PYSPARK_PYTHON"] = sys.executable
    return subprocess.run(
        command, env={**clean, **env}, capture_output=True, text=True, timeout=300
    )


def run_cli(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "topicmatch.cli", *args], **env)


def route_args(tmp_path, *more: str) -> list[str]:
    return [
        "route",
        "--subscriptions",
        str(tmp_path / "subscriptions.csv"),
        "--messages",
        str(tmp_path / "messages.csv"),
        "--out",
        str(tmp_path / "out"),
        *more,
    ]


def test_connect_then_spark_remote_then_classic(monkeypatch):
    monkeypatch.delenv("SPARK_REMOTE", raising=False)
    assert cli._wanted_session(None, None) == ("classic", "")
    assert cli._wanted_session("local[1]", None) == ("classic", "local[1]")
    assert cli._wanted_session(None, "sc://h:1") == ("connect", "sc://h:1")
    monkeypatch.setenv("SPARK_REMOTE", "sc://env:2")
    assert cli._wanted_session(None, None) == ("connect", "sc://env:2")
    assert cli._wanted_session("local[1]", None) == ("classic", "local[1]")
    assert cli._wanted_session(None, "sc://h:1") == ("connect", "sc://h:1")


def test_master_and_connect_exclude_each_other(tmp_path, capsys):
    with pytest.raises(SystemExit):
        cli.main(route_args(tmp_path, "--master", "local[1]", "--connect", "sc://h"))
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("http://localhost:15002", "not a Spark Connect URL: [INVALID_CONNECT_URL]"),
        ("sc://localhost:port", "not a Spark Connect URL: Port could not be cast"),
        ("local[x]", "a local Spark Connect server takes local, local[N] or local[*]"),
    ],
)
def test_a_bad_connect_url_is_refused_at_once(url, says):
    with pytest.raises(cli.SessionError) as err:
        cli._connect_session(url, "1g")
    assert str(err.value).startswith(says)


def test_a_server_that_does_not_answer_is_refused_after_a_short_wait(monkeypatch):
    monkeypatch.setattr(cli, "CONNECT_TIMEOUT", 0.5)
    with pytest.raises(
        cli.SessionError, match=r"no Spark Connect server answers at 127\.0\.0\.1:9"
    ):
        cli._connect_session("sc://127.0.0.1:9", "1g")


def test_the_command_says_what_is_missing_without_pyspark_connect(tmp_path):
    """grpc made unimportable, as in an environment with pyspark but not pyspark[connect]. A
    script, not `python -c`: PySpark takes a main module without a file for a doctest run and
    exits 0 when grpc is missing."""
    script = tmp_path / "no_grpc.py"
    script.write_text(
        "import sys\nsys.modules['grpc'] = None\n"
        "from topicmatch.cli import main\nsys.exit(main())\n"
    )
    done = run([sys.executable, str(script), *route_args(tmp_path, "--connect", "sc://localhost")])
    assert done.returncode == 2, done.stderr
    assert "--connect 'sc://localhost': Spark Connect needs pyspark[connect]" in done.stderr
    assert "pip install 'topicmatch[spark]'" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_command_takes_spark_remote_from_the_environment(tmp_path):
    done = run_cli(*route_args(tmp_path), SPARK_REMOTE="sc://localhost:port")
    assert done.returncode == 2, done.stderr
    assert "topicmatch route: $SPARK_REMOTE 'sc://localhost:port': not a Spark Connect URL" in (
        done.stderr
    )
    assert "Traceback" not in done.stderr


def test_a_matcher_too_large_for_a_connect_stream_is_refused_early(monkeypatch):
    """A stream on Spark Connect carries the subscriptions in its plan: route() checks their
    size (compressed, as the client sends it) rather than let the query fail when it starts."""
    from topicmatch import spark as tms

    monkeypatch.setattr(tms, "CONNECT_PLAN_BYTES", 10_000)
    tms._check_plan_size(b"x" * 20_000)  # over the limit, but it compresses below
    with pytest.raises(ValueError, match="exceed the 128 MiB of a Spark Connect message"):
        tms._check_plan_size(os.urandom(20_000))
