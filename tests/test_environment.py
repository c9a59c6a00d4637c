"""lbm.environment: one probe of device, versions, CPU and XLA_FLAGS for bench.json and metrics.json."""

import platform

import jax

from lbm import environment


def test_environment_names_the_device_and_versions(monkeypatch):
    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/nowhere")
    env = environment.environment()
    dev = jax.devices()[0]
    assert env["jax"] == jax.__version__ and env["python"] == platform.python_version()
    assert env["device"] == str(dev) and env["platform"] == dev.platform and env["device_count"] == jax.device_count()
    assert env["XLA_FLAGS"] == "--xla_dump_to=/nowhere"
    assert environment.device_label() == f"{dev.platform}:{dev.device_kind}".rstrip(":")


def test_cpu_model_and_id_read_the_first_cpu(tmp_path, monkeypatch):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nmodel name\t: Test CPU 9000\nflags\t\t: fpu sse2 avx2\n\n"
                    "processor\t: 1\nmodel name\t: Other\nflags\t\t: fpu\n")
    monkeypatch.setattr(environment, "CPUINFO", info)
    assert environment.cpu_model() == "Test CPU 9000"
    assert environment.cpu_id() == "model name\t: Test CPU 9000|flags\t\t: fpu sse2 avx2"
    monkeypatch.setattr(environment, "CPUINFO", tmp_path / "absent")
    assert environment.cpu_model() == (platform.processor() or platform.machine())
