//! Black-box tests of the test node agent (testing ladder item 5): a real control plane
//! (`ControlPlane`) whose pods the agent runs as processes in network namespaces of their own.
//! They need root (namespaces, mounts) and skip cleanly without it; they need the control plane
//! binaries (scripts/install-control-plane.sh) and `target/release/keymesh-server`.

use std::time::Duration;

use keymesh_e2e::agent::{AgentOptions, ImageMap, NodeAgent};
use keymesh_e2e::cluster::server_binary;
use keymesh_e2e::eventually;
use keymesh_e2e::{require_netns, ControlPlane};

const SERVER_IMAGE: &str = "keymesh/keymesh-server:dev";
const SHELL_IMAGE: &str = "keymesh/test-shell:dev";
const WAIT: Duration = Duration::from_secs(40);

fn start() -> (ControlPlane, NodeAgent) {
    let cp = ControlPlane::start().unwrap_or_else(|e| panic!("control plane did not start: {e}"));
    let server = server_binary();
    assert!(server.is_file(), "{} missing: build it with `cargo build --release -p keymesh-engine`", server.display());
    let images = ImageMap::new().with(SERVER_IMAGE, server).with(SHELL_IMAGE, "/bin/sh");
    let agent = NodeAgent::start(&cp, AgentOptions::new(images)).unwrap_or_else(|e| panic!("node agent did not start: {e}"));
    (cp, agent)
}

/// Waits until pod `name` is Ready and returns its IP.
fn ready_pod_ip(cp: &ControlPlane, name: &str) -> String {
    eventually(&format!("pod {name} Ready"), WAIT, || {
        let out = cp.jsonpath(&["get", "pod", name], r#"{.status.conditions[?(@.type=="Ready")].status} {.status.podIP}"#)?;
        match out.split_once(' ') {
            Some(("True", ip)) if !ip.is_empty() => Ok(ip.to_owned()),
            _ => Err(format!("{out}; status: {}", cp.jsonpath(&["get", "pod", name], "{.status}").unwrap_or_default())),
        }
    })
}

/// A ConfigMap with the engine's config file, a Secret with its password, and (as YAML
/// documents to append) nothing else: the pod template below uses both.
const ENGINE_CONFIG: &str = r#"
apiVersion: v1
kind: ConfigMap
metadata: {name: engine-config}
data:
  keymesh.conf: |
    bind 0.0.0.0
    protected-mode no
    port 6379
---
apiVersion: v1
kind: Secret
metadata: {name: engine-auth}
stringData: {password: s3cret}
"#;

/// An engine pod spec (indented for a pod's `spec:` or a template's).
fn engine_spec(indent: usize) -> String {
    let spec = r#"terminationGracePeriodSeconds: 10
containers:
- name: keymesh
  image: keymesh/keymesh-server:dev
  command: [keymesh-server]
  args: [/etc/keymesh/keymesh.conf, --node-name, $(POD_NAME), --requirepass, $(KEYMESH_PASSWORD)]
  env:
  - name: POD_NAME
    valueFrom: {fieldRef: {fieldPath: metadata.name}}
  - name: KEYMESH_PASSWORD
    valueFrom: {secretKeyRef: {name: engine-auth, key: password}}
  ports:
  - {name: client, containerPort: 6379}
  - {name: metrics, containerPort: 9121}
  readinessProbe:
    httpGet: {path: /readyz, port: metrics}
    periodSeconds: 1
  livenessProbe:
    httpGet: {path: /healthz, port: metrics}
    periodSeconds: 2
    failureThreshold: 5
  volumeMounts:
  - {name: config, mountPath: /etc/keymesh, readOnly: true}
volumes:
- name: config
  configMap: {name: engine-config}
"#;
    spec.lines().map(|l| format!("{}{l}\n", " ".repeat(indent))).collect()
}

fn engine_pod(name: &str) -> String {
    format!("{ENGINE_CONFIG}---\napiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n{}", engine_spec(2))
}

fn redis_ping(agent: &NodeAgent, from: &str, host: &str) -> Result<String, String> {
    let out = agent
        .pod_output("default", from, Duration::from_secs(5), "redis-cli", ["-h", host, "-p", "6379", "-a", "s3cret", "--no-auth-warning", "ping"])
        .map_err(|e| e.to_string())?;
    let text = String::from_utf8_lossy(&out.stdout).trim().to_owned();
    if text == "PONG" {
        Ok(text)
    } else {
        Err(format!("{text} {}", String::from_utf8_lossy(&out.stderr)))
    }
}

/// Proves the agent registers three Ready nodes labelled with their zones and hostnames, with
/// capacity and a Lease, and that they stay untainted.
#[test]
fn registers_three_ready_nodes_with_zone_labels() {
    require_netns!();
    let (cp, _agent) = start();
    let want = "km-node-a zone-a km-node-a True\nkm-node-b zone-b km-node-b True\nkm-node-c zone-c km-node-c True\n";
    let path = r#"{range .items[*]}{.metadata.name} {.metadata.labels.topology\.kubernetes\.io/zone} {.metadata.labels.kubernetes\.io/hostname} {.status.conditions[?(@.type=="Ready")].status}{"\n"}{end}"#;
    assert_eq!(cp.jsonpath(&["get", "nodes"], path).unwrap(), want);
    assert_eq!(cp.jsonpath(&["get", "node", "km-node-b"], "{.status.allocatable.pods} {.spec.podCIDR}").unwrap(), "110 10.244.2.0/24");
    assert_eq!(cp.jsonpath(&["get", "lease", "-n", "kube-node-lease", "km-node-c"], "{.spec.holderIdentity}").unwrap(), "km-node-c");
    eventually("nodes untainted", WAIT, || match cp.jsonpath(&["get", "nodes"], "{.items[*].spec.taints}")? {
        t if t.trim().is_empty() => Ok(()),
        t => Err(t),
    });
}

/// Proves a pod running `keymesh-server` with a ConfigMap config file, a Secret env var and
/// `$(VAR)` args becomes Running and Ready (httpGet /readyz on the named metrics port) with a
/// pod IP, and answers PING from inside the pod's network.
#[test]
fn engine_pod_runs_becomes_ready_and_answers_ping() {
    require_netns!();
    let (cp, agent) = start();
    cp.apply(&engine_pod("engine")).unwrap();
    let ip = ready_pod_ip(&cp, "engine");
    assert!(ip.starts_with("10.244."), "pod IP {ip}");
    let status = cp
        .jsonpath(&["get", "pod", "engine"], "{.status.phase} {.status.containerStatuses[0].ready} {.status.containerStatuses[0].started} {.status.hostIP}")
        .unwrap();
    assert!(status.starts_with("Running true true 10.244."), "{status}");
    assert_eq!(eventually("PING", WAIT, || redis_ping(&agent, "engine", &ip)), "PONG");
    let log = std::fs::read_to_string(agent.log_path("default", "engine", "keymesh")).unwrap();
    assert!(log.contains("--node-name engine --requirepass s3cret"), "args not expanded:\n{log}");
}

/// Proves StatefulSet pods resolve each other by their stable names through the headless
/// Service, and that scaling up rewrites the existing pods' hosts files in place.
#[test]
fn statefulset_pods_resolve_each_other() {
    require_netns!();
    let (cp, agent) = start();
    let sts = format!(
        "{ENGINE_CONFIG}---\napiVersion: v1\nkind: Service\nmetadata: {{name: kv}}\nspec:\n  clusterIP: None\n  publishNotReadyAddresses: true\n  selector: {{app: kv}}\n  ports: [{{name: client, port: 6379}}]\n---\napiVersion: apps/v1\nkind: StatefulSet\nmetadata: {{name: kv}}\nspec:\n  serviceName: kv\n  replicas: 2\n  podManagementPolicy: Parallel\n  selector: {{matchLabels: {{app: kv}}}}\n  template:\n    metadata: {{labels: {{app: kv}}}}\n    spec:\n{}",
        engine_spec(6)
    );
    cp.apply(&sts).unwrap();
    ready_pod_ip(&cp, "kv-0");
    let ip1 = ready_pod_ip(&cp, "kv-1");
    let fqdn = "kv-1.kv.default.svc.cluster.local";
    let hosts = std::fs::read_to_string(agent.pod("default", "kv-0").unwrap().hosts_file).unwrap();
    assert!(hosts.contains(&format!("{ip1}\t{fqdn}")), "{hosts}");
    let out = agent.pod_output("default", "kv-0", Duration::from_secs(5), "getent", ["hosts", fqdn]).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("{ip1} ")), "getent: {out:?}");
    assert_eq!(eventually("PING kv-1 by name", WAIT, || redis_ping(&agent, "kv-0", fqdn)), "PONG");

    cp.kubectl(["scale", "statefulset", "kv", "--replicas=3"]).unwrap();
    let ip2 = ready_pod_ip(&cp, "kv-2");
    let out = agent.pod_output("default", "kv-0", Duration::from_secs(5), "getent", ["hosts", "kv-2.kv"]).unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).starts_with(&format!("{ip2} ")), "getent: {out:?}");
}

/// Proves a killed container is restarted (restartCount 1, Ready again), and that deleting the
/// pod SIGTERMs the engine (it logs its graceful shutdown) before the object disappears.
#[test]
fn restarts_a_killed_container_and_stops_a_deleted_pod_gracefully() {
    require_netns!();
    let (cp, agent) = start();
    cp.apply(&engine_pod("engine")).unwrap();
    ready_pod_ip(&cp, "engine");
    let pid = agent.pod("default", "engine").unwrap().pids["keymesh"];
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid as i32), nix::sys::signal::Signal::SIGKILL).unwrap();
    eventually("restartCount 1 and Ready", WAIT, || {
        let out = cp.jsonpath(
            &["get", "pod", "engine"],
            "{.status.containerStatuses[0].restartCount} {.status.containerStatuses[0].ready} {.status.containerStatuses[0].lastState.terminated.exitCode}",
        )?;
        if out == "1 true 137" {
            Ok(())
        } else {
            Err(out)
        }
    });
    let pid = agent.pod("default", "engine").unwrap().pids["keymesh"];
    cp.kubectl(["delete", "pod", "engine", "--wait=false"]).unwrap();
    eventually("pod object gone", WAIT, || match cp.kubectl(["get", "pod", "engine", "--ignore-not-found", "-o", "name"]) {
        Ok(out) if out.trim().is_empty() => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "engine pid {pid} still running");
    let log = std::fs::read_to_string(agent.log_path("default", "engine", "keymesh")).unwrap();
    assert!(log.contains("shutting down"), "no graceful shutdown in the log:\n{log}");
}

/// Proves a hostPath volume is the node's own directory under the agent's node root, never
/// this machine's path: a file the pod writes there appears under `<node-root>/<path>`.
#[test]
fn host_path_volumes_live_under_the_node_root() {
    require_netns!();
    let (cp, agent) = start();
    let pod = r#"
apiVersion: v1
kind: Pod
metadata: {name: tuner}
spec:
  nodeSelector: {kubernetes.io/hostname: km-node-b}
  containers:
  - name: sh
    image: keymesh/test-shell:dev
    command: [sh, -c, "echo never > /var/lib/km-host/thp/enabled && exec sleep 600"]
    volumeMounts:
    - {name: thp, mountPath: /var/lib/km-host/thp}
  volumes:
  - name: thp
    hostPath: {path: /sys/kernel/mm/transparent_hugepage, type: DirectoryOrCreate}
"#;
    cp.apply(pod).unwrap();
    ready_pod_ip(&cp, "tuner");
    let file = agent.node_root("km-node-b").unwrap().join("sys/kernel/mm/transparent_hugepage/enabled");
    // The node root is seeded with a kernel-like `always [madvise] never`, and the pod is Ready
    // as soon as its shell runs, possibly before the `echo`: wait for the pod's write.
    eventually("the pod's write in the node root", WAIT, || match std::fs::read_to_string(&file) {
        Ok(written) if written == "never\n" => Ok(()),
        other => Err(format!("{other:?}")),
    });
    assert!(!std::path::Path::new("/var/lib/km-host").exists(), "the mount path leaked onto this machine");
}

/// Proves a pod whose image is not in the image map cannot start, reported as a kubelet
/// reports an image it cannot pull (`ErrImagePull`/`ImagePullBackOff`, with a clear message).
#[test]
fn unmapped_image_waits_in_image_pull_back_off_with_a_clear_message() {
    require_netns!();
    let (cp, _agent) = start();
    cp.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: stranger}\nspec:\n  containers:\n  - {name: app, image: example/not-mapped:1}\n").unwrap();
    let waiting = eventually("an image pull error", WAIT, || {
        let out = cp.jsonpath(
            &["get", "pod", "stranger"],
            "{.status.phase}|{.status.containerStatuses[0].state.waiting.reason}|{.status.containerStatuses[0].state.waiting.message}",
        )?;
        if out.contains("|ErrImagePull|") || out.contains("|ImagePullBackOff|") {
            Ok(out)
        } else {
            Err(out)
        }
    });
    assert!(waiting.starts_with("Pending|"), "{waiting}");
    assert!(waiting.contains(r#"failed to pull image "example/not-mapped:1": it is not in the node agent's image map"#), "{waiting}");
}

/// Proves readiness gates as a kubelet applies them: a pod whose containers are ready is Ready
/// only while every `spec.readinessGates` condition is True; the condition is set by another
/// party (here kubectl, as the operator does) and survives the agent's own status updates.
#[test]
fn readiness_gates_hold_a_pod_out_of_ready_until_their_condition_is_true() {
    require_netns!();
    let (cp, _agent) = start();
    cp.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: gated}\nspec:\n  readinessGates: [{conditionType: example.com/serving}]\n  containers:\n  - {name: sh, image: keymesh/test-shell:dev, command: [sh, -c, exec sleep 600]}\n").unwrap();
    let conditions = |cp: &keymesh_e2e::control_plane::ControlPlane| {
        cp.jsonpath(&["get", "pod", "gated"], r#"{.status.conditions[?(@.type=="ContainersReady")].status}|{.status.conditions[?(@.type=="Ready")].status}"#)
    };
    eventually("containers ready, pod not ready", WAIT, || conditions(&cp).and_then(|c| if c == "True|False" { Ok(()) } else { Err(c) }));
    let set_gate = |status: &str| {
        let patch = format!(r#"{{"status":{{"conditions":[{{"type":"example.com/serving","status":"{status}"}}]}}}}"#);
        cp.kubectl(["patch", "pod", "gated", "--subresource=status", "--type=strategic", "-p", &patch]).unwrap();
    };
    set_gate("True");
    eventually("Ready once the gate opens", WAIT, || conditions(&cp).and_then(|c| if c == "True|True" { Ok(()) } else { Err(c) }));
    set_gate("False");
    eventually("not Ready once the gate closes", WAIT, || conditions(&cp).and_then(|c| if c == "True|False" { Ok(()) } else { Err(c) }));
    std::thread::sleep(Duration::from_secs(2));
    let gate = cp.jsonpath(&["get", "pod", "gated"], r#"{.status.conditions[?(@.type=="example.com/serving")].status}"#).unwrap();
    assert_eq!(gate, "False", "the agent's status updates keep the gate's condition");
}

/// Proves a pod reaches the apiserver the in-cluster way: `kubernetes.default.svc` resolves to
/// the Service IP, the agent forwards it to the apiserver, whose certificate is valid for that
/// name, and the ServiceAccount token volume authenticates the request.
#[test]
fn pods_reach_the_apiserver_through_the_kubernetes_service() {
    require_netns!();
    let (cp, agent) = start();
    cp.apply("apiVersion: v1\nkind: Pod\nmetadata: {name: client}\nspec:\n  containers:\n  - {name: sh, image: keymesh/test-shell:dev, command: [sh, -c, exec sleep 600]}\n").unwrap();
    ready_pod_ip(&cp, "client");
    let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
    let script = format!(
        r#"ls -la {sa}/ >&2; curl -sS --max-time 5 --cacert {sa}/ca.crt -H "Authorization: Bearer $(cat {sa}/token)" https://kubernetes.default.svc/api/v1/namespaces/$(cat {sa}/namespace)/pods/client"#
    );
    let out = agent.pod_output("default", "client", Duration::from_secs(10), "sh", ["-c", &script]).unwrap();
    let body = String::from_utf8_lossy(&out.stdout);
    // The default ServiceAccount may not read pods: a 403 from the apiserver proves the whole path
    // (name, forwarder, TLS, token authentication) as well as a 200 would.
    assert!(body.contains("system:serviceaccount:default:default"), "unexpected answer: {body} {}", String::from_utf8_lossy(&out.stderr));
}

/// Proves the zone partition helpers: after `isolate_node`, a pod on that node cannot reach a
/// pod on another node (and back); after `heal` it can again.
#[test]
fn isolating_a_node_cuts_its_pods_off_until_healed() {
    require_netns!();
    let (cp, agent) = start();
    cp.apply(ENGINE_CONFIG).unwrap();
    for (name, node) in [("in-a", "km-node-a"), ("in-b", "km-node-b")] {
        let pod = engine_pod(name).replace(
            &format!("metadata: {{name: {name}}}\nspec:\n"),
            &format!("metadata: {{name: {name}}}\nspec:\n  nodeSelector: {{kubernetes.io/hostname: {node}}}\n"),
        );
        cp.apply(&pod).unwrap();
    }
    let ip_b = ready_pod_ip(&cp, "in-b");
    let ip_a = ready_pod_ip(&cp, "in-a");
    assert_eq!(agent.pod("default", "in-a").unwrap().node, "km-node-a");
    eventually("a reaches b", WAIT, || redis_ping(&agent, "in-a", &ip_b));
    agent.isolate_node("km-node-a").unwrap();
    assert!(redis_ping(&agent, "in-a", &ip_b).is_err(), "a still reaches b across the cut");
    assert!(redis_ping(&agent, "in-b", &ip_a).is_err(), "b still reaches a across the cut");
    agent.heal().unwrap();
    eventually("a reaches b after heal", WAIT, || redis_ping(&agent, "in-a", &ip_b));
}
