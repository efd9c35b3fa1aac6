"""Regenerate pytorchjob_v1.json from the Kubeflow training-operator's PyTorchJob CRD.

    python tests/launch/schemas/vendor_pytorchjob_schema.py kubeflow.org_pytorchjobs.yaml

The input is manifests/base/crds/kubeflow.org_pytorchjobs.yaml of kubeflow/training-operator at the tag
named in SOURCE (Apache-2.0). Kept: the v1 openAPIV3Schema, less `status` (the operator writes it, a
manifest never does) and less the `description` texts (most of its size, and no validation meaning).
Nothing else is changed: the tests tighten it at load time (unknown fields refused), not here.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

SOURCE = ("https://github.com/kubeflow/training-operator/blob/v1.9.0/"
          "manifests/base/crds/kubeflow.org_pytorchjobs.yaml (commit 6f74c7f6b2ed6c27aabd82d0a316b23f0646059c)")
NOTICE = ("Derived from the PyTorchJob CustomResourceDefinition of Kubeflow training-operator v1.9.0, "
          "Copyright The Kubeflow Authors, licensed under the Apache License, Version 2.0 "
          "(http://www.apache.org/licenses/LICENSE-2.0). Source: " + SOURCE + ". Changes: only "
          "spec.versions[name=v1].schema.openAPIV3Schema kept, its status property and all description "
          "texts removed (tests/launch/schemas/vendor_pytorchjob_schema.py).")


def without_descriptions(node, in_properties: bool = False):
    """Drop the `description` keyword, never a property that happens to be called description."""
    if isinstance(node, dict):
        return {k: without_descriptions(v, in_properties=(k == "properties" and not in_properties))
                for k, v in node.items() if in_properties or k != "description"}
    if isinstance(node, list):
        return [without_descriptions(v) for v in node]
    return node


def main(crd_path: str) -> None:
    crd = yaml.safe_load(Path(crd_path).read_text())
    assert crd["kind"] == "CustomResourceDefinition" and crd["spec"]["names"]["kind"] == "PyTorchJob"
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    schema = without_descriptions(v1["schema"]["openAPIV3Schema"])
    schema["properties"].pop("status", None)
    out = Path(__file__).with_name("pytorchjob_v1.json")
    out.write_text(json.dumps({"$comment": NOTICE, **schema}, indent=1, sort_keys=True) + "\n")
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")


if __name__ == "__main__":
    main(sys.argv[1])
