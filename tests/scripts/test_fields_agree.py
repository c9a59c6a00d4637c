"""scripts/fields_agree.py: the comparison of saved fields between engines and machines (issue 38's 1e-5 check)."""

import numpy as np
from helpers.scripts import load_script

agree = load_script("fields_agree")


def _fields(rho: np.ndarray, u: np.ndarray, config: str = "case=cavity", engine: str = "xla") -> dict:
    return {f"{config}|{engine}|rho": rho, f"{config}|{engine}|u": u}


def test_differences_are_relative_to_the_references_largest_value_and_the_exit_says_above_the_bound(tmp_path, capsys):
    rng = np.random.default_rng(0)
    rho, u = 1 + 0.01 * rng.standard_normal((8, 6)), 0.1 * rng.standard_normal((2, 8, 6))
    np.savez(tmp_path / "ref.npz", **_fields(rho, u))
    near_u = u.copy()
    near_u[0, 3, 2] += 1e-7  # 1e-7 / max|u| of about 0.25
    far_rho = rho.copy()
    far_rho[5, 1] += 1e-3
    np.savez(tmp_path / "near.npz", **_fields(rho, near_u, engine="pallas"))
    np.savez(tmp_path / "far.npz", **_fields(far_rho, u, engine="pallas"), **_fields(rho, u, "case=other", "pallas"))
    rows = agree.differences(dict(np.load(tmp_path / "ref.npz")), dict(np.load(tmp_path / "near.npz")))
    assert [(c, e) for c, e, _, _ in rows] == [("case=cavity", "pallas")]
    assert rows[0][2] == 0 and np.isclose(rows[0][3], 1e-7 / np.abs(u).max())
    assert agree.compare(tmp_path / "ref.npz", [tmp_path / "near.npz"], 1e-5) == 0
    # far: rho off by 1e-3 / max|rho|; a configuration the reference lacks is left out, not compared
    assert agree.compare(tmp_path / "ref.npz", [tmp_path / "far.npz"], 1e-5) == 1
    out = capsys.readouterr().out
    assert "ABOVE 1e-05" in out and "case=other" not in out


def test_run_options_split_on_double_dashes():
    assert agree._configs(["case=cavity", "--", "case=taylor_green", "grid.nx=8", "--"]) == [
        ["case=cavity"], ["case=taylor_green", "grid.nx=8"]]
