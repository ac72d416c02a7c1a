"""Checks deploy/kubernetes/gpu-server.yaml and example-pod.yaml the way applying them would
need, and against the sources they rely on:

  check_manifests.py [--source-dir ROOT] [--pod POD.yaml] MANIFEST.yaml OUT.toml

- The documents parse, the kinds are there, all in one namespace; the DaemonSet runs on GPU
  nodes under the NVIDIA runtime with the config where --config names it.
- gpu-server: every file the config names is mounted; the ports it listens on (tls:, tcp:) and
  its metrics port are containerPorts; both probes GET /healthz on the metrics port; the node's
  GPUs come from the NVIDIA device plugin (nvidia.com/gpu, matching nvidia.com/gpu.count when
  the nodeSelector names it), never from NVIDIA_VISIBLE_DEVICES=all (in no container at all);
  the config's [server] keys are ones server/ops/config_file.cc reads, it has no [[tenant]],
  says open = false and has an admin token.
- cuwire-k8s-plugin: every option it is given is one k8s-plugin/main.cc defines, the required
  ones are given, every $(VAR) is in its env; its --server Unix socket is the one gpu-server
  listens on, through a volume both mount; its admin token is the server's (one Secret, one
  key); the kubelet's device-plugin directory and pod-resources socket (given, or
  k8s-plugin/plugin.h's defaults) are the node's; --state-dir and --client-lib-dir are host
  paths mounted at themselves (the plugin hands them to the kubelet); an initContainer puts the
  client libraries into --client-lib-dir.
- Where containers are sent (--advertise): a tls: port gpu-server listens on, through a Service
  with internalTrafficPolicy: Local whose certificate name the file's instructions make, or
  through the hostPort at the node's IP.
- Services select the DaemonSet's pods and target its ports; a headless one serves metrics.
- The example pod asks only for resources the plugin sells (k8s-plugin/ledger.cc), in the
  plugin's granularity (main.cc's defaults or its arguments), without the NVIDIA runtime class,
  leaves the plugin's env and mount paths alone, and trusts the server's CA through CUWIRE_CA.

Writes the ConfigMap's gpu-server.toml to OUT.toml for gpu-server --check-config. Prints
"manifests ok: KINDS" and "example pod ok: NAME"; exit status 0: good, 1: what is wrong is
printed, one line each."""
import argparse
import os
import posixpath
import re
import sys
import tomllib

import yaml

here = os.path.dirname(os.path.abspath(__file__))
ap = argparse.ArgumentParser()
ap.add_argument("manifest")
ap.add_argument("out_toml")
ap.add_argument("--source-dir", default=os.path.normpath(os.path.join(here, "..", "..")))
ap.add_argument("--pod", help="the example pod (default: example-pod.yaml beside MANIFEST)")
opts = ap.parse_args()
if opts.pod is None:
    beside = os.path.join(os.path.dirname(os.path.abspath(opts.manifest)), "example-pod.yaml")
    opts.pod = beside if os.path.exists(beside) else ""

problems = []


def check(cond, message):
    if not cond:
        problems.append(message)
    return bool(cond)


class Broken(Exception):
    """A manifest too broken to check further."""


def need(cond, message):
    if not cond:
        raise Broken(message)


def source(rel):
    with open(os.path.join(opts.source_dir, rel)) as f:
        return f.read()


# ---- what the sources say ------------------------------------------------------------------

ledger_cc = source("k8s-plugin/ledger.cc")
fn = re.search(r"resource_name\(Resource r\)\s*\{(.*?)\n\}", ledger_cc, re.S)
RESOURCES = set(re.findall(r'return "([^"]+)";', fn.group(1))) if fn else set()
assert RESOURCES, "no resource names in k8s-plugin/ledger.cc's resource_name()"

main_cc = source("k8s-plugin/main.cc")
OPTIONS, REQUIRED = set(), set()
# Each add_option/add_flag call to its ';' (strings skipped: help texts hold ';' too).
for m in re.finditer(r'add_(?:option|flag)\(\s*"(--[a-z0-9-]+)"((?:"(?:[^"\\]|\\.)*"|[^;"])*);',
                     main_cc, re.S):
    OPTIONS.add(m.group(1))
    if "->required()" in m.group(2):
        REQUIRED.add(m.group(1))
OPTIONS |= set(re.findall(r'set_version_flag\(\s*"(--[a-z0-9-]+)"', main_cc))
assert "--server" in OPTIONS and REQUIRED, "no options found in k8s-plugin/main.cc"


def main_default(name):
    m = re.search(r"\b" + name + r' = ("[^"]*"|\d+)', main_cc)
    assert m, f"no default for {name} in k8s-plugin/main.cc"
    return m.group(1).strip('"')


plugin_h = source("k8s-plugin/plugin.h")
PLUGIN_DEFAULTS = dict(re.findall(r'std::string (\w+) = "([^"]*)";', plugin_h))
for key in ("device_plugin_dir", "pod_resources_socket", "state_dir", "container_lib_dir",
            "container_token_dir"):
    assert key in PLUGIN_DEFAULTS, f"no default {key} in k8s-plugin/plugin.h"

config_cc = source("server/ops/config_file.cc")
server_part = config_cc[config_cc.index('root["server"]'):config_cc.index('root["sim"]')]
SERVER_KEYS = set(re.findall(r'keys\.\w+\("(\w+)"', server_part))
token_keys = re.findall(r'prefix \+ "(\w+)"', config_cc)
for prefix in re.findall(r'read_token_keys\(\*server, keys, refuse, "(\w+)"', server_part):
    SERVER_KEYS |= {prefix + k for k in token_keys}
assert {"listen", "metrics", "admin_token_file"} <= SERVER_KEYS, \
    f"[server] keys not found in server/ops/config_file.cc: {sorted(SERVER_KEYS)}"

UNITS = {"": 1, "B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "TiB": 1 << 40}


def size_bytes(text):
    m = re.fullmatch(r"(\d+)\s*([KMGT]iB|B|)", text.strip())
    assert m, f"not a size: {text}"
    return int(m.group(1)) * UNITS[m.group(2)]


# ---- helpers over the manifests ------------------------------------------------------------


def address(text):
    """'tls:host:port' -> ('tls', host, port); 'unix:/p' -> ('unix', '/p', None)."""
    scheme, _, rest = text.partition(":")
    if scheme == "unix":
        return scheme, rest, None
    host, _, port = rest.rpartition(":")
    return scheme, host, int(port) if port.isdigit() else None


def envs(container):
    return {e["name"]: e for e in container.get("env", []) or []}


def resolve(container, volumes, path):
    """Where `path` in the container comes from: (mount, volume, the rest below the mount)."""
    best = None
    for m in container.get("volumeMounts", []) or []:
        mp = m["mountPath"].rstrip("/") or "/"
        if path == mp or path.startswith(mp + "/"):
            if best is None or len(mp) > len(best[0]["mountPath"].rstrip("/")):
                best = (m, volumes.get(m["name"]), path[len(mp):].lstrip("/"))
    return best


def host_path(container, volumes, path):
    """The node's path behind `path` in the container; None if not a hostPath."""
    r = resolve(container, volumes, path)
    if not r or not r[1] or "hostPath" not in r[1]:
        return None
    m, v, rest = r
    return posixpath.normpath(posixpath.join(v["hostPath"]["path"], m.get("subPath", ""), rest))


def secret_key(container, volumes, path):
    """(secretName, key) of a file of a Secret volume, or None."""
    r = resolve(container, volumes, path)
    if not r or not r[1] or "secret" not in r[1]:
        return None
    m, v, rest = r
    rest = m["subPath"] if m.get("subPath") else rest
    items = v["secret"].get("items")
    if items:
        keys = [i["key"] for i in items if i["path"] == rest]
        return (v["secret"]["secretName"], keys[0]) if keys else None
    return v["secret"]["secretName"], rest


def port_number(container, port):
    """A probe's or Service's port (name or number) as the container's port number, or None."""
    for p in container.get("ports", []) or []:
        if port in (p.get("name"), p["containerPort"]):
            return p["containerPort"]
    return None


def parse_args(args):
    """['--a', 'x', '--b=y'] -> {'--a': ['x'], '--b': ['y']}; values missing -> None."""
    out, i = {}, 0
    while i < len(args):
        a = str(args[i])
        if not a.startswith("--"):
            problems.append(f"argument {a!r} is not an option's")
            i += 1
            continue
        if "=" in a:
            name, value = a.split("=", 1)
            i += 1
        else:
            name = a
            has = i + 1 < len(args) and not str(args[i + 1]).startswith("--")
            value = args[i + 1] if has else None
            i += 2 if has else 1
        out.setdefault(name, []).append(value)
    return out


def expand(text, container):
    """$(VAR) replaced by the container's env value where it is a literal."""
    env = envs(container)
    return re.sub(r"\$\((\w+)\)", lambda m: env[m.group(1)].get("value", m.group(0))
                  if m.group(1) in env else m.group(0), text)


def check_vars(container):
    """Kubernetes expands only $(VAR)s the container's env defines: the rest stay as text."""
    env = envs(container)
    for text in (container.get("command") or []) + (container.get("args") or []):
        for var in re.findall(r"\$\((\w+)\)", str(text)):
            check(var in env, f"container {container['name']}: $({var}) is not in its env")


def seen(node):
    return "the node's " + node if node else "no hostPath"


def no_visible_devices_all(container, where):
    for e in container.get("env", []) or []:
        check(not (e["name"] == "NVIDIA_VISIBLE_DEVICES" and str(e.get("value")).strip() == "all"),
              f"{where} container {container['name']} sets NVIDIA_VISIBLE_DEVICES=all: GPUs "
              f"past the NVIDIA device plugin")


# ---- the manifest --------------------------------------------------------------------------

raw_text = open(opts.manifest).read()


def check_manifest():
    docs = [d for d in yaml.safe_load_all(raw_text) if d]
    by_kind = {}
    for d in docs:
        for key in ("apiVersion", "kind", "metadata"):
            need(key in d, f"a document without {key}")
        by_kind.setdefault(d["kind"], []).append(d)
    for kind in ("Namespace", "ConfigMap", "DaemonSet", "Service", "ServiceAccount"):
        need(kind in by_kind, f"no {kind}")

    ns = by_kind["Namespace"][0]["metadata"]["name"]
    for d in docs:
        if d["kind"] not in ("Namespace", "ClusterRole", "ClusterRoleBinding"):
            check(d["metadata"].get("namespace") == ns, f"{d['kind']} outside namespace {ns}")

    config = by_kind["ConfigMap"][0]
    toml_text = config["data"]["gpu-server.toml"]
    ds = by_kind["DaemonSet"][0]
    spec = ds["spec"]
    pod_labels = spec["template"]["metadata"]["labels"]
    pod = spec["template"]["spec"]
    check(spec["selector"]["matchLabels"].items() <= pod_labels.items(),
          "the DaemonSet's selector does not match its pods")
    selector = pod.get("nodeSelector", {}) or {}
    check(any("gpu" in k for k in selector), "not limited to GPU nodes")
    check(pod.get("runtimeClassName") == "nvidia",
          "gpu-server's pod does not run under the NVIDIA runtime (runtimeClassName: nvidia)")
    accounts = {d["metadata"]["name"] for d in by_kind["ServiceAccount"]}
    check(pod.get("serviceAccountName") in accounts,
          f"the DaemonSet's serviceAccountName {pod.get('serviceAccountName')} is not here")
    for b in by_kind.get("RoleBinding", []) + by_kind.get("ClusterRoleBinding", []):
        ref = b["roleRef"]
        check(any(r["metadata"]["name"] == ref["name"] for r in by_kind.get(ref["kind"], [])),
              f"{b['kind']} {b['metadata']['name']} names {ref['kind']} {ref['name']}, not here")
    volumes = {v["name"]: v for v in pod["volumes"]}
    containers = {c["name"]: c for c in pod["containers"]}
    need("gpu-server" in containers, "no container gpu-server")
    need("cuwire-k8s-plugin" in containers, "no container cuwire-k8s-plugin")
    for c in pod["containers"] + (pod.get("initContainers") or []):
        no_visible_devices_all(c, "DaemonSet")
        check_vars(c)
        for m in c.get("volumeMounts", []) or []:
            check(m["name"] in volumes, f"container {c['name']} mounts {m['name']}, no volume")
    server, plugin = containers["gpu-server"], containers["cuwire-k8s-plugin"]

    # gpu-server's config, where --config names it, and every file it names mounted.
    args = server.get("args", [])
    need("--config" in args, "gpu-server is not given --config")
    config_path = args[args.index("--config") + 1]
    mounts = {m["mountPath"]: m for m in server["volumeMounts"]}
    need(config_path in mounts, f"--config {config_path} is not mounted")
    check(volumes[mounts[config_path]["name"]].get("configMap", {}).get("name")
          == config["metadata"]["name"], f"--config {config_path} is not the ConfigMap's")
    for path in re.findall(r'"(/etc/cuwire/[^"]+)"', toml_text):
        check(any(path.startswith(m.rstrip("/") + "/") for m in mounts), f"{path} is not mounted")
    try:
        cfg = tomllib.loads(toml_text)
    except tomllib.TOMLDecodeError as e:
        raise Broken(f"the ConfigMap's gpu-server.toml does not parse: {e}")
    srv = cfg.get("server", {})
    for key in srv:
        check(key in SERVER_KEYS, f"[server] {key} is not a key server/ops/config_file.cc reads")
    check("tenant" not in cfg, "the config has [[tenant]]s: the plugin adds the tenants")
    check(srv.get("open") is False,
          "the config does not say open = false: with no tenant, the server would serve anyone")
    check("admin_token_file" in srv, "the config has no admin_token_file (the plugin's token)")

    # Ports: listeners and metrics declared, hostPorts as their containerPorts.
    ports = {p["name"]: p["containerPort"] for p in server["ports"]}
    for p in server["ports"]:
        check(p.get("hostPort") in (None, p["containerPort"]),
              f"hostPort {p.get('hostPort')} is not containerPort {p['containerPort']}")
    listen = [address(a) for a in srv.get("listen", [])]
    net = [(s, p) for s, h, p in listen if s in ("tls", "tcp")]
    check(net and all(p in ports.values() for _, p in net),
          f"listen ports {[p for _, p in net]} not declared")
    metrics = address("http:" + srv.get("metrics", ""))[2]
    check(metrics is not None and metrics in ports.values(), "metrics port not declared")
    annotated = spec["template"]["metadata"].get("annotations", {}).get("prometheus.io/port")
    check(annotated in (None, str(metrics)), f"prometheus.io/port {annotated} is not {metrics}")
    for probe in ("readinessProbe", "livenessProbe"):
        p = server.get(probe)
        if not check(p and "httpGet" in p, f"gpu-server has no {probe} by httpGet"):
            continue
        check(p["httpGet"].get("path") == "/healthz", f"{probe} does not GET /healthz")
        check(port_number(server, p["httpGet"].get("port")) == metrics,
              f"{probe} port {p['httpGet'].get('port')} is not the metrics port {metrics}")

    # The node's GPUs, through the NVIDIA device plugin.
    limits = (server.get("resources") or {}).get("limits") or {}
    gpus = limits.get("nvidia.com/gpu")
    check(isinstance(gpus, int) and gpus >= 1,
          "gpu-server does not ask for the node's GPUs (resources.limits nvidia.com/gpu)")
    if gpus is not None and "nvidia.com/gpu.count" in selector:
        check(str(gpus) == str(selector["nvidia.com/gpu.count"]),
              f"nvidia.com/gpu {gpus} is not the nodes' nvidia.com/gpu.count "
              f"{selector['nvidia.com/gpu.count']}")

    # Services.
    svcs = {s["metadata"]["name"]: s for s in by_kind["Service"]}
    for s in svcs.values():
        check(s["spec"]["selector"].items() <= pod_labels.items(),
              f"Service {s['metadata']['name']} selects no pod of the DaemonSet")
        for p in s["spec"]["ports"]:
            check(port_number(server, p["targetPort"]) is not None,
                  f"Service {s['metadata']['name']} targetPort {p['targetPort']} is no port of "
                  f"gpu-server")
    check(any(s["spec"].get("clusterIP") == "None"
              and any(port_number(server, p["targetPort"]) == metrics for p in s["spec"]["ports"])
              for s in svcs.values()), "no headless Service for the metrics port")

    # The plugin's options.
    pargs = parse_args([expand(str(a), plugin) for a in plugin.get("args", [])])
    cmd = plugin.get("command", [])
    check(cmd and cmd[0].endswith("/cuwire-k8s-plugin"),
          "the plugin's container does not run cuwire-k8s-plugin")
    for name, values in pargs.items():
        check(name in OPTIONS, f"cuwire-k8s-plugin has no option {name} (k8s-plugin/main.cc)")
        check(None not in values, f"{name} is given no value")
    for name in REQUIRED:
        check(name in pargs, f"the required {name} is not given to cuwire-k8s-plugin")

    def value(name, default=None):
        v = pargs.get(name)
        return v[-1] if v and v[-1] is not None else default

    # --server: the node's gpu-server through the pod's own Unix socket.
    servers = [v for v in pargs.get("--server", []) if v]
    unix_listen = [h for s, h, _ in listen if s == "unix"]
    for addr in servers:
        scheme, host, port = address(addr)
        if scheme == "unix":
            r = resolve(plugin, volumes, host)
            ok = check(r and r[1] and "emptyDir" in r[1],
                       f"--server {addr}: its directory is no emptyDir the plugin mounts")
            if ok:
                check(any((resolve(server, volumes, u) or (None, None, None))[1:] == r[1:]
                          for u in unix_listen),
                      f"--server {addr} is no socket gpu-server listens on (listen "
                      f"{unix_listen}, through the volumes both mount)")
        else:
            check((scheme, port) in net, f"--server {addr}: gpu-server listens on no such port")

    # --admin-token-file: the key of the Secret the server's admin_token_file is.
    token = value("--admin-token-file")
    if token:
        mine = secret_key(plugin, volumes, token)
        theirs = secret_key(server, volumes, srv.get("admin_token_file", ""))
        if check(mine is not None, f"--admin-token-file {token} is no file of a mounted Secret"):
            check(mine == theirs, f"--admin-token-file {token} is {mine}, the server's "
                                  f"admin_token_file is {theirs}: not the same token")

    # The kubelet's sockets: the node's, wherever the plugin sees them.
    for opt, key in (("--device-plugin-dir", "device_plugin_dir"),
                     ("--pod-resources-socket", "pod_resources_socket")):
        path = value(opt, PLUGIN_DEFAULTS[key])
        node = host_path(plugin, volumes, path)
        check(node == PLUGIN_DEFAULTS[key],
              f"{opt} {path} is {seen(node)} in the plugin's container; the kubelet's is the "
              f"node's {PLUGIN_DEFAULTS[key]} (k8s-plugin/plugin.h)")

    # Paths the plugin hands the kubelet (mounts into containers): host paths, the same inside.
    lib_dir = value("--client-lib-dir")
    check(lib_dir, "no --client-lib-dir: containers would be given no client libraries")
    for opt, path in (("--state-dir", value("--state-dir", PLUGIN_DEFAULTS["state_dir"])),
                      ("--client-lib-dir", lib_dir)):
        if not path:
            continue
        node = host_path(plugin, volumes, path)
        check(node == path.rstrip("/"),
              f"{opt} {path} is {seen(node)} in the plugin's "
              f"container: the kubelet mounts the node's {path}")

    # An initContainer puts the client libraries where --client-lib-dir says.
    if lib_dir:
        def fills(c):
            text = " ".join(str(t) for t in (c.get("command") or []) + (c.get("args") or []))
            return any(host_path(c, volumes, m["mountPath"]) == lib_dir.rstrip("/")
                       and m["mountPath"] in text for m in c.get("volumeMounts", []) or [])
        check(any(fills(c) for c in pod.get("initContainers") or []),
              f"no initContainer copies the client libraries into --client-lib-dir {lib_dir}")

    # --advertise: where containers are sent.
    advertise = [v for v in pargs.get("--advertise", []) if v]
    check(not advertise or len(advertise) == len(servers),
          "--advertise is not given once per --server")
    for addr in advertise:
        scheme, host, port = address(addr)
        check(scheme in ("tls", "tcp") and (scheme, port) in net,
              f"--advertise {addr}: gpu-server listens on no {scheme}: port {port}")
        m = re.fullmatch(r"([a-z0-9-]+)\.([a-z0-9-]+)\.svc(?:\.cluster\.local)?", host)
        if m:
            s = svcs.get(m.group(1)) if m.group(2) == ns else None
            if not check(s, f"--advertise {addr}: no Service {m.group(1)} in {ns}"):
                continue
            check(s["spec"].get("internalTrafficPolicy") == "Local",
                  f"Service {m.group(1)} may send a client to another node's server (caps are "
                  f"per node): internalTrafficPolicy is not Local")
            check(any(p["port"] == port and port_number(server, p["targetPort"]) == port
                      for p in s["spec"]["ports"]),
                  f"Service {m.group(1)} has no port {port} to gpu-server's {port}")
            if scheme == "tls":
                check(re.search(r"subjectAltName=\S*DNS:" + re.escape(host) + r"\b", raw_text),
                      f"the certificate the instructions make does not name {host}")
        elif host == "$(NODE_IP)":
            check(envs(plugin).get("NODE_IP", {}).get("valueFrom", {}).get("fieldRef", {})
                  .get("fieldPath") == "status.hostIP", "NODE_IP is not status.hostIP")
            check(any(p.get("hostPort") == port for p in server["ports"]),
                  f"--advertise {addr}: no hostPort {port}")
        else:
            check(False, f"--advertise {addr}: neither the node-local Service nor the node's IP")

    open(opts.out_toml, "w").write(toml_text)
    return by_kind, {"advertise": advertise, "args": pargs, "value": value}


def check_pod(path, plugin):
    docs = [d for d in yaml.safe_load_all(open(path)) if d]
    pods = [d for d in docs if d.get("kind") == "Pod"]
    need(pods, f"{path}: no Pod")
    pod = pods[0]
    spec = pod["spec"]
    name = pod["metadata"]["name"]
    check("nvidia" not in str(spec.get("runtimeClassName", "")),
          f"pod {name} runs under the NVIDIA runtime: it should reach its GPU through cuwire only")
    value = plugin["value"]
    unit = size_bytes(value("--memory-unit", main_default("memory_unit")))
    gran = size_bytes(value("--memory-granularity", main_default("memory_granularity")))
    compute_gran = int(value("--compute-granularity", main_default("compute_granularity")))
    plugin_paths = {value("--container-token-dir", PLUGIN_DEFAULTS["container_token_dir"]),
                    value("--container-lib-dir", PLUGIN_DEFAULTS["container_lib_dir"])}
    tls = any(address(a)[0] == "tls" for a in plugin["advertise"])
    volumes = {v["name"]: v for v in spec.get("volumes", []) or []}
    asked = set()
    for c in spec["containers"] + (spec.get("initContainers") or []):
        no_visible_devices_all(c, f"pod {name}")
        res = c.get("resources") or {}
        limits, requests = res.get("limits") or {}, res.get("requests") or {}
        for k, v in {**requests, **limits}.items():
            if not k.startswith("cuwire.io/"):
                continue
            asked.add(k)
            check(k in RESOURCES, f"pod {name} asks for {k}: the plugin sells {sorted(RESOURCES)}")
            check(requests.get(k, v) == limits.get(k, v),
                  f"pod {name}: {k} requests and limits differ (extended resources may not)")
            check(isinstance(v, int) and v > 0, f"pod {name}: {k} {v} is not a count")
        mem = limits.get("cuwire.io/gpu-memory")
        if isinstance(mem, int):
            check(mem * unit % gran == 0,
                  f"pod {name}: cuwire.io/gpu-memory {mem} is not a multiple of {gran // unit}")
        compute = limits.get("cuwire.io/gpu-compute")
        if isinstance(compute, int):
            check(compute % compute_gran == 0 and 0 < compute <= 100,
                  f"pod {name}: cuwire.io/gpu-compute {compute} is not a multiple of "
                  f"{compute_gran} up to 100")
        env = envs(c)
        for var in ("CUWIRE_SERVER", "CUWIRE_TOKEN", "CUWIRE_TOKEN_FILE", "CUWIRE_TOKEN_DIR",
                    "LD_LIBRARY_PATH"):
            check(var not in env, f"pod {name} sets {var}: the plugin's to set")
        for m in c.get("volumeMounts", []) or []:
            check(m["mountPath"].rstrip("/") not in plugin_paths,
                  f"pod {name} mounts {m['mountPath']}, where the plugin mounts its own")
        if not any(k.startswith("cuwire.io/") for k in limits):
            continue
        nvd = env.get("NVIDIA_VISIBLE_DEVICES", {}).get("value")
        check(nvd == "void",
              f"pod {name} does not set NVIDIA_VISIBLE_DEVICES=void (an image's =all hands it "
              f"the node's GPUs where NVIDIA's runtime is the default)")
        if tls:
            ca = env.get("CUWIRE_CA", {}).get("value")
            if check(ca, f"pod {name}: CUWIRE_CA unset (the plugin advertises tls: but no CA)"):
                r = resolve(c, volumes, ca)
                check(r and r[1] and ("configMap" in r[1] or "secret" in r[1]),
                      f"pod {name}: CUWIRE_CA {ca} is no file of a mounted ConfigMap or Secret")
    check(asked, f"pod {name} asks for no cuwire.io resource")
    return name


try:
    by_kind, plugin = check_manifest()
    pod_name = check_pod(opts.pod, plugin) if opts.pod else None
except Broken as e:
    problems.append(str(e))
except (KeyError, IndexError, TypeError, ValueError) as e:
    problems.append(f"a manifest lacks what it needs: {type(e).__name__} {e}")

if problems:
    for p in problems:
        print("manifest problem:", p)
    sys.exit(1)
print("manifests ok:", ", ".join(sorted(by_kind)))
if pod_name:
    print("example pod ok:", pod_name)
