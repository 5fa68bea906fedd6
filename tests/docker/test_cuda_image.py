"""The CUDA image builds here and is sound without a GPU: CUDA torch, faiss-gpu, the service's command line.

`make test-docker`. This machine has no GPU, so nothing here runs a CUDA kernel; docs/deploy.md says so.
"""

from __future__ import annotations

import json

import pytest

from tests.docker.conftest import docker, image_size, say

pytestmark = pytest.mark.docker

CHECK = """
import json, faiss, torch
print(json.dumps({"cuda": torch.version.cuda, "faiss": faiss.__version__,
                  "faiss_gpu": hasattr(faiss, "StandardGpuResources")}))
"""


def test_cuda_image_has_cuda_torch_and_faiss_gpu(cuda_image):
    say(f"image size: {cuda_image} {image_size(cuda_image) / 1e9:.2f} GB")
    found = json.loads(docker("run", "--rm", "--network", "none", "--entrypoint", "python", cuda_image,
                              "-c", CHECK).stdout.strip().splitlines()[-1])
    say(f"inside {cuda_image}: {found}")
    assert found["cuda"], found  # None in a CPU build of torch
    assert found["faiss_gpu"], found  # faiss-cpu has no GPU resources class
    # faiss-cpu is gone: its files would shadow faiss-gpu's
    assert docker("run", "--rm", "--network", "none", "--entrypoint", "python", cuda_image,
                  "-m", "pip", "show", "faiss-cpu", check=False).returncode != 0


def test_cuda_image_runs_the_service_command_as_non_root(cuda_image):
    out = docker("run", "--rm", "--network", "none", cuda_image, "--help").stdout
    assert "usage: spanseek serve" in out and "--index" in out
    assert docker("run", "--rm", "--network", "none", "--entrypoint", "id", cuda_image, "-u").stdout.strip() == "10001"
