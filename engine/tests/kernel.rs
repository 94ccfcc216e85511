//! Black-box tests of the kernel-settings report: a real `keymesh-server` shown a node's kernel
//! files (`kernel-sys-dir`, `kernel-proc-sys-dir`) reports the settings that hurt it in `INFO
//! kernel` and `/metrics`, as Redis warns about them, and not the ones that are fine.

#![allow(clippy::unwrap_used)]

mod support;

use std::path::PathBuf;

use support::Server;

/// A node's kernel files in a temporary directory.
struct Node(PathBuf);

impl Node {
    fn new(name: &str, thp: &str, overcommit: &str, somaxconn: &str) -> Node {
        let dir = std::env::temp_dir().join(format!("keymesh-kernel-test-{name}-{}", std::process::id()));
        for (path, content) in
            [("sys/kernel/mm/transparent_hugepage/enabled", thp), ("proc/sys/vm/overcommit_memory", overcommit), ("proc/sys/net/core/somaxconn", somaxconn)]
        {
            let path = dir.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, content).unwrap();
        }
        Node(dir)
    }

    fn start(&self, backlog: &str) -> Server {
        let sys = self.0.join("sys").display().to_string();
        let proc_sys = self.0.join("proc/sys").display().to_string();
        Server::start(&["--kernel-sys-dir", &sys, "--kernel-proc-sys-dir", &proc_sys, "--tcp-backlog", backlog])
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn metric(server: &Server, setting: &str) -> Option<String> {
    let (_, body) = server.http_get("/metrics");
    body.lines().find(|l| l.starts_with(&format!("keymesh_kernel_warning{{setting=\"{setting}\"}}"))).map(|l| l.rsplit(' ').next().unwrap_or("").to_string())
}

#[test]
fn thp_always_overcommit_and_a_small_somaxconn_are_reported_in_info_and_metrics() {
    // Proves the warnings Redis gives, on a node with THP `always`, overcommit 0 and a
    // somaxconn below the backlog: each shows in INFO kernel (with the value) and as a metric.
    let node = Node::new("bad", "[always] madvise never\n", "0\n", "128\n");
    let server = node.start("511");
    let info = server.connect().cmd(&["INFO", "kernel"]).text();
    assert!(info.contains("transparent_hugepage:always\r\n"), "{info}");
    assert!(info.contains("overcommit_memory:0\r\n") && info.contains("somaxconn:128\r\n") && info.contains("tcp_backlog:511\r\n"), "{info}");
    assert!(info.contains("kernel_warnings:3\r\n"), "{info}");
    assert!(info.contains("transparent huge pages are 'always'"), "{info}");
    assert!(info.contains("the TCP backlog of 511 cannot be enforced because net.core.somaxconn is the lower 128"), "{info}");
    for setting in ["transparent_hugepage", "vm.overcommit_memory", "net.core.somaxconn"] {
        assert_eq!(metric(&server, setting).as_deref(), Some("1"), "{setting}");
    }
}

#[test]
fn a_tuned_node_gives_no_warning() {
    // Proves the same report stays quiet on a tuned node: THP never, overcommit 1, somaxconn
    // above the backlog.
    let node = Node::new("good", "always madvise [never]\n", "1\n", "8192\n");
    let server = node.start("1024");
    let info = server.connect().cmd(&["INFO", "kernel"]).text();
    assert!(info.contains("transparent_hugepage:never\r\n") && info.contains("kernel_warnings:0\r\n"), "{info}");
    assert!(!info.contains("kernel_warning_0"), "{info}");
    assert_eq!(metric(&server, "transparent_hugepage").as_deref(), Some("0"));
}
