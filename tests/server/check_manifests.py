"""Checks deploy/kubernetes/gpu-server.yaml the way applying it would need: the documents parse,
the kinds are there, the DaemonSet runs on GPU nodes with the config where --config names it,
every port the Service and the probes name exists in the container, the server listens on the
port the container declares, and the Service selects the DaemonSet's pods. Writes the
ConfigMap's gpu-server.toml to argv[2] for gpu-server --check-config. Exit status 0: good."""
import re
import sys

import yaml

docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
by_kind = {}
for d in docs:
    for key in ("apiVersion", "kind", "metadata"):
        assert key in d, f"a document without {key}"
    by_kind.setdefault(d["kind"], []).append(d)
for kind in ("Namespace", "ConfigMap", "DaemonSet", "Service"):
    assert kind in by_kind, f"no {kind}"

ns = by_kind["Namespace"][0]["metadata"]["name"]
for d in docs:
    if d["kind"] != "Namespace":
        assert d["metadata"].get("namespace") == ns, f"{d['kind']} outside namespace {ns}"

config = by_kind["ConfigMap"][0]
toml_text = config["data"]["gpu-server.toml"]
ds = by_kind["DaemonSet"][0]
spec = ds["spec"]
pod = spec["template"]["spec"]
assert spec["selector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items(), \
    "the DaemonSet's selector does not match its pods"
assert any("gpu" in k for k in pod.get("nodeSelector", {})), "not limited to GPU nodes"
(container,) = pod["containers"]
args = container.get("args", [])
config_path = args[args.index("--config") + 1]
mounts = {m["mountPath"]: m for m in container["volumeMounts"]}
assert config_path in mounts, f"--config {config_path} is not mounted"
volumes = {v["name"]: v for v in pod["volumes"]}
assert volumes[mounts[config_path]["name"]]["configMap"]["name"] == config["metadata"]["name"]
# Every file the config names lies in a mounted volume.
for path in re.findall(r'"(/etc/cuwire/[^"]+)"', toml_text):
    assert any(path.startswith(m.rstrip("/") + "/") for m in mounts), f"{path} is not mounted"
ports = {p["name"]: p["containerPort"] for p in container["ports"]}
listen = [int(p) for p in re.findall(r'"(?:tls|tcp):[^"]*:(\d+)"', toml_text)]
assert listen and all(p in ports.values() for p in listen), f"listen ports {listen} not declared"
metrics = re.search(r'metrics = "[^"]*:(\d+)"', toml_text)
assert metrics and int(metrics.group(1)) in ports.values(), "metrics port not declared"
for probe in ("readinessProbe", "livenessProbe"):
    for how in container.get(probe, {}).values():
        if isinstance(how, dict) and "port" in how:
            assert how["port"] in ports or how["port"] in ports.values(), f"{probe} port"

svc = by_kind["Service"][0]
assert svc["spec"]["selector"].items() <= spec["template"]["metadata"]["labels"].items(), \
    "the Service selects no pod of the DaemonSet"
for p in svc["spec"]["ports"]:
    assert p["targetPort"] in ports or p["targetPort"] in ports.values(), f"targetPort {p}"

open(sys.argv[2], "w").write(toml_text)
print("manifests ok:", ", ".join(sorted(by_kind)))
