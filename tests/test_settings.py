"""Configuration, rule selection and `# noqa`, in-process: what a pyproject.toml or a command
line selects, and which lines a suppression comment silences."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import run_cli

from torchdevlint.config import DEFAULT_EXCLUDES, Config, ConfigError, load_config
from torchdevlint.registry import UnknownSelector, all_rules, rule_by_code, select_rules, validate_selector
from torchdevlint.rules.tdl003_load_without_map_location import LoadOptions
from torchdevlint.settings import CommandLineSelection, SettingsFinder, resolve_rules
from torchdevlint.suppression import is_suppressed

ON_BY_DEFAULT = {rule.code for rule in all_rules() if rule.default_enabled}
OFF_BY_DEFAULT = {rule.code for rule in all_rules() if not rule.default_enabled}


def codes(rules: object) -> set[str]:
    assert isinstance(rules, (list, tuple))
    return {rule.code for rule in rules}


def write_config(folder: Path, table: str) -> Path:
    path = folder / "pyproject.toml"
    path.write_text(f"[tool.torchdevlint]\n{table}\n", encoding="utf-8")
    return path


# ---- registry ---------------------------------------------------------------------------

def test_default_selection_is_every_rule_on_by_default() -> None:
    assert codes(select_rules()) == ON_BY_DEFAULT
    assert OFF_BY_DEFAULT, "some rules are off by default"


def test_a_code_or_prefix_selects_every_rule_it_matches_on_by_default_or_not() -> None:
    correctness = codes(select_rules(["TDL0"]))
    assert correctness == {code for code in ON_BY_DEFAULT | OFF_BY_DEFAULT if code.startswith("TDL0")}
    off = sorted(OFF_BY_DEFAULT)[0]
    assert off in codes(select_rules([off[:4]])) and off in codes(select_rules(extend_select=[off[:4]]))
    assert codes(select_rules([off])) == {off}
    assert codes(select_rules(["ALL"])) == ON_BY_DEFAULT | OFF_BY_DEFAULT


def test_the_more_specific_selector_wins() -> None:
    chosen = codes(select_rules(["TDL"], ignore=["TDL0"], extend_select=["TDL001"]))
    assert "TDL001" in chosen and "TDL002" not in chosen


@pytest.mark.parametrize("selector", ["TDL8", "E501", "TDL0001", "noqa", ""])
def test_a_selector_that_names_no_rule_is_refused(selector: str) -> None:
    with pytest.raises(UnknownSelector):
        validate_selector(selector)


def test_rules_are_found_by_code_or_slug_in_any_case() -> None:
    rule = all_rules()[0]
    assert rule_by_code(rule.code.lower()) is rule
    assert rule_by_code(rule.slug) is rule
    assert rule_by_code("TDL999") is None


# ---- configuration ----------------------------------------------------------------------

def test_no_pyproject_means_defaults() -> None:
    assert load_config(None) == Config()
    assert codes(resolve_rules(Config())) == ON_BY_DEFAULT


def test_the_nearest_pyproject_is_found_from_a_subfolder(tmp_path: Path) -> None:
    path = write_config(tmp_path, 'ignore = ["TDL004"]')
    (tmp_path / "src" / "pkg").mkdir(parents=True)
    assert SettingsFinder(tmp_path / "src" / "pkg").fallback.config.source == path


def test_lists_and_rule_options_are_read(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, (
        'select = ["TDL0"]\nextend-select = ["TDL103"]\nignore = ["TDL004"]\n'
        'exclude = ["legacy/"]\nextend-exclude = ["*_pb2.py"]\n'
        '[tool.torchdevlint.load-without-map-location]\nmap-location = "cuda"\n'
    )))
    assert config.select == ("TDL0",) and config.extend_select == ("TDL103",) and config.ignore == ("TDL004",)
    assert config.exclude == ("legacy/",) and config.extend_exclude == ("*_pb2.py",)
    assert config.rule_options["TDL003"] == LoadOptions(map_location="cuda")


@pytest.mark.parametrize(
    ("table", "named"),
    [
        ('selct = ["TDL0"]', "'selct'"),
        ('select = "TDL0"', "select must be a list of strings"),
        ('select = ["TDL8"]', "'TDL8'"),
        ('[tool.torchdevlint.TDL001]\nbogus = 1', "'bogus'"),
        ('[tool.torchdevlint.load-without-map-location]\nmap-locaton = "cpu"', "known: "),
    ],
)
def test_a_broken_setting_is_an_error_naming_the_key(tmp_path: Path, table: str, named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(")) as error:
        load_config(write_config(tmp_path, table))
    assert str(tmp_path / "pyproject.toml") in str(error.value)


def test_exclude_matches_names_and_paths_below_the_root(tmp_path: Path) -> None:
    config = Config(extend_exclude=("legacy/", "*_pb2.py"))
    assert config.is_excluded(tmp_path / "legacy", tmp_path)
    assert config.is_excluded(tmp_path / "src" / "model_pb2.py", tmp_path)
    assert config.is_excluded(tmp_path / ".venv", tmp_path)
    assert not config.is_excluded(tmp_path / "src" / "train.py", tmp_path)
    assert config.excludes_file(tmp_path / "legacy" / "old" / "train.py", tmp_path)


def test_exclude_replaces_the_default_excludes_and_extend_exclude_adds_to_them(tmp_path: Path) -> None:
    assert load_config(write_config(tmp_path, "exclude = []")).excluded_patterns == ()
    extended = load_config(write_config(tmp_path, 'extend-exclude = ["legacy/"]'))
    assert extended.excluded_patterns == (*DEFAULT_EXCLUDES, "legacy/")
    assert "env" not in DEFAULT_EXCLUDES  # reinforcement-learning packages are named so


def test_a_config_file_of_its_own_holds_the_keys_at_its_top_level(tmp_path: Path) -> None:
    path = tmp_path / "torchdevlint.toml"
    path.write_text('ignore = ["TDL004"]\n[per-file-ignores]\n"tests/*" = ["TDL0"]\n'
                    '[load-without-map-location]\nmap-location = "cuda"\n')
    config = load_config(path)
    assert config.ignore == ("TDL004",) and config.per_file_ignores == (("tests/*", ("TDL0",)),)
    assert config.rule_options["TDL003"] == LoadOptions(map_location="cuda")
    assert config.ignored_codes(tmp_path / "tests" / "test_a.py", tmp_path) == ("TDL0",)
    assert config.ignored_codes(tmp_path / "src" / "a.py", tmp_path) == ()
    path.write_text("respect-gitignore = 1\n")
    with pytest.raises(ConfigError, match="respect-gitignore must be true or false") as error:
        load_config(path)
    assert "[tool.torchdevlint]" not in str(error.value) and str(path) in str(error.value)


# ---- the one path from configuration and command line to rules --------------------------

def test_a_command_line_select_replaces_the_configured_selection(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, 'select = ["TDL0"]\nignore = ["TDL001"]'))
    assert "TDL001" not in codes(resolve_rules(config))
    assert codes(resolve_rules(config, CommandLineSelection(select=("TDL001",)))) == {"TDL001"}


def test_command_line_ignore_and_extend_select_add_to_the_configuration(tmp_path: Path) -> None:
    config = load_config(write_config(tmp_path, 'ignore = ["TDL002"]'))
    chosen = codes(resolve_rules(config, CommandLineSelection(ignore=("TDL003",), extend_select=("TDL103",))))
    assert "TDL002" not in chosen and "TDL003" not in chosen and "TDL103" in chosen


def test_settings_found_from_a_folder_name_the_config_and_its_root(tmp_path: Path) -> None:
    write_config(tmp_path, 'ignore = ["TDL001"]')
    (tmp_path / "sub").mkdir()
    settings = SettingsFinder(tmp_path / "sub").fallback
    assert settings.root == tmp_path.resolve()
    assert "TDL001" not in codes(settings.rules)


def test_a_bad_command_line_selector_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="TDL8"):
        SettingsFinder(tmp_path, selection=CommandLineSelection(select=("TDL8",)))


# ---- suppression ------------------------------------------------------------------------

@pytest.mark.parametrize(
    ("line", "suppressed"),
    [
        ("x.cuda()  # noqa", True),
        ("x.cuda()  # NOQA", True),
        ("x.cuda()  # noqa: TDL001", True),
        ("x.cuda()  # noqa:TDL001,TDL004", True),
        ("x.cuda()  # noqa: TDL004 TDL001", True),
        ("x.cuda()  # noqa:   TDL0, E501", True),
        # A colon with no code after it is malformed, as in ruff: it suppresses nothing.
        ("x.cuda()  # noqa: TDL", False),
        ("x.cuda()  # noqa:", False),
        ("x.cuda()  # noqa-ish", False),
        ("x.cuda()  # noqa because of the demo", True),
        ("x.cuda()  # noqa: TDL004", False),
        ("x.cuda()  # noqa: E501", False),
        ("x.cuda()  # a comment about noqa-less code", False),
        ("x.cuda()", False),
    ],
)
def test_noqa_comments(line: str, suppressed: bool) -> None:
    assert is_suppressed(line, "TDL001") is suppressed


@pytest.mark.parametrize(
    ("files", "floor"),
    [
        ({"pyproject.toml": '[project]\nname = "p"\ndependencies = ["numpy", "torch>=2.2,<3"]\n'}, "2.2"),
        ({"pyproject.toml": '[tool.poetry.dependencies]\ntorch = "^2.4"\n'}, "2.4"),
        ({"setup.cfg": "[options]\ninstall_requires =\n    torchvision>=0.20\n    torch==2.1.0\n"}, "2.1.0"),
        ({"setup.py": 'from setuptools import setup\nsetup(install_requires=["torch ~= 2.3"])\n'}, "2.3"),
        ({"requirements.txt": "# pinned\ntorchvision==0.21\ntorch>=2.0\n"}, "2.0"),
        ({"requirements.txt": "torch\n"}, "2.6"),  # no lower bound: the default
        ({}, "2.6"),
    ],
)
def test_tdl203s_torch_version_defaults_to_the_floor_the_project_declares(
        tmp_path: Path, files: dict[str, str], floor: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    settings = SettingsFinder(tmp_path, selection=CommandLineSelection(select=("TDL203",))).fallback
    options = settings.rule_options.get("TDL203")
    assert getattr(options, "torch_version", "2.6") == floor


def test_tdl205s_fix_is_safe_only_where_a_floor_of_2_3_or_later_is_declared(tmp_path: Path) -> None:
    source = "import torch\nscaler = torch.cuda.amp.GradScaler()\n"
    (tmp_path / "train.py").write_text(source)

    def applicability() -> str:
        found = json.loads(run_cli("check", "--select", "TDL205", "--output-format", "json", "train.py",
                                   cwd=tmp_path).stdout)
        return str(found[0]["fix"]["applicability"])

    assert applicability() == "unsafe"  # nothing says which torch: the code may support one before 2.3
    (tmp_path / "requirements.txt").write_text("torch>=2.4\n")
    assert applicability() == "safe"
    (tmp_path / "requirements.txt").write_text("torch>=2.1\n")
    assert applicability() == "unsafe"


def test_a_configured_torch_version_wins_over_the_projects_floor(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "p"\ndependencies = ["torch>=2.2"]\n'
        '[tool.torchdevlint.TDL203]\ntorch-version = "2.7"\n')
    selection = CommandLineSelection(select=("TDL203",))
    options = SettingsFinder(tmp_path, selection=selection).fallback.rule_options["TDL203"]
    assert options.torch_version == "2.7"


def test_tdl203s_fix_below_2_6_asks_torch_cuda(tmp_path: Path) -> None:
    (tmp_path / "requirements.txt").write_text("torch>=2.2\n")
    (tmp_path / "gpu.py").write_text("import torch\nx = torch.ones(2).cuda()\n")
    result = run_cli("check", "--no-cache", "--select", "TDL203", "--unsafe-fixes", "--diff", "gpu.py", cwd=tmp_path)
    assert '+device = torch.device("cuda" if torch.cuda.is_available() else "cpu")' in result.stdout
    assert "accelerator" not in result.stdout
