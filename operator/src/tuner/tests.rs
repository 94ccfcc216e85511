//! The tuner against node files in a temporary directory, laid out and filled as a real kernel
//! shows them.

use super::*;

struct Node {
    dir: std::path::PathBuf,
    roots: Roots,
}

impl Node {
    fn new(name: &str) -> Node {
        let dir = std::env::temp_dir().join(format!("keymesh-tuner-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let roots = Roots { sys: dir.join("sys"), proc_sys: dir.join("proc/sys") };
        for (setting, content) in [(Setting::TransparentHugePages, "always [madvise] never\n"), (Setting::OvercommitMemory, "0\n")] {
            let path = setting.path(&roots);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("dirs");
            std::fs::write(path, content).expect("file");
        }
        Node { dir, roots }
    }

    fn tuner(&self, owner: &str, thp: &str, overcommit: &str) -> Tuner {
        let config = TunerConfig {
            owner: owner.to_string(),
            node: "node-a".into(),
            wanted: vec![(Setting::TransparentHugePages, thp.to_string()), (Setting::OvercommitMemory, overcommit.to_string())],
            roots: self.roots.clone(),
            state: StateDir(self.dir.join("state")),
            interval: Duration::from_secs(5),
            drift_hold: Duration::from_secs(20),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
        };
        Tuner::new(config).expect("valid settings")
    }

    fn read(&self, setting: Setting) -> String {
        std::fs::read_to_string(setting.path(&self.roots)).expect("file")
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[test]
fn applies_reads_back_and_restores_the_original_values_when_it_stops() {
    let node = Node::new("apply");
    let mut tuner = node.tuner("ns/a", "never", "1");
    tuner.round(Instant::now());
    let status = tuner.status();
    assert!(status.ready, "{status:#?}");
    assert_eq!((node.read(Setting::TransparentHugePages), node.read(Setting::OvercommitMemory)), ("never\n".into(), "1\n".into()));
    tuner.release();
    assert_eq!(Setting::TransparentHugePages.read(&node.roots), Ok("madvise".to_string()), "the value from before");
    assert_eq!(Setting::OvercommitMemory.read(&node.roots), Ok("0".to_string()));
}

#[test]
fn an_outside_change_is_reported_then_reapplied_and_not_fought_over_forever() {
    let node = Node::new("drift");
    let mut tuner = node.tuner("ns/a", "never", "1");
    let t0 = Instant::now();
    tuner.round(t0);
    std::fs::write(Setting::TransparentHugePages.path(&node.roots), "[always] madvise never\n").expect("outside change");
    tuner.round(t0 + Duration::from_secs(5));
    let status = tuner.status();
    assert!(!status.ready, "not ready while the value does not hold: {status:#?}");
    assert_eq!(status.settings[0].state, "drifted");
    assert!(status.settings[0].message.contains("changed to always outside KeyMesh"), "{status:#?}");
    tuner.round(t0 + Duration::from_secs(26));
    assert!(tuner.status().ready, "reapplied after the hold: {:#?}", tuner.status());
    assert_eq!(node.read(Setting::TransparentHugePages), "never\n");

    // Changed back twice more: reapplied each time; the fourth time it only reports.
    let mut at = t0 + Duration::from_secs(30);
    for _ in 0..3 {
        std::fs::write(Setting::TransparentHugePages.path(&node.roots), "always\n").expect("outside change");
        tuner.round(at);
        tuner.round(at + Duration::from_secs(21));
        at += Duration::from_secs(30);
    }
    let status = tuner.status();
    assert_eq!(status.settings[0].reapplied, 3, "{status:#?}");
    assert_eq!(status.settings[0].state, "drifted", "{status:#?}");
    assert!(status.settings[0].message.contains("not reapplied"), "{status:#?}");
    assert_eq!(node.read(Setting::TransparentHugePages), "always\n", "not fought over");
}

#[test]
fn two_clusters_asking_different_values_conflict_and_the_second_changes_nothing() {
    let node = Node::new("conflict");
    let mut first = node.tuner("ns/a", "never", "1");
    let mut second = node.tuner("ns/b", "madvise", "1");
    first.round(Instant::now());
    second.round(Instant::now());
    let status = second.status();
    assert!(!status.ready, "{status:#?}");
    assert_eq!(status.settings[0].state, "conflict");
    assert!(status.settings[0].message.contains("ns/a wants never"), "{status:#?}");
    assert_eq!(status.settings[1].state, "applied", "the same overcommit value is shared");
    assert_eq!(node.read(Setting::TransparentHugePages), "never\n", "the first cluster's value stays");
    // The first cluster stops tuning; its THP claim was the last one, the original comes back,
    // and the second cluster, asking again, gets its value.
    first.release();
    assert_eq!(Setting::TransparentHugePages.read(&node.roots), Ok("madvise".to_string()));
    assert_eq!(node.read(Setting::OvercommitMemory), "1\n", "still claimed by the second cluster");
    second.round(Instant::now());
    assert!(second.status().ready, "{:#?}", second.status());
    second.release();
    assert_eq!(Setting::OvercommitMemory.read(&node.roots), Ok("0".to_string()));
}
