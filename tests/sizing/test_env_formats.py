"""Every output format, read back the way its consumer reads it: bash, python-dotenv, a JSON
parser, a YAML parser (Kubernetes' shape), GitHub's `NAME=VALUE` file lines."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from dotenv import dotenv_values

from hipmem.sizing.env_formats import (
    GithubFileError,
    UnknownFormat,
    UnsafeVariable,
    render,
    write_github,
)
from hipmem.sizing.recommend import Recommendation, recommend
from hipmem.sizing.session import SizingSession
from hipmem.sizing.workspace_check import strtoul

CALLS = ["rocsolver_dgetrf:m=1024,n=1024", "rocsolver_dgetrs:n=1024,nrhs=1"]


@pytest.fixture(scope="module")
def advice(rocm: object) -> Recommendation:
    with SizingSession(device="MI210") as session:
        session.size_many(CALLS)
        return recommend(session.result(), environ={})


@pytest.fixture(scope="module")
def variables(advice: Recommendation) -> list[tuple[str, str]]:
    return advice.variables(pytorch=True)


def test_shell_is_sourced_by_bash(tmp_path: Path, advice: Recommendation, variables) -> None:
    script = tmp_path / "env.sh"
    script.write_text(render("shell", variables))
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'source {script}; printf "%s\\n" "$ROCBLAS_DEVICE_MEMORY_SIZE" '
            '"$HIPBLAS_WORKSPACE_CONFIG"; bash -c \'printf %s "$ROCBLAS_DEVICE_MEMORY_SIZE"\'',
        ],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    value = str(advice.rocblas_device_memory_size_bytes)
    # The last line comes from a child shell: the variable is exported, not just set.
    assert done.stdout == f"{value}\n{advice.pytorch_workspace_config}\n{value}"
    # and what rocBLAS's strtoul reads from it is the recommended number, all of it
    read = strtoul(value)
    assert (read.value, read.ignored) == (advice.rocblas_device_memory_size_bytes, "")


def test_dotenv_is_read_by_python_dotenv(tmp_path: Path, advice: Recommendation, variables) -> None:
    path = tmp_path / ".env"
    path.write_text(render("dotenv", variables))
    assert dotenv_values(path) == {
        "ROCBLAS_DEVICE_MEMORY_SIZE": str(advice.rocblas_device_memory_size_bytes),
        "HIPBLAS_WORKSPACE_CONFIG": advice.pytorch_workspace_config,
    }


def test_json_has_env_strings_and_integer_details(advice: Recommendation, variables) -> None:
    payload = json.loads(render("json", variables, details=advice.as_dict()))
    assert payload["env"] == dict(variables)
    assert payload["rocblas_device_memory_size_bytes"] == advice.rocblas_device_memory_size_bytes
    assert payload["session_bytes"] == advice.session_bytes


def test_yaml_is_a_kubernetes_env_list(advice: Recommendation, variables) -> None:
    document = yaml.safe_load(render("yaml", variables))
    assert list(document) == ["env"]
    for item in document["env"]:
        assert set(item) == {"name", "value"}
        assert isinstance(item["name"], str) and isinstance(item["value"], str)
    assert [(item["name"], item["value"]) for item in document["env"]] == variables
    # A YAML 1.1 reader (Kubernetes' go-yaml lineage) must not see a number either.
    assert yaml.load(render("yaml", variables), Loader=yaml.BaseLoader) == document


def _github_lines(path: Path) -> dict[str, str]:
    """GitHub's single-line `{name}={value}` format (no heredoc delimiters used)."""
    pairs = {}
    for line in path.read_text().splitlines():
        name, sep, value = line.partition("=")
        assert sep and name and "<<" not in name, line
        pairs[name] = value
    return pairs


def test_github_appends_to_both_files(tmp_path: Path, variables) -> None:
    env_file, output_file = tmp_path / "env", tmp_path / "output"
    env_file.write_text("EARLIER=1")  # a previous step left no final newline
    output_file.write_text("")
    written = write_github(
        variables, environ={"GITHUB_ENV": str(env_file), "GITHUB_OUTPUT": str(output_file)}
    )
    assert written == [env_file, output_file]
    assert _github_lines(env_file) == {"EARLIER": "1", **dict(variables)}
    assert _github_lines(output_file) == dict(variables)
    assert env_file.read_text().endswith("\n")


def test_github_without_the_files_writes_nothing(variables) -> None:
    assert write_github(variables, environ={}) == []
    assert render("github", variables) == "".join(f"{n}={v}\n" for n, v in variables)


def test_github_unwritable_file_leaves_the_other_untouched(tmp_path: Path, variables) -> None:
    output_file = tmp_path / "output"
    output_file.write_text("KEEP=1\n")
    not_a_file = tmp_path / "a-directory"
    not_a_file.mkdir()
    environ = {"GITHUB_ENV": str(not_a_file), "GITHUB_OUTPUT": str(output_file)}
    with pytest.raises(GithubFileError, match=r"^cannot append to \$GITHUB_ENV \(.*a-directory\)"):
        write_github(variables, environ=environ)
    assert output_file.read_text() == "KEEP=1\n"
    missing_dir = {"GITHUB_ENV": str(tmp_path / "no" / "such" / "file")}
    with pytest.raises(GithubFileError, match="No such file or directory"):
        write_github(variables, environ=missing_dir)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("LD_PRELOAD", "1"),
        ("ROCBLAS_DEVICE_MEMORY_SIZE", "1; rm -rf /"),
        ("ROCBLAS_DEVICE_MEMORY_SIZE", "128M"),
        ("ROCBLAS_DEVICE_MEMORY_SIZE", ""),
        ("HIPBLAS_WORKSPACE_CONFIG", ":1:1\n"),
    ],
)
def test_only_fixed_names_and_numbers_are_emitted(name: str, value: str) -> None:
    with pytest.raises(UnsafeVariable):
        render("shell", [(name, value)])


def test_unknown_format() -> None:
    with pytest.raises(UnknownFormat, match=r"^format='toml': unknown format; choose one of"):
        render("toml", [("ROCBLAS_DEVICE_MEMORY_SIZE", "1")])


# ---- PyTorch's allocator settings: strings with `[`, `>`, `:` and `,` -------------------------

ALLOC_VARIABLES = [
    ("PYTORCH_HIP_ALLOC_CONF", "expandable_segments:True,roundup_power2_divisions:[256:1,>:8]"),
    (
        "PYTORCH_CUDA_ALLOC_CONF",
        "garbage_collection_threshold:0.6,per_process_memory_fraction:0.0045",
    ),
]


def test_allocator_settings_are_sourced_by_bash_as_they_are(tmp_path: Path) -> None:
    # `[...]` would be a glob and `>` a redirection, unquoted: a file named like a glob match
    # is there to catch an unquoted value.
    (tmp_path / "expandable_segments:True,roundup_power2_divisions:1").write_text("")
    script = tmp_path / "env.sh"
    script.write_text(render("shell", ALLOC_VARIABLES))
    done = subprocess.run(
        [
            "bash",
            "-c",
            f'source {script}; bash -c \'printf "%s\\n" "$PYTORCH_HIP_ALLOC_CONF" '
            '"$PYTORCH_CUDA_ALLOC_CONF"\'',
        ],
        capture_output=True,
        text=True,
        check=True,
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout.splitlines() == [value for _, value in ALLOC_VARIABLES]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "env.sh",
        "expandable_segments:True,roundup_power2_divisions:1",
    ]


def test_allocator_settings_in_dotenv_are_read_by_python_dotenv_and_bash(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(render("dotenv", ALLOC_VARIABLES))
    assert dotenv_values(path) == dict(ALLOC_VARIABLES)
    done = subprocess.run(
        ["bash", "-c", f'set -a; source {path}; printf %s "$PYTORCH_HIP_ALLOC_CONF"'],
        capture_output=True,
        text=True,
        check=True,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert done.stdout == ALLOC_VARIABLES[0][1]


def test_allocator_settings_in_yaml_json_and_github(tmp_path: Path) -> None:
    document = yaml.safe_load(render("yaml", ALLOC_VARIABLES))
    assert [(item["name"], item["value"]) for item in document["env"]] == ALLOC_VARIABLES
    assert json.loads(render("json", ALLOC_VARIABLES))["env"] == dict(ALLOC_VARIABLES)
    env_file = tmp_path / "env"
    write_github(ALLOC_VARIABLES, environ={"GITHUB_ENV": str(env_file)})
    # GitHub takes everything after the first `=`: no quotes may be added there.
    assert _github_lines(env_file) == dict(ALLOC_VARIABLES)


@pytest.mark.parametrize(
    "value",
    ["expandable_segments:True'; rm -rf ~; '", "a:$(id)", "a:`id`", "a:1\nb:2", "a: 1", "'"],
)
def test_allocator_settings_outside_the_grammar_are_never_emitted(value: str) -> None:
    for fmt in ("shell", "dotenv", "github", "yaml", "json"):
        with pytest.raises(UnsafeVariable):
            render(fmt, [("PYTORCH_HIP_ALLOC_CONF", value)])
    with pytest.raises(UnsafeVariable):  # and a setting string is no workspace size
        render("shell", [("ROCBLAS_DEVICE_MEMORY_SIZE", "expandable_segments:True")])


def test_pytorchs_defaults_are_an_empty_string_that_every_format_keeps(tmp_path: Path) -> None:
    empty = [("PYTORCH_HIP_ALLOC_CONF", "")]
    path = tmp_path / ".env"
    path.write_text(render("dotenv", empty))
    assert dotenv_values(path) == {"PYTORCH_HIP_ALLOC_CONF": ""}
    assert render("shell", empty) == "export PYTORCH_HIP_ALLOC_CONF=''\n"
    assert yaml.safe_load(render("yaml", empty))["env"] == [
        {"name": "PYTORCH_HIP_ALLOC_CONF", "value": ""}
    ]
