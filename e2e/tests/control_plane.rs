//! Black-box tests of the level-4 control plane fixture: a real etcd, kube-apiserver 1.20.2,
//! kube-controller-manager and kube-scheduler on loopback, driven with the real `kubectl` and
//! `helm`. They need `scripts/install-control-plane.sh` and `scripts/install-kube-tools.sh`
//! to have run; without them they fail saying so.

use std::path::Path;
use std::time::Duration;

use keymesh_e2e::control_plane::{helm_binary, helm_command};
use keymesh_e2e::eventually;
use keymesh_e2e::{ControlPlane, ControlPlaneError};

/// How long a controller gets to act on a change.
const CONTROLLER_TIMEOUT: Duration = Duration::from_secs(45);

fn start() -> ControlPlane {
    ControlPlane::start().unwrap_or_else(|e| panic!("control plane did not start: {e}"))
}

/// Proves the fixture starts a working control plane and cleans up after it: the admin
/// kubeconfig reaches a ready apiserver, the controller manager has given the `default`
/// ServiceAccount its token, and dropping the fixture kills every process it started and
/// removes its directory.
#[test]
fn control_plane_starts_and_drop_cleans_up() {
    let cp = start();
    assert_eq!(cp.kubectl(["get", "--raw", "/readyz"]).unwrap().trim(), "ok");
    let namespaces = cp.kubectl(["get", "namespaces", "-o", "name"]).unwrap();
    for ns in ["namespace/default", "namespace/kube-system"] {
        assert!(namespaces.lines().any(|l| l == ns), "{ns} missing from:\n{namespaces}");
    }
    assert!(!cp.service_account_token("default", "default").unwrap().is_empty());

    let pids = cp.pids();
    assert_eq!(pids.iter().map(|(name, _)| *name).collect::<Vec<_>>(), ["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"]);
    let dir = cp.dir().to_owned();
    drop(cp);
    for (name, pid) in pids {
        assert!(!Path::new(&format!("/proc/{pid}")).exists(), "{name} (pid {pid}) still running after drop");
    }
    if std::env::var_os("KEYMESH_KEEP_TMP").is_none() {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}

/// Proves the apiserver is the one built from Debian's source package: `/version` reports
/// v1.20.2, not a development version.
#[test]
fn server_version_is_1_20_2() {
    let cp = start();
    let version = cp.kubectl(["get", "--raw", "/version"]).unwrap();
    let git_version = version.lines().find(|l| l.contains("\"gitVersion\"")).unwrap_or_else(|| panic!("no gitVersion in:\n{version}"));
    assert!(git_version.contains("\"v1.20.2\""), "unexpected version:\n{version}");
}

/// Proves RBAC is enforced for a ServiceAccount's kubeconfig: without bindings it is denied
/// listing pods (Forbidden); a Role and RoleBinding granting `list pods` in its namespace
/// allow exactly that, and it stays denied elsewhere.
#[test]
fn service_account_is_denied_until_a_role_binding_allows_it() {
    let cp = start();
    cp.kubectl(["create", "serviceaccount", "reader"]).unwrap();
    let kubeconfig = cp.service_account_kubeconfig("default", "reader").unwrap();
    let as_reader = |args: &[&str]| cp.kubectl_as(&kubeconfig, args, None);

    let denied = as_reader(&["get", "pods"]).expect_err("a ServiceAccount without bindings listed pods");
    let ControlPlaneError::Kubectl { stderr, .. } = &denied else { panic!("unexpected error: {denied}") };
    assert!(stderr.contains("Forbidden") && stderr.contains("system:serviceaccount:default:reader"), "not an RBAC denial: {stderr}");

    cp.kubectl(["create", "role", "pod-reader", "--verb=list", "--resource=pods"]).unwrap();
    cp.kubectl(["create", "rolebinding", "reader-reads-pods", "--role=pod-reader", "--serviceaccount=default:reader"]).unwrap();
    // The authorizer sees new bindings through an informer: allow it a moment.
    eventually("the reader is allowed to list pods", Duration::from_secs(15), || as_reader(&["get", "pods"]).map_err(|e| e.to_string()));

    for args in [["get", "pods", "-n", "kube-system"], ["get", "secrets", "-n", "default"]] {
        let err = as_reader(&args).expect_err("the binding granted more than list pods in default");
        assert!(err.to_string().contains("Forbidden"), "`{}`: not an RBAC denial: {err}", args.join(" "));
    }
}

/// Proves the StatefulSet controller and the scheduler run: a StatefulSet created with kubectl
/// gets its pods, owned by it, and the scheduler marks them unschedulable (there are no nodes).
#[test]
fn statefulset_controller_creates_pods() {
    let cp = start();
    cp.apply(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 2
  podManagementPolicy: Parallel
  selector:
    matchLabels: {app: web}
  template:
    metadata:
      labels: {app: web}
    spec:
      containers:
      - name: web
        image: keymesh.invalid/never-pulled:0
"#,
    )
    .unwrap();
    for pod in ["web-0", "web-1"] {
        let owner = eventually(&format!("pod {pod} exists"), CONTROLLER_TIMEOUT, || {
            cp.jsonpath(&["get", "pod", pod], "{.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}")
        });
        assert_eq!(owner, "StatefulSet/web");
        let scheduled = eventually(&format!("the scheduler looks at {pod}"), CONTROLLER_TIMEOUT, || {
            let reason = cp.jsonpath(&["get", "pod", pod], r#"{.status.conditions[?(@.type=="PodScheduled")].reason}"#)?;
            if reason.is_empty() {
                Err("no PodScheduled condition yet".into())
            } else {
                Ok(reason)
            }
        });
        assert_eq!(scheduled, "Unschedulable");
    }
}

/// Proves the garbage collector runs: deleting a ConfigMap deletes another ConfigMap that names
/// it in its ownerReferences, and leaves an unowned one alone.
#[test]
fn garbage_collector_deletes_dependents() {
    let cp = start();
    cp.kubectl(["create", "configmap", "owner"]).unwrap();
    cp.kubectl(["create", "configmap", "bystander"]).unwrap();
    let uid = cp.jsonpath(&["get", "configmap", "owner"], "{.metadata.uid}").unwrap();
    cp.apply(&format!(
        r#"
apiVersion: v1
kind: ConfigMap
metadata:
  name: dependent
  ownerReferences:
  - {{apiVersion: v1, kind: ConfigMap, name: owner, uid: "{uid}"}}
"#
    ))
    .unwrap();

    cp.kubectl(["delete", "configmap", "owner"]).unwrap();
    eventually("the dependent is deleted", CONTROLLER_TIMEOUT, || match cp.kubectl(["get", "configmap", "dependent", "--ignore-not-found", "-o", "name"]) {
        Ok(out) if out.trim().is_empty() => Ok(()),
        Ok(out) => Err(format!("still there: {out}")),
        Err(e) => Err(e.to_string()),
    });
    assert_eq!(cp.kubectl(["get", "configmap", "bystander", "-o", "name"]).unwrap().trim(), "configmap/bystander");
}

/// Proves the cached helm is a working v4: `helm version` runs and `helm template` renders a
/// trivial chart with no cluster at all.
#[test]
fn helm_renders_a_chart_without_a_cluster() {
    let helm = helm_binary().unwrap_or_else(|e| panic!("{e}"));
    let home = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        let out = helm_command(&helm, &home.path().join("helm")).args(args).output().unwrap();
        assert!(out.status.success(), "helm {} failed: {}", args.join(" "), String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap()
    };
    let version = run(&["version", "--short"]);
    assert!(version.starts_with("v4."), "not helm v4: {version}");

    let chart = home.path().join("demo");
    std::fs::create_dir_all(chart.join("templates")).unwrap();
    std::fs::write(chart.join("Chart.yaml"), "apiVersion: v2\nname: demo\nversion: 0.1.0\n").unwrap();
    std::fs::write(chart.join("values.yaml"), "greeting: hello\n").unwrap();
    std::fs::write(
        chart.join("templates/configmap.yaml"),
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}-{{ .Chart.Name }}\ndata:\n  greeting: {{ .Values.greeting | quote }}\n",
    )
    .unwrap();
    let rendered = run(&["template", "rel", &chart.to_string_lossy(), "--set", "greeting=hi"]);
    assert!(rendered.contains("name: rel-demo") && rendered.contains("greeting: \"hi\""), "unexpected rendering:\n{rendered}");
}
