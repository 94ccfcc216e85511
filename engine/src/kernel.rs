//! The kernel settings that hurt an in-memory store, checked as Redis checks them: at start
//! (logged as warnings), then every `RECHECK` (a node tuner may fix them while the engine runs),
//! shown in `INFO kernel`, the `keymesh_kernel_warning{setting}` metric and the admin `Status`
//! (the operator's `KernelSettings` condition):
//!
//! - transparent huge pages `always`: latency spikes and memory bloat. As Redis's
//!   `disable-thp`, the engine then turns THP off for its own process (`PR_SET_THP_DISABLE`);
//! - `vm.overcommit_memory` not 1: large allocations may fail under memory pressure although
//!   memory would be there;
//! - `net.core.somaxconn` below `tcp-backlog`: the listen backlog is silently capped (read
//!   from the process's own network namespace, where a pod's sysctls apply).
//!
//! Where the files are read from is configurable (`kernel-sys-dir`, `kernel-proc-sys-dir`) so
//! tests can show the engine a node's files without touching this machine's.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use tracing::warn;

/// How often the settings are read again.
pub const RECHECK: Duration = Duration::from_secs(10);

/// The settings that are checked, by the metric's `setting` label.
pub const SETTINGS: [&str; 3] = ["transparent_hugepage", "vm.overcommit_memory", "net.core.somaxconn"];

/// What one look at the kernel found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KernelReport {
    pub transparent_hugepage: Option<String>,
    pub overcommit_memory: Option<String>,
    pub somaxconn: Option<u32>,
    pub tcp_backlog: u32,
    /// THP is off for this process (`PR_SET_THP_DISABLE`).
    pub thp_disabled_for_process: bool,
    /// `(setting, warning)`, one per setting that hurts.
    pub warnings: Vec<(&'static str, String)>,
}

/// Where the kernel's files are.
#[derive(Debug, Clone)]
pub struct KernelFiles {
    pub sys: PathBuf,
    pub proc_sys: PathBuf,
}

fn read(path: &Path) -> Option<String> {
    std::fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// The THP mode from `always [madvise] never` (or a bare word).
fn thp_mode(content: &str) -> Option<String> {
    match (content.find('['), content.find(']')) {
        (Some(open), Some(close)) if open < close => Some(content[open + 1..close].to_string()),
        _ if !content.is_empty() && !content.contains(char::is_whitespace) => Some(content.to_string()),
        _ => None,
    }
}

/// Reads the settings and says which ones hurt.
pub fn inspect(files: &KernelFiles, tcp_backlog: u32, thp_disabled_for_process: bool) -> KernelReport {
    let thp = read(&files.sys.join("kernel/mm/transparent_hugepage/enabled")).and_then(|c| thp_mode(&c));
    let overcommit = read(&files.proc_sys.join("vm/overcommit_memory"));
    let somaxconn = read(&files.proc_sys.join("net/core/somaxconn")).and_then(|s| s.parse().ok());
    let mut warnings = Vec::new();
    if thp.as_deref() == Some("always") {
        let own = if thp_disabled_for_process { " (turned off for this process)" } else { "" };
        warnings.push((
            SETTINGS[0],
            format!("transparent huge pages are 'always'{own}: latency spikes and memory bloat; set them to 'never' (spec.nodeTuning.transparentHugePages)"),
        ));
    }
    if overcommit.as_deref().is_some_and(|v| v != "1") {
        let value = overcommit.clone().unwrap_or_default();
        warnings.push((
            SETTINGS[1],
            format!("vm.overcommit_memory is {value}: large allocations may fail under memory pressure; set it to 1 (spec.nodeTuning.vmOvercommitMemory)"),
        ));
    }
    if let Some(max) = somaxconn.filter(|&m| m < tcp_backlog) {
        warnings.push((
            SETTINGS[2],
            format!(
                "the TCP backlog of {tcp_backlog} cannot be enforced because net.core.somaxconn is the lower {max}; raise it (spec.sysctls.net.core.somaxconn)"
            ),
        ));
    }
    KernelReport { transparent_hugepage: thp, overcommit_memory: overcommit, somaxconn, tcp_backlog, thp_disabled_for_process, warnings }
}

/// Turns THP off for this process when the kernel has it on `always` (Redis's `disable-thp`).
/// Returns whether it is off now.
pub fn disable_thp_if_always(files: &KernelFiles) -> bool {
    let always = read(&files.sys.join("kernel/mm/transparent_hugepage/enabled")).and_then(|c| thp_mode(&c)).as_deref() == Some("always");
    if !always {
        return false;
    }
    match nix::sys::prctl::set_thp_disable(true) {
        Ok(()) => true,
        Err(e) => {
            warn!(error = %e, "failed to turn transparent huge pages off for this process");
            false
        }
    }
}

/// The latest report, shared by the checker, INFO, metrics and the admin API.
#[derive(Debug, Default)]
pub struct KernelState(Mutex<KernelReport>);

impl KernelState {
    pub fn get(&self) -> KernelReport {
        self.0.lock().clone()
    }

    /// Stores a new report; logs warnings that are new.
    pub fn update(&self, report: KernelReport) {
        let mut current = self.0.lock();
        for (setting, warning) in &report.warnings {
            if !current.warnings.iter().any(|(s, w)| s == setting && w == warning) {
                warn!(setting, "WARNING {warning}");
            }
        }
        *current = report;
    }

    /// The `# Kernel` section of INFO.
    pub fn info(&self) -> String {
        let r = self.get();
        let mut out = format!(
            "# Kernel\r\ntransparent_hugepage:{}\r\nthp_disabled_for_process:{}\r\novercommit_memory:{}\r\nsomaxconn:{}\r\ntcp_backlog:{}\r\nkernel_warnings:{}\r\n",
            r.transparent_hugepage.as_deref().unwrap_or("unknown"),
            u8::from(r.thp_disabled_for_process),
            r.overcommit_memory.as_deref().unwrap_or("unknown"),
            r.somaxconn.map_or("unknown".to_string(), |n| n.to_string()),
            r.tcp_backlog,
            r.warnings.len()
        );
        for (i, (setting, warning)) in r.warnings.iter().enumerate() {
            out.push_str(&format!("kernel_warning_{i}:{setting}: {warning}\r\n"));
        }
        out.push_str("\r\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(thp: &str, overcommit: &str, somaxconn: &str) -> (tempdir::Dir, KernelFiles) {
        let dir = tempdir::Dir::new();
        let files = KernelFiles { sys: dir.0.join("sys"), proc_sys: dir.0.join("proc/sys") };
        for (path, content) in [
            (files.sys.join("kernel/mm/transparent_hugepage/enabled"), thp),
            (files.proc_sys.join("vm/overcommit_memory"), overcommit),
            (files.proc_sys.join("net/core/somaxconn"), somaxconn),
        ] {
            std::fs::create_dir_all(path.parent().expect("parent")).expect("dirs");
            std::fs::write(path, content).expect("write");
        }
        (dir, files)
    }

    mod tempdir {
        pub struct Dir(pub std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
                let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                Dir(std::env::temp_dir().join(format!("keymesh-kernel-{}-{n}", std::process::id())))
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    #[test]
    fn thp_always_overcommit_0_and_a_small_somaxconn_are_each_a_warning() {
        let (_dir, bad) = files("[always] madvise never\n", "0\n", "128\n");
        let report = inspect(&bad, 511, true);
        let settings: Vec<&str> = report.warnings.iter().map(|(s, _)| *s).collect();
        assert_eq!(settings, SETTINGS, "{report:#?}");
        assert!(report.warnings[0].1.contains("'always' (turned off for this process)"), "{report:#?}");
        assert!(report.warnings[2].1.contains("backlog of 511 cannot be enforced because net.core.somaxconn is the lower 128"), "{report:#?}");
        let (_dir, good) = files("always madvise [never]\n", "1\n", "4096\n");
        let report = inspect(&good, 511, false);
        assert!(report.warnings.is_empty(), "{report:#?}");
        assert_eq!((report.transparent_hugepage.as_deref(), report.somaxconn), (Some("never"), Some(4096)));
    }

    #[test]
    fn info_lists_each_warning() {
        let (_dir, bad) = files("[always] madvise never\n", "1\n", "4096\n");
        let state = KernelState::default();
        state.update(inspect(&bad, 511, false));
        let info = state.info();
        assert!(info.contains("transparent_hugepage:always\r\n") && info.contains("kernel_warnings:1\r\n"), "{info}");
        assert!(info.contains("kernel_warning_0:transparent_hugepage: transparent huge pages are 'always'"), "{info}");
    }
}
