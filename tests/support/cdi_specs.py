"""CDI spec files and Docker Engine API device requests with CDI names, in their upstream shapes.

Sources (read with the ``fetch`` tool; the texts below keep their byte shapes):

- NVIDIA Container Toolkit, ``cmd/nvidia-ctk/cdi/generate/generate_test.go`` (``TestGenerateSpec``,
  case "default"), github.com/NVIDIA/nvidia-container-toolkit at v1.20.0-27-gd34b3046: the YAML
  ``nvidia-ctk cdi generate`` writes. Changes made here, each what ``nvidia-ctk`` itself writes on
  such a node: kind ``nvidia.com/gpu`` (the tool's default vendor and class; the test passes
  ``example.com/device``), ``{{ .driverRoot }}`` empty (driver root ``/``), the hooks' list cut to
  its first entry and one mount (what is read here is ``devices[]`` and ``containerEdits.env``),
  and a second GPU whose device node is ``/dev/nvidia1``. Device names per ``--device-name-strategy``
  (``pkg/nvcdi/namer.go``): ``index`` (``0``), ``uuid`` (``GPU-<uuid>``), ``type-index``
  (``gpu0``, ``mig1:0``).
- The CDI specification, ``SPEC.md`` of github.com/cncf-tags/container-device-interface at
  v1.1.0-69-g05ae4b5: the JSON form and ``deviceNodes`` with ``type``/``major``/``minor``.
- Moby, ``integration/container/cdi_test.go`` (``TestCreateWithCDIDevices``) and
  ``api/swagger.yaml`` (``DeviceRequest``), github.com/moby/moby at docker-v29.7.2-150-gb985e231:
  ``docker run --device vendor.com/class=name`` on an engine with CDI is, in ``GET
  /containers/{id}/json``, ``HostConfig.DeviceRequests: [{"Driver": "cdi", "DeviceIDs":
  ["vendor.com/class=name"]}]`` (Count 0, Capabilities and Options null as the Engine writes them);
  ``daemon/devices_nvidia_linux.go``: with ``nvidia-cdi-hook`` installed (Engine 29.2+) a
  ``--gpus`` request stays as given in the inspect and is turned into ``nvidia.com/gpu=<id>`` CDI
  devices when the container's OCI spec is made.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["cdi_device_request", "nvidia_ctk_spec", "nvidia_ctk_spec_json"]


def nvidia_ctk_spec(names: tuple[str, str] = ("0", "1"), minors: tuple[int, int] = (0, 1),
                    kind: str = "nvidia.com/gpu", extra_env: tuple[str, ...] = ()) -> str:
    """``nvidia-ctk cdi generate`` output for two GPUs named ``names`` with device nodes
    ``/dev/nvidia<minor>``, and ``all``."""
    env = "".join(f"        - {e}\n" for e in extra_env)
    return f"""---
cdiVersion: 0.5.0
kind: {kind}
devices:
    - name: "{names[0]}"
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia{minors[0]}
              hostPath: /dev/nvidia{minors[0]}
    - name: "{names[1]}"
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia{minors[1]}
              hostPath: /dev/nvidia{minors[1]}
    - name: all
      containerEdits:
        deviceNodes:
            - path: /dev/nvidia{minors[0]}
              hostPath: /dev/nvidia{minors[0]}
            - path: /dev/nvidia{minors[1]}
              hostPath: /dev/nvidia{minors[1]}
containerEdits:
    env:
        - NVIDIA_CTK_LIBCUDA_DIR=/lib/x86_64-linux-gnu
        - NVIDIA_VISIBLE_DEVICES=void
{env}    deviceNodes:
        - path: /dev/nvidiactl
          hostPath: /dev/nvidiactl
    hooks:
        - hookName: createContainer
          path: /usr/bin/nvidia-cdi-hook
          args:
            - nvidia-cdi-hook
            - create-symlinks
            - --link
            - libcuda.so.1::/lib/x86_64-linux-gnu/libcuda.so
          env:
            - NVIDIA_CTK_DEBUG=false
    mounts:
        - hostPath: /lib/x86_64-linux-gnu/libcuda.so.999.88.77
          containerPath: /lib/x86_64-linux-gnu/libcuda.so.999.88.77
          options:
            - ro
            - nosuid
            - nodev
            - rbind
            - rprivate
"""


def nvidia_ctk_spec_json(name: str = "0", minor: int = 0, kind: str = "nvidia.com/gpu") -> str:
    """The same spec in the CDI JSON form (``nvidia-ctk cdi generate --format json``), with the
    device nodes given by type, major and minor (SPEC.md's optional fields: a runtime then makes
    the node without looking for it on the host, which has no NVIDIA driver here)."""
    node = {"path": f"/dev/nvidia{minor}", "type": "c", "major": 195, "minor": minor}
    ctl = {"path": "/dev/nvidiactl", "type": "c", "major": 195, "minor": 255}
    spec = {"cdiVersion": "0.5.0", "kind": kind,
            "devices": [{"name": name, "containerEdits": {"deviceNodes": [node]}}],
            "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"], "deviceNodes": [ctl]}}
    return json.dumps(spec, separators=(",", ":")) + "\n"


def cdi_device_request(*names: str) -> dict[str, Any]:
    """One ``HostConfig.DeviceRequests`` entry of ``docker run --device <name>`` (Engine 28.2+ with CDI)."""
    return {"Driver": "cdi", "Count": 0, "DeviceIDs": list(names), "Capabilities": None, "Options": None}
