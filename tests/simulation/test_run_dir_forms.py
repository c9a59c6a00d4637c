"""Every form of run directory is resolved as Hydra resolves it before Hydra starts: a refused run changes no byte
and no file name of an earlier run (.hydra/*.yaml, lbm.log, results), adds no multirun.yaml, and creates nothing."""

import datetime
import hashlib
import json
from pathlib import Path

import pytest

import lbm
from lbm.cli import main
from lbm.config.command_line import destination
from lbm.errors import LbmError

TG = ["case=taylor_green", "grid.nx=16", "grid.ny=16", "output.plots=false", "steps=5"]


def tree(root: Path) -> dict[str, str]:
    """Every file and directory under ``root`` (relative path) with the SHA-256 of a file's bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def earlier(tmp_path_factory) -> Path:
    """An earlier run at <root>/<today>/myrun, made with hydra.run.dir=<root>/${now:%Y-%m-%d}/myrun; and a file."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["run", *TG, f"hydra.run.dir={root}/${{now:%Y-%m-%d}}/myrun"]) == 0
    (run_dir,) = root.glob("*/myrun")
    assert run_dir.parent.name == datetime.date.today().isoformat()
    metrics = json.loads((run_dir / "metrics.json").read_text())
    assert metrics["steps"] == 5
    assert metrics["native_threads"] == (1 if metrics["engine"] == "native" else None)  # 256 cells: one thread
    assert {".hydra", "lbm.log"} <= {p.name for p in run_dir.iterdir()}
    (root / "a_file").write_text("not a directory")
    return run_dir


def refused_forms(run_dir: Path) -> list[list[str]]:
    """Command lines whose directory is the earlier run's, or lies in it, written in every form Hydra resolves."""
    root, day = run_dir.parent.parent, run_dir.parent.name
    return [
        [f"hydra.run.dir={root}/${{now:%Y-%m-%d}}/myrun"],                         # the same command again
        [f"hydra.run.dir={root}/{day}/my${{oc.env:LBM_TEST_SUFFIX}}"],               # an environment variable
        [f"hydra.run.dir={root}/{day}/../{day}/myrun"],                              # another spelling of it
        ["hydra.run.dir=${hydra:runtime.cwd}/myrun"],                                # Hydra's own resolver (cwd)
        [f"hydra.run.dir={run_dir}/again"],                                          # inside the earlier run
        ["-m", f"hydra.sweep.dir={run_dir}", "hydra.sweep.subdir=."],               # a sweep onto it
        ["-m", f"hydra.sweep.dir={run_dir}"],                                        # a sweep into it (multirun.yaml)
        ["-m", f"hydra.sweep.dir={root}/{day}", "hydra.sweep.subdir=my${oc.env:LBM_TEST_SUFFIX}"],
        ["-m", f"hydra.sweep.dir={root}", "hydra.sweep.subdir=${now:%Y-%m-%d}/myrun"],
        ["hydra.mode=MULTIRUN", f"hydra.sweep.dir={run_dir}", "hydra.sweep.subdir=."],  # a sweep without -m
        [f"hydra.run.dir={root}/a_file/run"],                                        # under a file
    ]


@pytest.mark.parametrize("form", range(11))
def test_a_refused_run_changes_nothing_of_an_earlier_run(earlier, form, capsys, monkeypatch):
    monkeypatch.setenv("LBM_TEST_SUFFIX", "run")
    monkeypatch.chdir(earlier.parent)
    args = refused_forms(earlier)[form]
    root = earlier.parent.parent
    before = tree(root)
    assert main(["run", *TG, "steps=7", *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lbm: error: "), err
    assert "refusing to overwrite" in err[0] or "a file, not a directory" in err[0], err
    assert tree(root) == before  # every byte and every name, .hydra/*.yaml and lbm.log included
    assert not list(root.rglob("multirun.yaml"))


def test_jobs_of_a_sweep_that_would_share_a_directory_are_refused_before_any_exists(tmp_path, capsys):
    args = ["run", "-m", *TG, "grid.nx=12,16", f"hydra.sweep.dir={tmp_path / 'sweep'}", "hydra.sweep.subdir=."]
    assert main(args) == 2
    assert "jobs 0 and 1 of the sweep would both write" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_an_unresolvable_directory_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LBM_TEST_UNSET", raising=False)
    assert main(["run", *TG, "hydra.run.dir=out/${oc.env:LBM_TEST_UNSET}"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cannot resolve the run directory (hydra.run.dir)" in err[0] and "LBM_TEST_UNSET" in err[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow  # compositions only; the refusals above resolve the same forms in the fast lane
def test_the_directories_resolved_are_hydras(tmp_path, monkeypatch):
    """destination() against the directories Hydra's own run_job then wrote, for resolvers and any subdir."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LBM_TEST_SUFFIX", "x")
    from lbm.cli import _task

    run = [*TG, "hydra.run.dir=a/${oc.env:LBM_TEST_SUFFIX}/${hydra:job.name}"]
    assert destination(run, False, _task).job_dirs == [tmp_path / "a" / "x" / "lbm"]
    sweep = [*TG, "grid.nx=12,16", "hydra.sweep.dir=s", "hydra.sweep.subdir=${hydra.job.override_dirname}"]
    assert destination(sweep, True, _task).job_dirs == [
        tmp_path / "s" / f"case=taylor_green,grid.nx={n},grid.ny=16,output.plots=False,steps=5" for n in (12, 16)]
    dot = destination([*TG, "hydra.sweep.dir=s", "hydra.sweep.subdir=."], True, _task)
    assert dot.job_dirs == [tmp_path / "s"] and dot.sweep_dir == tmp_path / "s"


@pytest.mark.slow  # six small runs; the refusals above keep the resolution and the pinning in the fast lane
def test_runs_go_exactly_where_they_were_checked(tmp_path, monkeypatch):
    """A clock-read sweep subdir, a sweep into one fresh directory (subdir .), and a directory name Hydra's
    override grammar must escape: each job's files land in the directory checked before Hydra started."""
    monkeypatch.chdir(tmp_path)
    assert main(["run", "-m", *TG, "grid.nx=12,16", "hydra.sweep.dir=clock",
                 "hydra.sweep.subdir=${now:%H-%M-%S}_${hydra.job.num}"]) == 0
    jobs = sorted((tmp_path / "clock").glob("*_[01]"))
    assert [json.loads((j / "metrics.json").read_text())["grid"][0] for j in jobs] == [12, 16]
    assert main(["run", "-m", *TG, "hydra.sweep.dir=new/deep/one", "hydra.sweep.subdir=."]) == 0
    one = tmp_path / "new" / "deep" / "one"
    assert {"multirun.yaml", "metrics.json", ".hydra", "lbm.log"} <= {p.name for p in one.iterdir()}
    odd = tmp_path / "a b,c=d"
    assert main(["run", *TG, f"hydra.run.dir='{odd}'"]) == 0
    assert json.loads((odd / "metrics.json").read_text())["grid"] == [16, 16]
    from lbm.cli import _task

    named = [*TG, "grid.nx=12,16", "hydra.sweep.dir=named", "hydra.sweep.subdir=${hydra.job.override_dirname}"]
    expected = destination(named, True, _task).job_dirs
    assert main(["run", "-m", *named]) == 0
    assert sorted(p.parent for p in (tmp_path / "named").glob("*/metrics.json")) == expected


def test_the_python_api_refuses_an_earlier_run_in_any_form(earlier, monkeypatch):
    monkeypatch.setenv("LBM_TEST_SUFFIX", "run")
    root = earlier.parent.parent
    before = tree(root)
    for run_dir in (earlier, f"{root}/${{now:%Y-%m-%d}}/my${{oc.env:LBM_TEST_SUFFIX}}", earlier / "inside"):
        with pytest.raises(LbmError, match="refusing to overwrite: choose another run_dir$"):
            lbm.run(TG, run_dir=run_dir)
    with pytest.raises(LbmError, match="a_file is a file, not a directory; set run_dir"):
        lbm.run(TG, run_dir=root / "a_file" / "x")
    with pytest.raises(LbmError, match="a_file is a file, not a directory; set run_dir"):
        lbm.run(TG, run_dir=root / "a_file")
    (root / "dangling").symlink_to(root / "nowhere")
    with pytest.raises(LbmError, match="dangling is a symbolic link to .*nowhere, which does not exist; set run_dir"):
        lbm.run(TG, run_dir=root / "dangling")
    (root / "dangling").unlink()
    with pytest.raises(LbmError, match="run_dir=.*cannot resolve it"):
        lbm.run(TG, run_dir="${hydra:job.name}")
    assert tree(root) == before
