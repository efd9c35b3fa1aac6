"""The Kubernetes manifests: valid PyTorchJobs (the training-operator CRD's schema, unknown fields refused as
`kubectl apply` does) whose pods reach the RDMA fabric, and a TCP fallback that cannot pass unnoticed."""
from __future__ import annotations

import copy
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema  # the test extra has it: never skipped
import pytest
import yaml

from telemetry.capture.fabric import EXPECTATIONS
from trainer.config import RECIPE_RELATIVE_PATHS, load_recipe

from ..conftest import REPO


SCHEMA = Path(__file__).with_name("schemas") / "pytorchjob_v1.json"
MANIFESTS = sorted((REPO / "launch" / "k8s").glob("*.yaml"))
REPLICA_TYPES = {"Master", "Worker"}  # training-operator v1 PyTorchReplicaType values
RDMA_TRANSPORTS = {"roce", "infiniband"}
ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")  # Kubernetes' rule for env var names


def strict(schema):
    """The CRD schema with unknown fields refused: the API server would prune them silently, and
    `kubectl apply`'s default strict field validation rejects them; a typo must not pass here either."""
    if isinstance(schema, dict):
        out = {k: strict(v) if k != "properties" else {p: strict(s) for p, s in v.items()}
               for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema \
                and not schema.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    return schema


def _list_map_keys(validator, keys, instance, schema):
    """x-kubernetes-list-type: map lists are keyed (containers by name, ...): keys must be unique."""
    if schema.get("x-kubernetes-list-type") != "map" or not validator.is_type(instance, "array"):
        return
    seen = set()
    for item in instance:
        key = tuple(item.get(k) for k in keys) if isinstance(item, dict) else None
        if key in seen:
            yield jsonschema.ValidationError(f"duplicate entry for key {dict(zip(keys, key))}")
        seen.add(key)


def validator():
    base = jsonschema.Draft7Validator
    cls = jsonschema.validators.extend(base, {"x-kubernetes-list-map-keys": _list_map_keys})
    schema = json.loads(SCHEMA.read_text())
    assert "Apache License" in schema["$comment"]  # the vendored file keeps its source and licence
    return cls(strict(schema))


def schema_errors(doc) -> list[str]:
    return sorted(f"{'.'.join(map(str, e.absolute_path)) or '<root>'}: {e.message}"
                  for e in validator().iter_errors(doc))


def load(path: Path) -> dict:
    (doc,) = list(yaml.safe_load_all(path.read_text()))  # anchors (&pod / *pod) resolve here as in kubectl
    return doc


def _env(container) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container.get("env", [])}


def _override(command: list[str], key: str) -> str | None:
    return next((a.split("=", 1)[1] for a in command if a.startswith(key + "=")), None)


def pod_problems(job: dict) -> list[str]:
    """Core Pod rules the CRD schema does not carry, and what the fabric needs: RDMA devices, pinned
    memory, a memory-backed /dev/shm, the NCCL environment, and fabric.expect on an RDMA transport."""
    out = []
    spec = job["spec"]
    replicas = spec["pytorchReplicaSpecs"]
    if set(replicas) - REPLICA_TYPES:
        out.append(f"replica types {sorted(set(replicas) - REPLICA_TYPES)}: allowed {sorted(REPLICA_TYPES)}")
    if replicas.get("Master", {}).get("replicas") != 1:
        out.append("Master: exactly 1 replica (it hosts the rendezvous)")
    nproc = spec.get("nprocPerNode")
    for rtype, rspec in replicas.items():
        pod = rspec["template"]["spec"]
        where = f"{rtype}"
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        if len(volumes) != len(pod.get("volumes", [])):
            out.append(f"{where}: duplicate volume names")
        if pod.get("hostNetwork") and pod.get("dnsPolicy") != "ClusterFirstWithHostNet":
            out.append(f"{where}: hostNetwork needs dnsPolicy ClusterFirstWithHostNet to resolve MASTER_ADDR")
        networks = rspec["template"].get("metadata", {}).get("annotations", {}).get("k8s.v1.cni.cncf.io/networks")
        for c in pod["containers"]:
            where = f"{rtype}/{c['name']}"
            mounts = c.get("volumeMounts", [])
            for m in mounts:
                if m["name"] not in volumes:
                    out.append(f"{where}: volumeMount {m['name']!r} names no volume")
            if len({m["mountPath"] for m in mounts}) != len(mounts):
                out.append(f"{where}: two mounts on one path")
            shm = [m for m in mounts if m["mountPath"] == "/dev/shm"]
            if not shm or volumes.get(shm[0]["name"], {}).get("emptyDir", {}).get("medium") != "Memory":
                out.append(f"{where}: /dev/shm must be an emptyDir with medium Memory")
            names = [e["name"] for e in c.get("env", [])]
            bad = [n for n in names if not ENV_NAME.match(n)]
            if bad or len(set(names)) != len(names):
                out.append(f"{where}: env names invalid {bad} or repeated")
            limits = c.get("resources", {}).get("limits", {})
            requests = c.get("resources", {}).get("requests", {})
            if str(limits.get("nvidia.com/gpu")) != str(nproc):
                out.append(f"{where}: nvidia.com/gpu {limits.get('nvidia.com/gpu')!r} != nprocPerNode {nproc!r}")
            rdma = {k: v for k, v in limits.items() if k.startswith("rdma/")}
            if not rdma or not all(isinstance(v, int) and v > 0 for v in rdma.values()):
                out.append(f"{where}: no RDMA device-plugin resource (rdma/...: N) in limits")
            for k, v in requests.items():  # extended resources: a request must equal its limit
                if "/" in k and k in limits and str(v) != str(limits[k]):
                    out.append(f"{where}: request {k}={v} differs from its limit {limits[k]}")
            caps = c.get("securityContext", {}).get("capabilities", {}).get("add", [])
            if "IPC_LOCK" not in caps:
                out.append(f"{where}: securityContext.capabilities.add lacks IPC_LOCK (RDMA pins memory)")
            env = _env(c)
            for key in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"):
                if not env.get(key):
                    out.append(f"{where}: {key} unset")
            if env.get("NCCL_IB_DISABLE") not in (None, "0"):
                out.append(f"{where}: NCCL_IB_DISABLE={env['NCCL_IB_DISABLE']} turns RDMA off")
            if env.get("NCCL_NET", "IB").lower() == "socket":
                out.append(f"{where}: NCCL_NET=Socket turns RDMA off")
            if set(env) & {"NCCL_DEBUG", "NCCL_DEBUG_FILE", "NCCL_DEBUG_SUBSYS"}:
                out.append(f"{where}: NCCL_DEBUG* set: telemetry could not read the transport from the run's logs")
            expect = _override(c.get("command", []) + c.get("args", []), "fabric.expect")
            if expect not in RDMA_TRANSPORTS:
                out.append(f"{where}: fabric.expect={expect}: a TCP fallback would pass unnoticed "
                           f"(want one of {sorted(RDMA_TRANSPORTS)})")
            if expect == "roce" and not pod.get("hostNetwork") and not networks:
                out.append(f"{where}: RoCE on the pod network needs a secondary network on the RoCE NIC "
                           "(k8s.v1.cni.cncf.io/networks) or hostNetwork")
    return out


@pytest.fixture(scope="module", params=MANIFESTS, ids=lambda p: p.name)
def job(request):
    return load(request.param)


def test_both_variants_are_there():
    assert {p.name for p in MANIFESTS} >= {"pytorchjob.yaml", "pytorchjob-hostnetwork.yaml"}


def test_manifest_matches_the_pytorchjob_schema(job):
    assert job["apiVersion"] == "kubeflow.org/v1" and job["kind"] == "PyTorchJob"
    assert schema_errors(job) == []


def test_pods_reach_the_fabric(job):
    assert pod_problems(job) == []


@pytest.mark.integration
def test_command_resolves_at_the_jobs_world_size(job):
    """The container's recipe and overrides (fabric.expect included) load, at the world the job makes."""
    spec = job["spec"]
    world = sum(r["replicas"] for r in spec["pytorchReplicaSpecs"].values()) * int(spec["nprocPerNode"])
    for rspec in spec["pytorchReplicaSpecs"].values():
        (c,) = rspec["template"]["spec"]["containers"]
        cmd = c["command"] + c.get("args", [])
        assert cmd[:5] == ["python", "-m", "launch.torchrun", "-m", "trainer"]
        proc = subprocess.run([sys.executable, "-m", "trainer", *cmd[5:], "--dry-run", "--world-size", str(world)],
                              cwd=REPO, capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        assert f"world {world} = " in proc.stdout


def test_a_restarted_pod_rejoins_through_the_c10d_rendezvous_or_fails_in_join_timeout(job):
    """Static rendezvous (no elasticPolicy) left a restarted pod waiting distributed.timeout_s; the job asks
    for the c10d rendezvous on the Master pod, every pod of the job, a join timeout far below 1,800 s, and
    runs torchrun through launch.torchrun (a failed join is one line)."""
    spec, name = job["spec"], job["metadata"]["name"]
    elastic = spec["elasticPolicy"]
    pods = sum(r["replicas"] for r in spec["pytorchReplicaSpecs"].values())
    assert elastic["rdzvBackend"] == "c10d" and elastic["rdzvHost"] == f"{name}-master-0"
    assert elastic["minReplicas"] == elastic["maxReplicas"] == pods  # the layout is for a fixed world
    conf = {kv["key"]: kv["value"] for kv in elastic["rdzvConf"]}
    assert 0 < int(conf["join_timeout"]) < 1800
    for rspec in spec["pytorchReplicaSpecs"].values():
        assert rspec["restartPolicy"] == "OnFailure"  # the pod is restarted, then rejoins
        (c,) = rspec["template"]["spec"]["containers"]
        assert c["command"][:3] == ["python", "-m", "launch.torchrun"]


def test_launch_torchrun_reads_what_the_operator_sets(monkeypatch):
    """The training operator passes elasticPolicy to torchrun as PET_* variables (kubeflow/training-operator
    pkg/controller.v1/pytorch/elastic.go); launch.torchrun parses them as torchrun does and names them."""
    from torch.distributed.run import parse_args

    from launch.torchrun import _describe
    for k, v in {"PET_RDZV_BACKEND": "c10d", "PET_RDZV_ENDPOINT": "job-master-0:29400", "PET_RDZV_ID": "job",
                 "PET_NNODES": "8:8", "PET_RDZV_CONF": "join_timeout=600", "PET_NPROC_PER_NODE": "8"}.items():
        monkeypatch.setenv(k, v)
    assert _describe(parse_args(["-m", "trainer", "x.yaml"])) == \
        "rendezvous c10d at job-master-0:29400 (id job) for 8:8 nodes, join_timeout 600 s"


def test_the_schema_check_catches_wrong_types_missing_fields_and_typos():
    job = load(REPO / "launch" / "k8s" / "pytorchjob.yaml")
    assert schema_errors(job) == []

    def broken(edit):
        doc = copy.deepcopy(job)
        edit(doc)
        return schema_errors(doc)

    master = lambda d: d["spec"]["pytorchReplicaSpecs"]["Master"]  # noqa: E731
    assert any("'1' is not of type 'integer'" in e for e in broken(lambda d: master(d).update(replicas="1")))
    assert any("8 is not of type 'string'" in e for e in broken(lambda d: d["spec"].update(nprocPerNode=8)))
    assert any("'name' is a required property" in e
               for e in broken(lambda d: master(d)["template"]["spec"]["containers"][0].pop("name")))
    assert any("'restartpolicy' was unexpected" in e
               for e in broken(lambda d: master(d).update(restartpolicy=master(d).pop("restartPolicy"))))
    assert any("is not of type 'string'" in e  # env values are strings: an unquoted 0 is refused
               for e in broken(lambda d: master(d)["template"]["spec"]["containers"][0]["env"].append(
                   {"name": "NCCL_IB_DISABLE", "value": 0})))
    assert any("duplicate entry" in e
               for e in broken(lambda d: master(d)["template"]["spec"]["containers"].append(
                   copy.deepcopy(master(d)["template"]["spec"]["containers"][0]))))
    assert any("'pytorchReplicaSpecs' is a required property" in e
               for e in broken(lambda d: d["spec"].pop("pytorchReplicaSpecs")))


def test_the_pod_check_names_what_a_job_without_the_fabric_settings_lacks():
    """The previous manifest's pod (GPUs and /dev/shm only) fails on each fabric requirement, by name."""
    job = load(REPO / "launch" / "k8s" / "pytorchjob.yaml")
    for rspec in job["spec"]["pytorchReplicaSpecs"].values():
        rspec["template"] = copy.deepcopy(rspec["template"])
        rspec["template"].pop("metadata")
        (c,) = rspec["template"]["spec"]["containers"]
        c["command"] = [a for a in c["command"] if not a.startswith("fabric.expect=")]
        c["env"] = [{"name": "GLOO_SOCKET_IFNAME", "value": "eth0"}, {"name": "NCCL_DEBUG", "value": "WARN"}]
        c["resources"]["limits"].pop("rdma/rdma_shared_device_a")
        c.pop("securityContext")
    problems = "\n".join(pod_problems(job))
    for needle in ("RDMA device-plugin resource", "IPC_LOCK", "NCCL_SOCKET_IFNAME unset", "NCCL_IB_HCA unset",
                   "NCCL_DEBUG* set", "fabric.expect=None"):
        assert needle in problems
    assert schema_errors(job) == []  # all of it schema-valid: the schema alone would not have caught it


def test_fabric_expectations_named_here_exist():
    assert RDMA_TRANSPORTS <= set(EXPECTATIONS)


# ---------------------------------------------------------------- staged weights and data on a volume

def _containers(job: dict):
    for rtype, rspec in job["spec"]["pytorchReplicaSpecs"].items():
        pod = rspec["template"]["spec"]
        for c in pod["containers"]:
            yield f"{rtype}/{c['name']}", pod, c


def _recipe_of(c: dict):
    cmd = c["command"] + c.get("args", [])
    assert cmd[:5] == ["python", "-m", "launch.torchrun", "-m", "trainer"]
    recipe, overrides = cmd[5], [a for a in cmd[6:] if "=" in a and not a.startswith("-")]
    return load_recipe(str(REPO / recipe), overrides)


def _under(path: str, root: str) -> bool:
    path, root = os.path.normpath(path), os.path.normpath(root)
    return path == root or path.startswith(root.rstrip("/") + "/")


def volume_problems(job: dict) -> list[str]:
    """Every model and data path the container's recipe reads lies on a mounted persistent volume, the run
    directory on a writable one, and nothing is fetched from the hub at run time."""
    out = []
    for where, pod, c in _containers(job):
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        pvc_mounts = [(m["mountPath"], m.get("readOnly", False)) for m in c.get("volumeMounts", [])
                      if "persistentVolumeClaim" in volumes.get(m["name"], {})]
        recipe = _recipe_of(c)
        for key in RECIPE_RELATIVE_PATHS:
            section, field = key.split(".")
            value = getattr(getattr(recipe, section), field)
            if value is None or (key.startswith("data.") and recipe.data.synthetic):
                continue
            if not os.path.isabs(value):
                out.append(f"{where}: {key}={value!r} is not a path on a volume (a hub name needs the hub at run time)")
            elif not any(_under(value, mount) for mount, _ in pvc_mounts):
                out.append(f"{where}: {key}={value} lies on no mounted persistent volume "
                           f"(mounts: {', '.join(m for m, _ in pvc_mounts) or 'none'})")
        if not any(_under(recipe.output_dir, mount) and not ro for mount, ro in pvc_mounts):
            out.append(f"{where}: output_dir={recipe.output_dir} lies on no writable persistent volume")
        if _env(c).get("HF_HUB_OFFLINE") != "1":
            out.append(f"{where}: HF_HUB_OFFLINE is not \"1\": a missing file would be looked for on the hub")
    return out


def test_recipe_paths_lie_on_the_mounted_volumes(job):
    assert volume_problems(job) == []


def test_the_volume_check_names_a_missing_volume_and_a_hub_name():
    job = load(REPO / "launch" / "k8s" / "pytorchjob.yaml")
    broken = copy.deepcopy(job)
    for _, pod, c in _containers(broken):
        c["volumeMounts"] = [m for m in c["volumeMounts"] if m["mountPath"] != "/staged"]
        c["command"] = [a for a in c["command"] if not a.startswith("data.dataset=")]
        c["env"] = [e for e in c["env"] if e["name"] != "HF_HUB_OFFLINE"]
    problems = "\n".join(volume_problems(broken))
    assert "model.path=/staged/models/meta-llama/Llama-2-70b-hf lies on no mounted persistent volume" in problems
    assert "data.dataset='databricks/databricks-dolly-15k' is not a path on a volume" in problems
    assert "HF_HUB_OFFLINE" in problems


@pytest.fixture(scope="module")
def staged_volume(tmp_path_factory):
    """The manifests' recipe staged by launch.stage from a loopback hub holding repositories of the names
    the manifests use (tiny contents): the directory a `staged` volume would hold."""
    from launch import stage

    from .hub_server import HubServer, Repo, tiny_llama_files
    from .test_stage import use_hub

    work = tmp_path_factory.mktemp("k8s-stage")
    dolly = (REPO / "recipes" / "assets" / "fabric_dolly_mini.jsonl").read_bytes()
    repos = [Repo("meta-llama/Llama-2-70b-hf", "model", tiny_llama_files(work / "ckpt")),
             Repo("databricks/databricks-dolly-15k", "dataset",
                  {"README.md": b"# stand-in\n", "databricks-dolly-15k.jsonl": dolly})]
    with HubServer(repos) as hub, pytest.MonkeyPatch.context() as mp:
        use_hub(hub, mp, work)
        volume = work / "volume"
        code = stage.main([str(REPO / "recipes" / "llama70b_lora.yaml"), "model.path=meta-llama/Llama-2-70b-hf", "--to", str(volume)])
        assert code == 0
    return volume


def test_staged_volume_holds_what_each_manifest_reads(job, staged_volume):
    """What the manifest reads under its `staged` mount is where launch.stage put it, and the recipe
    launch.stage wrote names the same files."""
    for where, pod, c in _containers(job):
        (mount,) = [m["mountPath"] for m in c["volumeMounts"] if m["name"] == "staged"]
        recipe = _recipe_of(c)
        staged_recipe = load_recipe(str(staged_volume / "recipes" / "llama70b_lora.yaml"))
        for key in ("model.path", "data.dataset"):
            section, field = key.split(".")
            value = getattr(getattr(recipe, section), field)
            on_host = staged_volume / os.path.relpath(value, mount)
            assert on_host.exists(), f"{where}: {key}={value}: {on_host} was not staged"
            written = os.path.normpath(getattr(getattr(staged_recipe, section), field))
            assert written == str(on_host), f"{where}: {key}: the staged recipe names {written}"
