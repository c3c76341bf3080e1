"""The stand-in pynvml has nvidia-ml-py's names, values and error classes (the pinned release)."""

from __future__ import annotations

import importlib.util
import sys
from importlib.metadata import distribution

import pynvml as stand_in  # first on sys.path: the stand-in (see conftest.py)


def real_pynvml():
    path = distribution("nvidia-ml-py").locate_file("pynvml.py")
    spec = importlib.util.spec_from_file_location("real_pynvml", path)
    module = importlib.util.module_from_spec(spec)
    # It looks itself up in sys.modules while loading; loading needs no driver, only nvmlInit does.
    sys.modules["real_pynvml"] = module
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["real_pynvml"]
    return module


def test_every_name_the_stand_in_shares_with_nvml_is_spelled_and_valued_as_in_nvidia_ml_py():
    real = real_pynvml()
    ours = [
        name
        for name in vars(stand_in)
        if name.startswith(("NVML_", "NVMLError", "nvmlDevice", "nvmlSystem", "nvmlEvent", "nvmlInit", "nvmlShutdown"))
    ]
    assert len(ours) > 50
    missing = [name for name in ours if not hasattr(real, name)]
    assert missing == []
    constants = [name for name in ours if isinstance(getattr(stand_in, name), int)]
    assert {n: getattr(stand_in, n) for n in constants} == {n: getattr(real, n) for n in constants}
    # Errors: the same class for each code, found the way callers find it (NVMLError(code)).
    for code in (real.NVML_ERROR_NOT_SUPPORTED, real.NVML_ERROR_GPU_IS_LOST, real.NVML_ERROR_TIMEOUT):
        assert type(stand_in.NVMLError(code)).__name__ == type(real.NVMLError(code)).__name__


def test_every_nvml_function_the_agent_calls_exists_in_nvidia_ml_py():
    import re
    from pathlib import Path

    source = (Path(__file__).parents[2] / "agents" / "device.py").read_text()
    called = set(re.findall(r'"(nvml[A-Z]\w+)"', source)) | set(re.findall(r"nvml\.(nvml[A-Z]\w+)\(", source))
    assert "nvmlDeviceGetPowerUsage" in called
    real = real_pynvml()
    assert sorted(name for name in called if not callable(getattr(real, name, None))) == []
