//! Volumes: each `configMap`, `secret` (including the ServiceAccount token volume 1.20's
//! admission adds) and `emptyDir` becomes a directory under the pod's own directory; a
//! `hostPath` becomes `<node-root>/<node>/<path>` (never the machine's real path), and so does a
//! `persistentVolumeClaim`'s bound volume (`provisioner`), which outlives the pod. Each container
//! sees them at their `mountPath` through bind mounts made inside its private mount namespace.
//!
//! A mount path that does not exist on this machine (`/etc/keymesh`) is created inside an
//! overlay of its nearest existing ancestor, mounted in that namespace only, whose upper layer
//! lives in the container's directory; so nothing outside the agent's directories is written.
//! A path whose nearest existing ancestor is `/` itself is refused.
//!
//! ConfigMap and Secret volumes are refreshed while the pod runs (`refresh`, every
//! `VOLUME_REFRESH`): changed files are replaced in place, so whole-directory mounts see them.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, KeyToPath, Pod};
use k8s_openapi::ByteString;

use super::spec::Sources;

/// One bind mount inside a container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    pub source: PathBuf,
    pub target: PathBuf,
    pub read_only: bool,
}

/// Why volumes are not ready: a message for the container's `waiting` state.
pub type NotReady = String;

/// Writes each volume of `pod` under `pod_dir/volumes/<name>` (or finds its node-root path) and
/// returns volume name → source directory.
pub async fn materialise(pod: &Pod, pod_dir: &Path, node_root: &Path, sources: &mut Sources) -> Result<BTreeMap<String, PathBuf>, NotReady> {
    let node = pod.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default();
    let mut out = BTreeMap::new();
    for v in pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
        let dir = pod_dir.join("volumes").join(&v.name);
        let io = |e: std::io::Error| format!("volume {}: {e}", v.name);
        if let Some(src) = &v.config_map {
            let cm = sources.config_map(&src.name).await?;
            let files = match cm {
                Some(cm) => {
                    let mut files: BTreeMap<String, Vec<u8>> = cm.data.unwrap_or_default().into_iter().map(|(k, s)| (k, s.into_bytes())).collect();
                    files.extend(cm.binary_data.unwrap_or_default().into_iter().map(|(k, b)| (k, b.0)));
                    files
                }
                None if src.optional == Some(true) => BTreeMap::new(),
                None => return Err(format!("volume {}: ConfigMap {} not found", v.name, src.name)),
            };
            write_files(&dir, files, src.items.as_deref(), src.default_mode).map_err(io)?;
        } else if let Some(src) = &v.secret {
            let name = src.secret_name.clone().unwrap_or_default();
            let files = match sources.secret(&name).await? {
                Some(s) => s.data.unwrap_or_default().into_iter().map(|(k, ByteString(b))| (k, b)).collect(),
                None if src.optional == Some(true) => BTreeMap::new(),
                None => return Err(format!("volume {}: Secret {name} not found", v.name)),
            };
            write_files(&dir, files, src.items.as_deref(), src.default_mode).map_err(io)?;
        } else if v.empty_dir.is_some() {
            fs::create_dir_all(&dir).map_err(io)?;
        } else if let Some(claim) = &v.persistent_volume_claim {
            out.insert(v.name.clone(), sources.claim_dir(&claim.claim_name, &node, node_root).await.map_err(|e| format!("volume {}: {e}", v.name))?);
            continue;
        } else if let Some(hp) = &v.host_path {
            out.insert(v.name.clone(), host_path(node_root, &hp.path, hp.type_.as_deref().unwrap_or("")).map_err(|e| format!("volume {}: {e}", v.name))?);
            continue;
        }
        out.insert(v.name.clone(), dir);
    }
    Ok(out)
}

/// Re-reads the pod's ConfigMap and Secret volumes and rewrites the files that changed, as a
/// kubelet's periodic sync does (so a renewed certificate reaches a running pod without a
/// restart). A source that disappeared keeps its last files.
pub async fn refresh(pod: &Pod, pod_dir: &Path, node_root: &Path, sources: &mut Sources) -> Result<(), NotReady> {
    materialise(pod, pod_dir, node_root, sources).await.map(|_| ())
}

fn write_files(dir: &Path, files: BTreeMap<String, Vec<u8>>, items: Option<&[KeyToPath]>, mode: Option<i32>) -> std::io::Result<()> {
    fs::create_dir_all(dir)?;
    let chosen: Vec<(String, &[u8], Option<i32>)> = match items {
        Some(items) => items.iter().filter_map(|i| files.get(&i.key).map(|b| (i.path.clone(), b.as_slice(), i.mode))).collect(),
        None => files.iter().map(|(k, b)| (k.clone(), b.as_slice(), None)).collect(),
    };
    for (path, bytes, item_mode) in chosen {
        let file = dir.join(path.trim_start_matches('/'));
        if let Some(parent) = file.parent() {
            fs::create_dir_all(parent)?;
        }
        // Refreshes (`refresh`) replace a changed file whole, as a kubelet's atomic writer
        // does: a reader sees the old content or the new, never half of it.
        if fs::read(&file).is_ok_and(|old| old == bytes) {
            continue;
        }
        let aside = file.with_file_name(format!(".{}.new", file.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()));
        fs::write(&aside, bytes)?;
        fs::set_permissions(&aside, fs::Permissions::from_mode(item_mode.or(mode).unwrap_or(0o644) as u32))?;
        fs::rename(&aside, &file)?;
    }
    Ok(())
}

/// `<node_root>/<path>`, checked or created as `kind` asks.
fn host_path(node_root: &Path, path: &str, kind: &str) -> Result<PathBuf, String> {
    let mapped = node_root.join(path.trim_start_matches('/'));
    let missing = |what: &str| format!("hostPath {path} ({what}) does not exist under the node root, at {}", mapped.display());
    match kind {
        "Directory" if !mapped.is_dir() => Err(missing("Directory")),
        "File" if !mapped.is_file() => Err(missing("File")),
        "FileOrCreate" if !mapped.exists() => {
            let parent = mapped.parent().unwrap_or(node_root);
            fs::create_dir_all(parent).and_then(|()| fs::write(&mapped, b"")).map_err(|e| format!("failed to create {}: {e}", mapped.display()))?;
            Ok(mapped)
        }
        // "" and DirectoryOrCreate: a test's node root starts empty, so create what is missing.
        _ if !mapped.exists() => fs::create_dir_all(&mapped).map(|()| mapped.clone()).map_err(|e| format!("failed to create {}: {e}", mapped.display())),
        _ => Ok(mapped),
    }
}

/// The bind mounts of container `c`, given the volumes' sources.
pub fn container_mounts(c: &Container, volumes: &BTreeMap<String, PathBuf>) -> Vec<Mount> {
    c.volume_mounts
        .iter()
        .flatten()
        .filter_map(|m| {
            let base = volumes.get(&m.name)?;
            let source = match m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                Some(sub) => base.join(sub.trim_start_matches('/')),
                None => base.clone(),
            };
            Some(Mount { source, target: PathBuf::from(&m.mount_path), read_only: m.read_only == Some(true) })
        })
        .collect()
}

/// The shell lines that make `mounts` inside a fresh mount namespace, using overlays (their
/// layers under `layers`) for targets that do not exist; see the module docs.
pub fn mount_script(mounts: &[Mount], layers: &Path) -> Result<String, String> {
    let mut ancestors: Vec<PathBuf> = Vec::new();
    for m in mounts {
        if !m.target.is_absolute() {
            return Err(format!("mountPath {} is not absolute", m.target.display()));
        }
        if m.target.exists() {
            continue;
        }
        let existing = m.target.ancestors().find(|a| a.exists()).unwrap_or(Path::new("/"));
        let existing = existing.canonicalize().map_err(|e| format!("failed to resolve {}: {e}", existing.display()))?;
        if existing == Path::new("/") {
            return Err(format!(
                "mountPath {} needs a new top-level directory, which the agent cannot make without writing to this machine's /",
                m.target.display()
            ));
        }
        if !ancestors.contains(&existing) {
            ancestors.push(existing);
        }
    }
    // Only the outermost overlays: an inner one would sit in the outer one's upper layer anyway.
    let outer: Vec<&PathBuf> = ancestors.iter().filter(|a| !ancestors.iter().any(|b| b != *a && a.starts_with(b))).collect();
    let mut script = String::new();
    for (i, dir) in outer.iter().enumerate() {
        let (upper, work) = (layers.join(format!("{i}/upper")), layers.join(format!("{i}/work")));
        for d in [&upper, &work] {
            fs::create_dir_all(d).map_err(|e| format!("failed to create {}: {e}", d.display()))?;
        }
        let options = format!("lowerdir={},upperdir={},workdir={}", dir.display(), upper.display(), work.display());
        script.push_str(&format!("mount -t overlay overlay -o {} {}\n", quote(&options), quote_path(dir)));
    }
    let mut ordered: Vec<&Mount> = mounts.iter().collect();
    ordered.sort_by_key(|m| m.target.components().count());
    for m in ordered {
        let t = quote_path(&m.target);
        if m.source.is_dir() {
            script.push_str(&format!("mkdir -p {t}\n"));
        } else {
            let parent = m.target.parent().unwrap_or(Path::new("/"));
            script.push_str(&format!("mkdir -p {} && {{ [ -e {t} ] || touch {t}; }}\n", quote_path(parent)));
        }
        script.push_str(&format!("mount --bind {} {t}\n", quote_path(&m.source)));
        if m.read_only {
            script.push_str(&format!("mount -o remount,bind,ro {t}\n"));
        }
    }
    Ok(script)
}

/// `s` as one single-quoted shell word.
pub fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn quote_path(p: &Path) -> String {
    quote(&p.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlays_the_nearest_existing_ancestor_and_refuses_new_top_level_directories() {
        let layers = tempfile::tempdir().expect("tempdir");
        let mounts = [Mount { source: layers.path().into(), target: "/etc/keymesh-agent-test/conf".into(), read_only: true }];
        let script = mount_script(&mounts, layers.path()).expect("script");
        assert!(script.starts_with("mount -t overlay overlay -o 'lowerdir=/etc,"), "{script}");
        assert!(script.contains("mount -o remount,bind,ro '/etc/keymesh-agent-test/conf'"), "{script}");
        let top = [Mount { source: layers.path().into(), target: "/keymesh-agent-test".into(), read_only: false }];
        assert!(mount_script(&top, layers.path()).is_err());
    }
}
