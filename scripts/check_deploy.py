#!/usr/bin/env python3
"""Offline checks of the deployment files, run by scripts/check-deploy (in its virtualenv).

  check_deploy.py image COMPOSE_CONFIG_YAML
      The image and compose check list: what issue 16 asks of the Dockerfile and of
      docker-compose.yml, on the Dockerfile text and on `docker-compose config` output (every
      profile, anchors resolved).
  check_deploy.py k8s KUSTOMIZE_DIR... K8S_VERSION... [--rendered FILE]
      Renders the kustomizations (deploy/base and deploy/seccomp, checked together: a small
      renderer for the features they use; with --rendered, the output of `kubectl kustomize` of
      them instead), then validates every resource:
      built-in kinds with kubernetes-validate (strict: unknown fields fail), KEDA's kinds against
      the CRD schemas vendored in deploy/vendor/keda (unknown fields fail too), and the
      cross-references and sizing rules listed in check_references().
"""

import copy
import json
import re
import sys
from pathlib import Path

import jsonschema
import yaml

ROOT = Path(__file__).resolve().parent.parent
KEDA_CRDS = ROOT / "deploy" / "vendor" / "keda"

failures = []


def check(ok, message):
    if not ok:
        failures.append(message)
    return ok


def finish(what):
    if failures:
        print(f"FAIL {what}:")
        for failure in failures:
            print(f"  - {failure}")
        sys.exit(1)
    print(f"ok   {what}")


# --- image and compose -------------------------------------------------------------------------


def dockerfile_stages(text):
    """[(FROM line, [instruction lines])] with continuation lines joined and comments dropped."""
    logical, current = [], []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#") or (not stripped and not current):
            continue
        if stripped.endswith("\\"):
            current.append(stripped[:-1].strip())
            continue
        current.append(stripped)
        logical.append(" ".join(part for part in current if part))
        current = []
    stages = []
    for instruction in logical:
        if instruction.upper().startswith("FROM "):
            stages.append((instruction, []))
        elif stages:
            stages[-1][1].append(instruction)
    return stages


def check_image(compose_config_path):
    dockerfile = (ROOT / "Dockerfile").read_text()
    stages = dockerfile_stages(dockerfile)
    check(len(stages) >= 2, "the Dockerfile is multi-stage (a build stage and a runtime stage)")
    build = " ".join(stages[0][1]) if stages else ""
    check("SQLX_OFFLINE=true" in build.replace(" ", ""),
          "the build stage sets SQLX_OFFLINE=true (builds from .sqlx, no database)")
    check("--locked" in build, "the build stage builds with --locked")
    runtime_from, runtime = stages[-1] if stages else ("", [])
    check(re.search(r"\bdebian:bookworm", runtime_from) is not None,
          f"the runtime stage is Debian bookworm ({runtime_from})")
    run = " ".join(i for i in runtime if i.upper().startswith("RUN "))
    for package in ["chromium-headless-shell", "fonts-liberation", "fonts-noto-cjk", "fonts-noto-color-emoji",
                    "tini", "curl", "ca-certificates"]:
        check(re.search(rf"(^|\s){re.escape(package)}(\s|$)", run) is not None,
              f"the runtime stage installs {package}")
    envs = " ".join(i for i in runtime if i.upper().startswith("ENV "))
    check(re.search(r"\bBROWSERD_CHROME=/usr/bin/chromium-headless-shell(\s|$)", envs) is not None,
          "the runtime stage sets BROWSERD_CHROME to the headless shell it installs")
    users = [i.split(None, 1)[1] for i in runtime if i.upper().startswith("USER ")]
    check(bool(users) and re.fullmatch(r"[1-9][0-9]*(:[0-9]+)?", users[-1]) is not None,
          f"the runtime stage runs as a numeric non-root USER (found {users})")
    healthchecks = [i for i in runtime if i.upper().startswith("HEALTHCHECK ")]
    check(len(healthchecks) == 1 and "/readyz" in healthchecks[0] and "curl" in healthchecks[0],
          "one HEALTHCHECK, polling /readyz with curl")
    entrypoints = [i for i in runtime if i.upper().startswith("ENTRYPOINT ")]
    check(bool(entrypoints) and "tini" in entrypoints[-1].split(",")[0],
          "the ENTRYPOINT starts with tini (PID 1 reaps Chrome's processes)")
    check(bool(entrypoints) and "-g" not in entrypoints[-1],
          "tini forwards SIGTERM to browserd only (no -g): the worker must hand its tasks back "
          "before Chrome is stopped")

    for path in [ROOT / "Dockerfile", ROOT / "docker-compose.yml", *sorted((ROOT / "deploy" / "base").glob("*")),
                 *sorted((ROOT / "deploy" / "seccomp").glob("*.yaml"))]:
        check("--no-sandbox" not in path.read_text(),
              f"{path.relative_to(ROOT)} does not pass --no-sandbox")

    config = yaml.safe_load(Path(compose_config_path).read_text())
    services = config["services"]
    expected = {"postgres", "migrate", "browserd", "worker", "otel-collector", "jaeger"}
    check(expected <= set(services), f"services {sorted(expected - set(services))} are missing")
    postgres = services.get("postgres", {})
    check(postgres.get("healthcheck", {}).get("test", ["NONE"]) != ["NONE"],
          "postgres has a healthcheck")
    check(any(":/var/lib/postgresql/data" in str(v) or
              (isinstance(v, dict) and v.get("target") == "/var/lib/postgresql/data")
              for v in postgres.get("volumes", [])), "postgres keeps its data in a volume")
    check(services.get("migrate", {}).get("command") == ["migrate"], "migrate runs `browserd migrate`")
    check(services.get("migrate", {}).get("depends_on", {}).get("postgres", {}).get("condition")
          == "service_healthy", "migrate waits for a healthy postgres")
    for name in ["browserd", "worker"]:
        service = services.get(name, {})
        env = service.get("environment", {})
        check(service.get("depends_on", {}).get("migrate", {}).get("condition")
              == "service_completed_successfully", f"{name} starts after the migrations")
        check(parse_bytes(service.get("shm_size", 0)) >= 1 << 30, f"{name}: shm_size >= 1gb")
        grace = int(env.get("BROWSERD_TASK_GRACE_S", 30))
        check(parse_seconds(service.get("stop_grace_period", "10s")) >= grace + 15,
              f"{name}: stop_grace_period >= BROWSERD_TASK_GRACE_S + 15 s (the worker waits up to "
              "grace + 10 s for its tasks, then stops Chrome)")
        check(env.get("BROWSERD_CONFIG") == "/etc/browserd/browserd.toml" and any(
            ":/etc/browserd/browserd.toml" in str(v) or
            (isinstance(v, dict) and v.get("target") == "/etc/browserd/browserd.toml")
            for v in service.get("volumes", [])), f"{name} mounts the model catalog")
        check("host.docker.internal:host-gateway" in service.get("extra_hosts", []),
              f"{name} reaches the host as host.docker.internal")
        for var in ["BROWSERD_SECRETS_KEY", "OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_SERVICE_NAME"]:
            check(var in env, f"{name} passes {var}")
        # Chrome's sandbox: user namespaces allowed by the shipped seccomp profile (checked by
        # scripts/check_seccomp.py with real Chrome), no way to gain privileges, no capabilities.
        security = [str(o) for o in service.get("security_opt", [])]
        check(any(o.startswith("seccomp") and o.endswith("deploy/seccomp/browserd-chrome.json")
                  for o in security), f"{name} runs under deploy/seccomp/browserd-chrome.json")
        check(any(o.replace("=", ":") == "no-new-privileges:true" for o in security),
              f"{name}: no-new-privileges")
        check([c.upper() for c in service.get("cap_drop", [])] == ["ALL"], f"{name}: cap_drop ALL")
        check(str(env.get("BROWSERD_CHROME_NO_SANDBOX", "false")).lower() in ("false", "0", "no", "off"),
              f"{name}: Chrome keeps its sandbox by default")
    check(services.get("worker", {}).get("command") == ["worker"], "worker runs `browserd worker`")
    for name in ["worker", "migrate"]:
        healthcheck = services.get(name, {}).get("healthcheck", {})
        # `disable: true` (compose v2 prints it as is, Debian's docker-compose 1.29 as NONE).
        check(healthcheck.get("disable") is True or healthcheck.get("test") == ["NONE"],
              f"{name} serves no HTTP: the image's /readyz HEALTHCHECK is disabled")
    check(services.get("worker", {}).get("profiles") == ["scale"], "worker is in profile scale")
    check("ports" not in services.get("worker", {}), "worker publishes no port (--scale)")
    for name in ["otel-collector", "jaeger"]:
        check(services.get(name, {}).get("profiles") == ["otel"], f"{name} is in profile otel")
    collector_mounts = [str(v.get("source", "")) if isinstance(v, dict) else str(v).split(":")[0]
                        for v in services.get("otel-collector", {}).get("volumes", [])]
    check(any(Path(m).is_file() for m in collector_mounts),
          f"the collector's config file exists ({collector_mounts})")
    finish("image and compose check list")


def parse_bytes(value):
    if isinstance(value, int):
        return value
    match = re.fullmatch(r"(\d+)\s*([kmg]?)b?", str(value).strip().lower())
    if not match:
        return 0
    return int(match.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[match.group(2)]


def parse_seconds(value):
    total = 0
    for number, unit in re.findall(r"(\d+)(h|ms|m|s|us)", str(value)):
        total += int(number) * {"h": 3600, "m": 60, "s": 1, "ms": 0.001, "us": 0.000001}[unit]
    return total


# --- Kubernetes ---------------------------------------------------------------------------------

# Kinds without a namespace (the renderer must not give them one).
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding", "CustomResourceDefinition",
                  "PriorityClass", "StorageClass", "ClusterTriggerAuthentication"}


def render(directory):
    """Renders a kustomization that uses only: resources (files), namespace, labels (pairs,
    metadata only), configMapGenerator (files/literals, no name hash) and images. Anything else
    fails, so that the renderer cannot silently ignore a feature added to deploy/base."""
    directory = Path(directory)
    kustomization = yaml.safe_load((directory / "kustomization.yaml").read_text())
    known = {"apiVersion", "kind", "namespace", "labels", "resources", "configMapGenerator",
             "images"}
    unknown = set(kustomization) - known
    if unknown:
        sys.exit(f"FAIL render: kustomization fields {sorted(unknown)} are not supported by "
                 "scripts/check_deploy.py: extend render()")
    resources = []
    for entry in kustomization.get("resources", []):
        path = directory / entry
        if path.is_dir():
            sys.exit(f"FAIL render: {entry}: directories are not supported: extend render()")
        resources += [r for r in yaml.safe_load_all(path.read_text()) if r]
    for generator in kustomization.get("configMapGenerator", []):
        data = {}
        for file in generator.get("files", []):
            key, _, source = file.partition("=")
            source = source or key
            data[Path(key).name] = (directory / source).read_text()
        for literal in generator.get("literals", []):
            key, _, value = literal.partition("=")
            data[key] = value
        resources.append({"apiVersion": "v1", "kind": "ConfigMap",
                          "metadata": {"name": generator["name"]}, "data": data})
    namespace = kustomization.get("namespace")
    images = {i["name"]: i for i in kustomization.get("images", [])}
    for resource in resources:
        metadata = resource.setdefault("metadata", {})
        if namespace and resource["kind"] not in CLUSTER_SCOPED:
            metadata["namespace"] = namespace
        for labels in kustomization.get("labels", []):
            metadata.setdefault("labels", {}).update(labels.get("pairs", {}))
        for container in containers(resource):
            image = images.get(container.get("image"))
            if image:
                container["image"] = f"{image.get('newName', image['name'])}:{image['newTag']}"
    return resources


def pod_spec(resource):
    spec = resource.get("spec", {})
    if resource["kind"] in {"Deployment", "StatefulSet", "DaemonSet", "Job", "ReplicaSet"}:
        return spec.get("template", {}).get("spec", {})
    if resource["kind"] == "Pod":
        return spec
    return None


def containers(resource):
    spec = pod_spec(resource) or {}
    return spec.get("containers", []) + spec.get("initContainers", [])


def strict_crd_schema(schema):
    """An openAPIV3Schema as JSON Schema that rejects unknown fields like the API server's
    strict field validation (objects with `properties` and no `additionalProperties` and no
    x-kubernetes-preserve-unknown-fields are closed), and knows int-or-string."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if node.get("x-kubernetes-int-or-string"):
                node.pop("type", None)
                node["anyOf"] = [{"type": "integer"}, {"type": "string"}]
            if (node.get("type") == "object" and "properties" in node
                    and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            if node.get("nullable") and "type" in node:
                node["type"] = [node["type"], "null"]
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    # The API server checks metadata itself; the CRD schema leaves it open.
    schema["properties"]["metadata"] = {
        "type": "object",
        "required": ["name"],
        "properties": {"name": {"type": "string",
                                "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                                "maxLength": 253}},
    }
    return schema


def crd_schemas():
    schemas = {}
    for path in sorted(KEDA_CRDS.glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        for version in crd["spec"]["versions"]:
            schema = strict_crd_schema(version["schema"]["openAPIV3Schema"])
            schemas[(f"{group}/{version['name']}", kind)] = (schema, path.name)
    return schemas


def validate_resources(resources, versions, label):
    import kubernetes_validate.utils as kv

    custom = crd_schemas()
    for resource in resources:
        name = f"{resource.get('kind')}/{resource.get('metadata', {}).get('name')}"
        key = (resource.get("apiVersion"), resource.get("kind"))
        if key in custom:
            schema, source = custom[key]
            errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(resource),
                            key=lambda e: list(e.path))
            for error in errors:
                path = ".".join(str(p) for p in error.path)
                check(False, f"{label}: {name}: {path}: {error.message} (schema {source})")
            continue
        for version in versions:
            try:
                kv.validate(resource, version, strict=True)
            except kv.ValidationError as error:
                path = ".".join(str(p) for p in error.path)
                check(False, f"{label}: {name} (Kubernetes {version}): {path}: {error.message}")
            except kv.SchemaNotFoundError:
                check(False, f"{label}: {name}: no schema for {key} in Kubernetes {version}")


def env_value(container, name):
    for var in container.get("env", []):
        if var["name"] == name:
            return var.get("value")
    return None


# Where the kubelet reads `Localhost` seccomp profiles (its root dir + /seccomp), and the
# subdirectory deploy/seccomp's installer writes Chrome's profile into.
KUBELET_SECCOMP_ROOT = "/var/lib/kubelet/seccomp"
KUBELET_PROFILE_DIR = f"{KUBELET_SECCOMP_ROOT}/browserd"
SECCOMP_PROFILE = ROOT / "deploy" / "seccomp" / "browserd-chrome.json"
installer = None


def is_seccomp_installer(resource, container):
    """The one container allowed to run as uid 0: the installer's init container, which has no
    capability and no mount but its ConfigMap and the profile's own host directory."""
    if resource is not installer:
        return False
    init = pod_spec(resource).get("initContainers", [])
    security = container.get("securityContext", {})
    mounts = {m["name"] for m in container.get("volumeMounts", [])}
    volumes = {v["name"]: v for v in pod_spec(resource).get("volumes", [])}
    return (container in init and security.get("capabilities", {}).get("drop") == ["ALL"]
            and security.get("allowPrivilegeEscalation") is False
            and all("configMap" in volumes[m] or
                    volumes[m].get("hostPath", {}).get("path") == KUBELET_PROFILE_DIR
                    for m in mounts))


def check_seccomp_installation(by_kind, worker, label):
    """The worker runs under the profile the installer puts on every node, and Chrome's sandbox
    stays on: the same file as Compose uses, in the path the worker names, on every node."""
    global installer
    spec = pod_spec(worker)
    profile = (containers(worker)[0].get("securityContext", {}).get("seccompProfile")
               or spec.get("securityContext", {}).get("seccompProfile", {}))
    check(profile.get("type") == "Localhost"
          and profile.get("localhostProfile") == "browserd/browserd-chrome.json",
          f"{label}: the worker runs under Localhost browserd/browserd-chrome.json ({profile})")
    check(str(env_value(containers(worker)[0], "BROWSERD_CHROME_NO_SANDBOX") or "false").lower()
          in ("false", "0", "no", "off"), f"{label}: the worker keeps Chrome's sandbox on")
    if not check(installer is not None,
                 f"{label}: DaemonSet browserd-seccomp-installer exists (deploy/seccomp)"):
        return
    ds = pod_spec(installer)
    check({"operator": "Exists"} in ds.get("tolerations", []),
          f"{label}: the installer tolerates every taint (runs wherever a worker can)")
    volumes = {v["name"]: v for v in ds.get("volumes", [])}
    host = [v for v in volumes.values() if "hostPath" in v]
    check(len(host) == 1 and host[0]["hostPath"]["path"] == KUBELET_PROFILE_DIR,
          f"{label}: the installer mounts {KUBELET_PROFILE_DIR} only")
    source = [v["configMap"]["name"] for v in volumes.values() if "configMap" in v]
    configmap = by_kind.get("ConfigMap", {}).get(source[0] if source else None)
    if check(configmap is not None, f"{label}: the installer's profile ConfigMap exists"):
        shipped = configmap.get("data", {}).get("browserd-chrome.json")
        check(shipped is not None and json.loads(shipped) == json.loads(SECCOMP_PROFILE.read_text()),
              f"{label}: the installer ships deploy/seccomp/browserd-chrome.json")
    install = pod_spec(installer).get("initContainers", [])
    script = " ".join(" ".join(c.get("command", [])) for c in install)
    mount = next((m["mountPath"] for c in install for m in c.get("volumeMounts", [])
                  if m["name"] == host[0]["name"]), None) if host else None
    check(mount is not None and f"{mount}/browserd-chrome.json" in script and "mv" in script,
          f"{label}: the installer writes browserd-chrome.json into the host directory "
          "atomically (copy, then rename)")
    namespaces = by_kind.get("Namespace", {})
    browserd_ns = namespaces.get(worker["metadata"].get("namespace"), {})
    check(browserd_ns.get("metadata", {}).get("labels", {})
          .get("pod-security.kubernetes.io/enforce") == "restricted",
          f"{label}: the browserd namespace enforces the restricted Pod Security level")
    restricted_volumes = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral",
                          "persistentVolumeClaim", "projected", "secret"}
    for resource in [*by_kind.get("Deployment", {}).values(), *by_kind.get("Job", {}).values()]:
        if resource["metadata"].get("namespace") != worker["metadata"].get("namespace"):
            continue
        # What the `restricted` level adds to the checks every workload gets above.
        name = f"{resource['kind']}/{resource['metadata']['name']}"
        pod = pod_spec(resource)
        check(not any(pod.get(h) for h in ("hostNetwork", "hostPID", "hostIPC")),
              f"{label}: {name}: no host namespaces (restricted)")
        for volume in pod.get("volumes", []):
            check(set(volume) - {"name"} <= restricted_volumes,
                  f"{label}: {name}: volume {volume['name']} is of a restricted-level type")
        for container in containers(resource):
            security = container.get("securityContext", {})
            user = security.get("runAsUser", pod.get("securityContext", {}).get("runAsUser"))
            check(user != 0, f"{label}: {name}: {container['name']} is not uid 0 (restricted)")
            check(not security.get("privileged") and set(security.get("capabilities", {})
                                                        .get("add", [])) <= {"NET_BIND_SERVICE"},
                  f"{label}: {name}: {container['name']} is unprivileged (restricted)")
    check(installer["metadata"].get("namespace") != worker["metadata"].get("namespace"),
          f"{label}: the installer (host directory) lives outside the restricted namespace")
    images = {c["image"] for r in (worker, installer) for c in containers(r)}
    check(len(images) == 1, f"{label}: deploy/base and deploy/seccomp use the same image ({images})")


def check_references(resources, label):
    global installer
    by_kind = {}
    for resource in resources:
        by_kind.setdefault(resource["kind"], {})[resource["metadata"]["name"]] = resource
    installer = by_kind.get("DaemonSet", {}).get("browserd-seccomp-installer")
    configmaps = set(by_kind.get("ConfigMap", {}))
    secrets = set(by_kind.get("Secret", {}))
    # kubectl kustomize appends a content hash to generated ConfigMaps and rewrites references.
    workloads = [r for r in resources if pod_spec(r) is not None]
    pod_labels = [r["spec"]["template"]["metadata"]["labels"] for r in workloads
                  if "template" in r["spec"]]

    def selects_pods(selector):
        return any(all(labels.get(k) == v for k, v in selector.items()) for labels in pod_labels)

    for resource in workloads:
        name = f"{resource['kind']}/{resource['metadata']['name']}"
        spec = pod_spec(resource)
        pod_non_root = spec.get("securityContext", {}).get("runAsNonRoot")
        for container in containers(resource):
            non_root = container.get("securityContext", {}).get("runAsNonRoot", pod_non_root)
            check(non_root is True or is_seccomp_installer(resource, container),
                  f"{label}: {name}: container {container['name']} runs as non-root")
        for volume in spec.get("volumes", []):
            if "hostPath" in volume:
                check(resource is installer and volume["hostPath"]["path"] == KUBELET_PROFILE_DIR,
                      f"{label}: {name}: no host directory but the seccomp installer's "
                      f"({volume['hostPath']['path']})")
        check(spec.get("automountServiceAccountToken") is False,
              f"{label}: {name} mounts no service-account token")
        if resource["kind"] == "Deployment":
            selector = resource["spec"]["selector"]["matchLabels"]
            check(all(resource["spec"]["template"]["metadata"]["labels"].get(k) == v
                      for k, v in selector.items()), f"{label}: {name}: selector matches its pods")
        for volume in spec.get("volumes", []):
            if "configMap" in volume:
                check(volume["configMap"]["name"] in configmaps,
                      f"{label}: {name}: ConfigMap {volume['configMap']['name']} exists")
        for container in containers(resource):
            check("--no-sandbox" not in json.dumps(container),
                  f"{label}: {name}: Chrome keeps its sandbox flags out of the manifests")
            security = container["securityContext"]
            check(security.get("allowPrivilegeEscalation") is False,
                  f"{label}: {name}: no privilege escalation")
            check(security.get("capabilities", {}).get("drop") == ["ALL"],
                  f"{label}: {name}: drops every capability")
            check(security.get("readOnlyRootFilesystem") is True,
                  f"{label}: {name}: read-only root filesystem")
            seccomp_type = (security.get("seccompProfile")
                            or spec.get("securityContext", {}).get("seccompProfile", {})).get("type")
            check(seccomp_type in ("RuntimeDefault", "Localhost"),
                  f"{label}: {name}: a seccomp profile ({seccomp_type})")
            for var in container.get("env", []):
                ref = var.get("valueFrom", {}).get("secretKeyRef")
                if ref:
                    secret = by_kind.get("Secret", {}).get(ref["name"])
                    check(secret is not None and (ref["key"] in secret.get("stringData", {})
                                                  or ref["key"] in secret.get("data", {})),
                          f"{label}: {name}: Secret {ref['name']} has key {ref['key']}")

    api = by_kind.get("Deployment", {}).get("browserd-api")
    worker = by_kind.get("Deployment", {}).get("browserd-worker")
    if check(api is not None and worker is not None,
             f"{label}: Deployments browserd-api and browserd-worker exist"):
        api_container = containers(api)[0]
        check(api_container["args"] == ["api"], f"{label}: the api pods run `browserd api`")
        check(api_container["readinessProbe"]["httpGet"]["path"] == "/readyz",
              f"{label}: api readiness probe on /readyz")
        check(api_container["livenessProbe"]["httpGet"]["path"] == "/healthz",
              f"{label}: api liveness probe on /healthz")
        check(env_value(api_container, "BROWSERD_LISTEN") == "0.0.0.0:8080",
              f"{label}: the api listens on 0.0.0.0:8080")
        spec = pod_spec(worker)
        container = containers(worker)[0]
        check(container["args"] == ["worker"], f"{label}: the worker pods run `browserd worker`")
        check_seccomp_installation(by_kind, worker, label)
        grace = int(env_value(container, "BROWSERD_TASK_GRACE_S") or 30)
        check(spec.get("terminationGracePeriodSeconds", 30) >= grace + 15,
              f"{label}: worker terminationGracePeriodSeconds >= BROWSERD_TASK_GRACE_S + 15 s")
        shm = [v for v in spec.get("volumes", [])
               if v.get("emptyDir", {}).get("medium") == "Memory"
               and any(m["name"] == v["name"] and m["mountPath"] == "/dev/shm"
                       for m in container.get("volumeMounts", []))]
        check(bool(shm), f"{label}: the worker mounts a memory emptyDir at /dev/shm")
        resources_ = container.get("resources", {})
        check("memory" in resources_.get("requests", {}) and "memory" in resources_.get("limits", {}),
              f"{label}: the worker has memory requests and limits")
        concurrency = int(env_value(container, "BROWSERD_CONCURRENCY") or 4)
        scaled = by_kind.get("ScaledObject", {}).get("browserd-worker")
        if check(scaled is not None, f"{label}: ScaledObject browserd-worker exists"):
            check(scaled["spec"]["scaleTargetRef"]["name"] == "browserd-worker",
                  f"{label}: the ScaledObject scales browserd-worker")
            trigger = scaled["spec"]["triggers"][0]
            check(trigger["type"] == "postgresql", f"{label}: the worker scales on postgresql")
            check(int(trigger["metadata"]["targetQueryValue"]) == concurrency,
                  f"{label}: targetQueryValue == the worker's BROWSERD_CONCURRENCY")
            auth = by_kind.get("TriggerAuthentication", {}).get(
                trigger.get("authenticationRef", {}).get("name"))
            if check(auth is not None, f"{label}: the trigger's TriggerAuthentication exists"):
                for ref in auth["spec"].get("secretTargetRef", []):
                    check(ref["name"] in secrets, f"{label}: Secret {ref['name']} exists")
    for kind in ["HorizontalPodAutoscaler"]:
        for name, hpa in by_kind.get(kind, {}).items():
            check(hpa["spec"]["scaleTargetRef"]["name"] in by_kind.get("Deployment", {}),
                  f"{label}: {kind}/{name} targets an existing Deployment")
    for kind in ["Service", "PodDisruptionBudget"]:
        for name, resource in by_kind.get(kind, {}).items():
            selector = resource["spec"]["selector"]
            selector = selector.get("matchLabels", selector) if kind == "PodDisruptionBudget" else selector
            check(selects_pods(selector), f"{label}: {kind}/{name} selects pods")
    check({"api", "worker"} <= {p["spec"]["selector"]["matchLabels"].get("app.kubernetes.io/component")
                               for p in by_kind.get("PodDisruptionBudget", {}).values()},
          f"{label}: api and worker have PodDisruptionBudgets")
    policy = by_kind.get("NetworkPolicy", {}).get("browserd-worker")
    if check(policy is not None, f"{label}: NetworkPolicy browserd-worker exists"):
        check("Egress" in policy["spec"]["policyTypes"], f"{label}: the worker policy limits egress")
        blocks = [peer["ipBlock"] for rule in policy["spec"]["egress"] for peer in rule.get("to", [])
                  if "ipBlock" in peer and peer["ipBlock"]["cidr"] in ("0.0.0.0/0", "::/0")]
        v4 = next((b for b in blocks if b["cidr"] == "0.0.0.0/0"), {})
        for private in ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16",
                        "100.64.0.0/10", "127.0.0.0/8"]:
            check(private in v4.get("except", []),
                  f"{label}: the worker's internet rule excludes {private}")
        v6 = next((b for b in blocks if b["cidr"] == "::/0"), None)
        if v6:
            for private in ["fc00::/7", "fe80::/10", "::1/128", "::ffff:0:0/96"]:
                check(private in v6.get("except", []),
                      f"{label}: the worker's internet rule excludes {private}")


def check_k8s(directories, versions, rendered=None):
    if rendered:
        resources = [r for r in yaml.safe_load_all(Path(rendered).read_text()) if r]
        label = "kubectl kustomize"
    else:
        resources = [r for directory in directories for r in render(directory)]
        label = "rendered by check_deploy.py"
    check(len(resources) > 0, f"{label}: no resources")
    validate_resources(resources, versions, label)
    check_references(resources, label)
    finish(f"Kubernetes manifests ({label}, {len(resources)} resources, Kubernetes "
           f"{' and '.join(versions)}, KEDA CRDs from {KEDA_CRDS.relative_to(ROOT)})")


def main(argv):
    if len(argv) == 2 and argv[0] == "image":
        check_image(argv[1])
    elif len(argv) >= 3 and argv[0] == "k8s":
        rendered = None
        if "--rendered" in argv:
            i = argv.index("--rendered")
            rendered = argv[i + 1]
            argv = argv[:i] + argv[i + 2:]
        directories = [a for a in argv[1:] if Path(a).is_dir()]
        check_k8s(directories, [a for a in argv[1:] if a not in directories], rendered)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
