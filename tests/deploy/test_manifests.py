# SPDX-License-Identifier: Apache-2.0
"""The Kubernetes manifests of deploy/kubernetes/ against the code (docs/kubernetes.md).

No cluster runs here: this parses every manifest and checks what must agree with gpushare and
between the manifests (environment names, paths, the group, ports, the tool's command and
flags, the DRA claim's memory), and runs the manifests' shell scripts (the node's directory
preparation, the pods' directory wrapper, the exporters' supervisor) with a fake nvidia-smi and
a fake gpushare in a temporary directory. GPUSHARE_SOURCE_DIR names another source tree.
"""
import os
import re
import shlex
import stat
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(os.environ.get("GPUSHARE_SOURCE_DIR", Path(__file__).resolve().parents[2]))
DEPLOY = ROOT / "deploy" / "kubernetes"
MANIFESTS = sorted(DEPLOY.glob("*.yaml"))

# Every GPUSHARE_* name the manifests set. Each must be one the library reads
# (include/gpushare/detail/join_notices.hpp, known_variables); a manifest that sets another
# fails test_env_names_are_the_librarys, so does one in this list no manifest sets.
MANIFEST_NAMES = {
    "GPUSHARE_DIR",
    "GPUSHARE_POD_NAME",
    "GPUSHARE_POD_NAMESPACE",
    "GPUSHARE_CONTAINER_NAME",
    "GPUSHARE_MEMORY_LIMIT",
    "GPUSHARE_PRIORITY",
    "GPUSHARE_SHARE",
}
GPUSHARE_GROUP = "gpushare.io/"  # the annotations' prefix
OUTSIDE_NAMESPACES = {"gpu-operator"}  # namespaces other software makes (the GPU Operator's)
RESTRICTED_VOLUMES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                      "persistentVolumeClaim", "projected", "secret"}


def documents(path):
    return [d for d in yaml.safe_load_all(path.read_text()) if d is not None]


def objects(kind=None):
    out = [(p, d) for p in MANIFESTS for d in documents(p)]
    return [(p, d) for p, d in out if kind is None or d["kind"] == kind]


def workloads():
    """(file, metadata, pod spec) of every Pod and of every DaemonSet's pod template."""
    out = [(p, d["metadata"], d["spec"]) for p, d in objects("Pod")]
    for p, d in objects("DaemonSet"):
        meta = dict(d["spec"]["template"]["metadata"], namespace=d["metadata"]["namespace"],
                    name=d["metadata"]["name"])
        out.append((p, meta, d["spec"]["template"]["spec"]))
    return out


def containers(spec):
    return spec.get("initContainers", []) + spec["containers"]


def env_of(container):
    return {e["name"]: e for e in container.get("env", [])}


def script_of(container):
    cmd = container["command"]
    assert cmd[1] == "-c", cmd
    return cmd[2]


def daemonset():
    found = objects("DaemonSet")
    assert len(found) == 1, [p.name for p, _ in found]
    return found[0][1]["spec"]["template"]["spec"]


def node_env(name):
    values = {env_of(c)[name]["value"] for c in containers(daemonset()) if name in env_of(c)}
    assert len(values) == 1, (name, values)
    return values.pop()


def sharing_pods():
    """(file, metadata, spec, container) of every workload container that sets GPUSHARE_DIR."""
    return [(p, m, s, c) for p, m, s in workloads() if m.get("namespace") != "gpushare-system"
            for c in containers(s) if "GPUSHARE_DIR" in env_of(c)]


def header_variables():
    text = (ROOT / "include/gpushare/detail/join_notices.hpp").read_text()
    body = re.search(r"known_variables\[\]\s*=\s*\{(.*?)\};", text, re.S)
    assert body, "known_variables not found in join_notices.hpp"
    return set(re.findall(r'"(GPUSHARE_[A-Z_]+)"', body.group(1)))


def cli_usages():
    """{subcommand: its usage text} from tools/main.cpp's command table and tools/*.hpp."""
    texts = {}
    for h in (ROOT / "tools").glob("*.hpp"):
        for name, body in re.findall(r'constexpr std::string_view (\w+_usage) =\s*R"\((.*?)\)";',
                                     h.read_text(), re.S):
            texts[name] = body
    table = re.search(r"constexpr command commands\[\] = \{(.*?)\};",
                      (ROOT / "tools/main.cpp").read_text(), re.S)
    assert table, "the command table not found in tools/main.cpp"
    return {c: texts[u] for c, u in re.findall(r'\{"(\w+)",\s*run_\w+,\s*(\w+)\}', table.group(1))}


def bytes_of_quantity(q):
    """A Kubernetes quantity (24Gi, 500M, 1024) in bytes."""
    m = re.fullmatch(r"(\d+)(Ki|Mi|Gi|Ti|k|M|G|T)?", str(q))
    assert m, f"quantity {q!r} not understood"
    scale = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
             "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}[m.group(2)]
    return int(m.group(1)) * scale


def bytes_of_amount(a):
    """A gpushare memory amount without a percentage (README, "Memory amounts") in bytes."""
    m = re.fullmatch(r"(\d+(?:\.\d{1,6})?) ?([KMGT]i?B?|B)?", a, re.I)
    assert m, f"{a!r} is not a gpushare memory amount"
    unit = (m.group(2) or "B").upper().rstrip("B") or "B"
    powers = {"B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
              "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40}
    return int(float(m.group(1)) * powers[unit])


# --- every manifest ----------------------------------------------------------------------------

def test_the_manifests_are_there():
    names = {p.name for p in MANIFESTS}
    assert {"daemonset.yaml", "inference-pod.yaml", "training-pod.yaml", "dra-claim.yaml",
            "demo-namespace.yaml", "time-slicing-config.yaml"} <= names, names


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_object_is_named(path):
    docs = documents(path)
    assert docs, f"{path.name} has no object"
    namespaces = {d["metadata"]["name"] for _, d in objects("Namespace")} | OUTSIDE_NAMESPACES
    for d in docs:
        assert isinstance(d.get("apiVersion"), str) and isinstance(d.get("kind"), str), d
        assert d["metadata"]["name"], d
        if d["kind"] != "Namespace":
            assert d["metadata"].get("namespace") in namespaces, (path.name, d["metadata"])


def test_env_names_are_the_librarys():
    known = header_variables()
    used = {e["name"] for _, _, s in workloads() for c in containers(s)
            for e in c.get("env", []) if e["name"].startswith("GPUSHARE_")}
    assert used == MANIFEST_NAMES, used ^ MANIFEST_NAMES
    missing = sorted(MANIFEST_NAMES - known)
    assert not missing, f"the manifests set {missing}, which the library does not read"


def test_only_sharing_pods_set_gpushare_variables():
    for path, meta, spec in workloads():
        if meta.get("namespace") == "gpushare-system":
            names = [e["name"] for c in containers(spec) for e in c.get("env", [])]
            assert not [n for n in names if n.startswith("GPUSHARE_")], (path.name, names)


# --- the node: directories, group, exporter -----------------------------------------------------

def test_the_node_directory_is_one_path_everywhere():
    base = node_env("TABLE_BASE")
    spec = daemonset()
    volumes = {v["name"]: v for v in spec["volumes"]}
    for c in containers(spec):
        (mount,) = [m for m in c["volumeMounts"] if "hostPath" in volumes[m["name"]]]
        assert mount["mountPath"] == base
        assert volumes[mount["name"]]["hostPath"]["path"] == base
    for path, meta, pod, c in sharing_pods():
        vols = {v["name"]: v for v in pod["volumes"]}
        (mount,) = [m for m in c["volumeMounts"] if "hostPath" in vols[m["name"]]]
        assert vols[mount["name"]]["hostPath"] == {"path": base, "type": "Directory"}, path.name
        assert env_of(c)["GPUSHARE_DIR"]["value"] == mount["mountPath"] == base, path.name


def test_one_group_everywhere():
    gid = int(node_env("TABLE_GID"))
    assert re.search(rf"groupadd --gid {gid} gpushare", (DEPLOY / "Dockerfile").read_text())
    assert re.search(rf"^USER {gid}:{gid}$", (DEPLOY / "Dockerfile").read_text(), re.M)
    spec = daemonset()
    assert gid in spec["securityContext"]["supplementalGroups"]
    (exporter,) = spec["containers"]
    assert exporter["securityContext"]["runAsGroup"] == gid
    for path, meta, pod, _ in sharing_pods():
        assert gid in pod["securityContext"]["supplementalGroups"], path.name
    assert "chgrp \"$TABLE_GID\"" in script_of(spec["initContainers"][0])


def test_exporter_ports_agree():
    (exporter,) = daemonset()["containers"]
    first, count = int(node_env("EXPORTER_FIRST_PORT")), int(node_env("EXPORTER_MAX_GPUS"))
    ports = exporter["ports"]
    assert [p["containerPort"] for p in ports] == list(range(first, first + count))
    assert [p["name"] for p in ports] == [f"metrics-gpu{i}" for i in range(count)]
    assert exporter["readinessProbe"]["tcpSocket"]["port"] == first
    (service,) = [d for _, d in objects("Service")]
    assert service["spec"]["selector"] == daemonset_labels()
    assert [(p["name"], p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == \
        [(p["name"], p["containerPort"], p["name"]) for p in ports]
    script = script_of(exporter)
    assert 'port=$EXPORTER_FIRST_PORT' in script and 'port=$((port + 1))' in script
    assert '--listen "0.0.0.0:$port"' in script


def daemonset_labels():
    (ds,) = [d for _, d in objects("DaemonSet")]
    return ds["spec"]["template"]["metadata"]["labels"]


def test_exporter_command_is_the_clis():
    usages = cli_usages()
    (exporter,) = daemonset()["containers"]
    lines = [ln.strip() for ln in script_of(exporter).splitlines()
             if ln.strip().startswith("gpushare ")]
    assert lines, "the exporter container runs no gpushare command"
    for line in lines:
        words = shlex.split(line.rstrip("&").strip())
        assert words[1] in usages, f"gpushare has no command {words[1]!r}"
        usage_flags = set(re.findall(r"--[a-z][a-z-]*", usages[words[1]]))
        flags = [w for w in words[2:] if w.startswith("--")]
        assert flags and set(flags) <= usage_flags, (words[1], sorted(set(flags) - usage_flags))
        assert "--listen" in flags and "--dir" in flags


def test_the_image_runs_the_tool_as_the_group():
    text = (DEPLOY / "Dockerfile").read_text()
    assert "cmake --build /build --target gpushare" in text
    assert 'ENTRYPOINT ["/usr/local/bin/gpushare"]' in text
    assert "libcpp-httplib-dev" in text  # else the tool is built without --listen
    images = {c["image"] for c in containers(daemonset())}
    doc = (ROOT / "docs/kubernetes.md").read_text()
    for image in images - {daemonset()["initContainers"][0]["image"]}:
        assert image in doc and image in text, f"{image} is not the image the docs build"


# --- the sharing pods ----------------------------------------------------------------------------

def test_identity_comes_from_the_downward_api():
    for path, meta, pod, c in sharing_pods():
        env = env_of(c)
        assert env["GPUSHARE_POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        assert env["GPUSHARE_POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.namespace"
        assert env["GPUSHARE_CONTAINER_NAME"]["value"] == c["name"], path.name


def test_settings_come_from_annotations_that_are_set():
    for path, meta, pod, c in sharing_pods():
        for name, e in env_of(c).items():
            field = e.get("valueFrom", {}).get("fieldRef", {}).get("fieldPath", "")
            m = re.fullmatch(r"metadata\.annotations\['([^']+)'\]", field)
            if not m:
                continue
            key = m.group(1)
            assert key.startswith(GPUSHARE_GROUP), key
            expected = "GPUSHARE_" + key[len(GPUSHARE_GROUP):].upper().replace("-", "_")
            assert name == expected, (path.name, key, name)
            # A missing annotation gives an empty variable, which gpushare refuses.
            value = meta.get("annotations", {}).get(key)
            assert isinstance(value, str) and value, (path.name, meta["name"], key)
        ann = meta["annotations"]
        bytes_of_amount(ann["gpushare.io/memory-limit"])
        assert ann["gpushare.io/priority"] in {"low", "normal", "high", "critical"} | \
            {str(i) for i in range(8)}
        assert 1 <= int(ann["gpushare.io/share"]) <= 1000000


def test_time_slicing_gives_each_pod_one_replica():
    (cm,) = [d for _, d in objects("ConfigMap")]
    config = yaml.safe_load(cm["data"]["any"])
    ts = config["sharing"]["timeSlicing"]
    (res,) = ts["resources"]
    assert res["name"] == "nvidia.com/gpu" and ts["renameByDefault"] is False
    pods = [(p, c) for p, m, s, c in sharing_pods() if "limits" in c["resources"]]
    assert len(pods) == 2
    for path, c in pods:
        assert c["resources"]["limits"] == {res["name"]: 1}, path.name
    assert res["replicas"] >= len(pods)


def test_pod_affinity_names_the_other_workload():
    """The training pod follows the inference pod of its own kind (time-slicing or DRA)."""
    def kind(path):
        return "dra" if path.name == "dra-claim.yaml" else "time-slicing"
    for path, meta, spec in workloads():
        for term in spec.get("affinity", {}).get("podAffinity", {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution", []):
            wanted = term["labelSelector"]["matchLabels"]
            peers = [m["name"] for p, m, _ in workloads() if kind(p) == kind(path)
                     and m["name"] != meta["name"] and wanted.items() <= m["labels"].items()]
            assert len(peers) == 1, (path.name, meta["name"], wanted, peers)
            assert term["topologyKey"] == "kubernetes.io/hostname"


def test_dra_claims_match_the_memory_limits():
    templates = {d["metadata"]["name"]: d for _, d in objects("ResourceClaimTemplate")}
    assert templates
    dra = [(m, s, c) for p, m, s, c in sharing_pods() if p.name == "dra-claim.yaml"]
    assert len(dra) == 2
    for meta, spec, c in dra:
        (claim,) = spec["resourceClaims"]
        assert c["resources"] == {"claims": [{"name": claim["name"]}]}
        tmpl = templates[claim["resourceClaimTemplateName"]]
        assert tmpl["apiVersion"] == "resource.k8s.io/v1"
        (req,) = tmpl["spec"]["spec"]["devices"]["requests"]
        assert req["exactly"]["deviceClassName"] == "gpu.nvidia.com"
        claimed = bytes_of_quantity(req["exactly"]["capacity"]["requests"]["memory"])
        assert claimed == bytes_of_amount(meta["annotations"]["gpushare.io/memory-limit"]), \
            (meta["name"], claimed)


# --- Pod Security ----------------------------------------------------------------------------

def test_namespaces_with_hostpath_pods_admit_them():
    levels = {d["metadata"]["name"]: d["metadata"]["labels"]["pod-security.kubernetes.io/enforce"]
              for _, d in objects("Namespace")}
    for path, meta, spec in workloads():
        if any("hostPath" in v for v in spec.get("volumes", [])):
            assert levels[meta["namespace"]] == "privileged", (path.name, meta["name"])


def test_no_container_is_privileged():
    for path, meta, spec in workloads():
        assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), path.name
        for c in containers(spec):
            sc = c["securityContext"]
            assert sc.get("privileged") is not True and sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}, (path.name, c["name"])
            assert not any("hostPort" in p for p in c.get("ports", []))


def test_sharing_pods_pass_restricted_but_for_hostpath():
    for path, meta, spec, c in sharing_pods():
        pod_sc = spec["securityContext"]
        assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] != 0
        assert pod_sc["seccompProfile"] == {"type": "RuntimeDefault"}
        kinds = {k for v in spec["volumes"] for k in v if k != "name"}
        assert kinds - RESTRICTED_VOLUMES == {"hostPath"}, (path.name, kinds)


# --- the scripts, run -----------------------------------------------------------------------

def fake_program(bindir, name, body):
    bindir.mkdir(exist_ok=True)
    f = bindir / name
    f.write_text("#!/bin/sh\n" + body)
    f.chmod(0o755)


def run_script(shell, script, env, *args):
    return subprocess.run([shell, "-c", script, *args], env=env, capture_output=True, text=True,
                          timeout=60)


UUIDS = ["GPU-11111111-2222-3333-4444-555555555555", "GPU-66666666-7777-8888-9999-000000000000"]


def test_the_init_container_prepares_one_group_directory_per_gpu(tmp_path):
    fake_program(tmp_path / "bin", "nvidia-smi", "".join(f"echo {u}\n" for u in UUIDS))
    base = tmp_path / "base"
    base.mkdir()
    init = daemonset()["initContainers"][0]
    gid = os.getgid()  # the test's own group: chgrp to it needs no privilege
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
               TABLE_BASE=str(base), TABLE_GID=str(gid))
    r = run_script(init["command"][0], script_of(init), env)
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in base.iterdir()) == UUIDS
    for u in UUIDS:
        st = (base / u).stat()
        assert stat.S_IMODE(st.st_mode) == 0o2770 and st.st_gid == gid, (u, oct(st.st_mode))
    again = run_script(init["command"][0], script_of(init), env)  # a restarted pod
    assert again.returncode == 0, again.stderr
    fake_program(tmp_path / "bin", "nvidia-smi", "echo 'No devices were found'; exit 6\n")
    r = run_script(init["command"][0], script_of(init), env)
    assert r.returncode != 0 and "nvidia-smi could not list the GPUs" in r.stderr


def test_the_pods_wrapper_picks_its_gpus_directory(tmp_path):
    wrappers = {tuple(c["command"][:3]) for _, _, _, c in sharing_pods()}
    assert len(wrappers) == 1, "the pods' wrappers differ"
    shell, _, script = wrappers.pop()
    base = tmp_path / "base"
    (base / UUIDS[1]).mkdir(parents=True)
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
               GPUSHARE_DIR=str(base))
    fake_program(tmp_path / "bin", "nvidia-smi", f"echo {UUIDS[1]}\n")
    r = run_script(shell, script, env, "gpushare-dir", "printenv", "GPUSHARE_DIR")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{base}/{UUIDS[1]}"
    fake_program(tmp_path / "bin", "nvidia-smi", "".join(f"echo {u}\n" for u in UUIDS))
    r = run_script(shell, script, env, "gpushare-dir", "true")
    assert r.returncode == 1 and "sees 2 GPUs, not 1" in r.stderr
    fake_program(tmp_path / "bin", "nvidia-smi", f"echo {UUIDS[0]}\n")
    r = run_script(shell, script, env, "gpushare-dir", "true")
    assert r.returncode == 1 and "does not exist" in r.stderr and "DaemonSet" in r.stderr


def test_the_supervisor_starts_one_exporter_per_gpu_directory(tmp_path):
    (exporter,) = daemonset()["containers"]
    base = tmp_path / "base"
    for u in UUIDS:
        (base / u).mkdir(parents=True)
    (base / "GPU-not-a-directory").write_text("")
    record = tmp_path / "record"
    fake_program(tmp_path / "bin", "gpushare", f'echo "$@" >> {record}\nsleep 1\n')
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
               TABLE_BASE=str(base), EXPORTER_FIRST_PORT=node_env("EXPORTER_FIRST_PORT"),
               EXPORTER_MAX_GPUS=node_env("EXPORTER_MAX_GPUS"))
    r = run_script(exporter["command"][0], script_of(exporter), env)
    assert r.returncode == 1 and "an exporter exited" in r.stderr, r.stderr
    first = int(node_env("EXPORTER_FIRST_PORT"))
    assert sorted(record.read_text().splitlines()) == [
        f"metrics --listen 0.0.0.0:{first + i} --dir {base}/{u} --all-domains"
        for i, u in enumerate(UUIDS)]
    for i in range(int(node_env("EXPORTER_MAX_GPUS"))):
        (base / f"GPU-extra-{i}").mkdir()
    r = run_script(exporter["command"][0], script_of(exporter), env)
    assert r.returncode == 1 and "more than" in r.stderr and "GPU directories" in r.stderr
