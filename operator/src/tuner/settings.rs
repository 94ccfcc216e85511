//! The node-wide kernel settings the tuner manages, and their files' formats.
//!
//! - `transparent_hugepage`: `<sys>/kernel/mm/transparent_hugepage/enabled`. The kernel shows
//!   every mode with the current one in brackets (`always madvise [never]`) and takes one mode
//!   word on write; a plain file holding a single word (as the local cluster's node files do
//!   after a write) reads as that word.
//! - `vm.overcommit_memory`: `<proc-sys>/vm/overcommit_memory`, one integer, 0 to 2.

use std::path::{Path, PathBuf};

/// The modes of transparent huge pages.
pub const THP_MODES: [&str; 3] = ["always", "madvise", "never"];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Setting {
    TransparentHugePages,
    OvercommitMemory,
}

/// Where the host's files are mounted in the tuner's container.
#[derive(Debug, Clone)]
pub struct Roots {
    /// The host's `/sys`.
    pub sys: PathBuf,
    /// The host's `/proc/sys`.
    pub proc_sys: PathBuf,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FormatError {
    #[error("{setting}: cannot read the value from {content:?}")]
    Unreadable { setting: &'static str, content: String },
    #[error("{setting}: '{value}' is not a valid value (expected {expected})")]
    Invalid { setting: &'static str, value: String, expected: &'static str },
}

impl Setting {
    pub const ALL: [Setting; 2] = [Setting::TransparentHugePages, Setting::OvercommitMemory];

    /// The name in the state file, the status and the logs.
    pub fn key(self) -> &'static str {
        match self {
            Setting::TransparentHugePages => "transparent_hugepage",
            Setting::OvercommitMemory => "vm.overcommit_memory",
        }
    }

    pub fn path(self, roots: &Roots) -> PathBuf {
        match self {
            Setting::TransparentHugePages => roots.sys.join("kernel/mm/transparent_hugepage/enabled"),
            Setting::OvercommitMemory => roots.proc_sys.join("vm/overcommit_memory"),
        }
    }

    /// Checks a value the tuner was asked to set.
    pub fn validate(self, value: &str) -> Result<String, FormatError> {
        let ok = match self {
            Setting::TransparentHugePages => THP_MODES.contains(&value),
            Setting::OvercommitMemory => matches!(value, "0" | "1" | "2"),
        };
        let expected = match self {
            Setting::TransparentHugePages => "always, madvise or never",
            Setting::OvercommitMemory => "0, 1 or 2",
        };
        if ok {
            Ok(value.to_string())
        } else {
            Err(FormatError::Invalid { setting: self.key(), value: value.to_string(), expected })
        }
    }

    /// The current value from the file's content.
    pub fn parse(self, content: &str) -> Result<String, FormatError> {
        let unreadable = || FormatError::Unreadable { setting: self.key(), content: content.to_string() };
        let trimmed = content.trim();
        let value = match self {
            Setting::TransparentHugePages => match (trimmed.find('['), trimmed.find(']')) {
                (Some(open), Some(close)) if open < close => trimmed[open + 1..close].to_string(),
                (None, None) if !trimmed.contains(char::is_whitespace) => trimmed.to_string(),
                _ => return Err(unreadable()),
            },
            Setting::OvercommitMemory => trimmed.to_string(),
        };
        self.validate(&value).map_err(|_| unreadable())
    }

    /// Reads the current value.
    pub fn read(self, roots: &Roots) -> Result<String, String> {
        let path = self.path(roots);
        let content = std::fs::read_to_string(&path).map_err(|e| format!("failed to read {}: {e}", path.display()))?;
        self.parse(&content).map_err(|e| e.to_string())
    }

    /// Writes `value` (one word, as the kernel takes it) and reads it back.
    pub fn write(self, roots: &Roots, value: &str) -> Result<(), String> {
        let path = self.path(roots);
        write_value(&path, value)?;
        match self.read(roots)? {
            read if read == value => Ok(()),
            read => Err(format!("wrote {value} to {} but it reads {read}", path.display())),
        }
    }
}

fn write_value(path: &Path, value: &str) -> Result<(), String> {
    std::fs::write(path, format!("{value}\n")).map_err(|e| format!("failed to write {value} to {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kernels_bracketed_format_and_a_plain_word_both_read() {
        let thp = Setting::TransparentHugePages;
        assert_eq!(thp.parse("always [madvise] never\n"), Ok("madvise".to_string()));
        assert_eq!(thp.parse("[always] madvise never"), Ok("always".to_string()));
        assert_eq!(thp.parse("never\n"), Ok("never".to_string()));
        assert!(thp.parse("always madvise never").is_err(), "no mode marked");
        assert!(thp.parse("[sometimes]").is_err());
        let overcommit = Setting::OvercommitMemory;
        assert_eq!(overcommit.parse("0\n"), Ok("0".to_string()));
        assert!(overcommit.parse("3").is_err());
        assert!(overcommit.validate("unchanged").is_err());
    }

    #[test]
    fn writes_one_word_and_reads_it_back() {
        let dir = std::env::temp_dir().join(format!("keymesh-tuner-settings-{}", std::process::id()));
        let roots = Roots { sys: dir.join("sys"), proc_sys: dir.join("proc/sys") };
        for setting in Setting::ALL {
            std::fs::create_dir_all(setting.path(&roots).parent().expect("a parent")).expect("dirs");
        }
        std::fs::write(Setting::TransparentHugePages.path(&roots), "always [madvise] never\n").expect("file");
        std::fs::write(Setting::OvercommitMemory.path(&roots), "0\n").expect("file");
        Setting::TransparentHugePages.write(&roots, "never").expect("writes");
        assert_eq!(std::fs::read_to_string(Setting::TransparentHugePages.path(&roots)).ok().as_deref(), Some("never\n"));
        Setting::OvercommitMemory.write(&roots, "1").expect("writes");
        assert_eq!(Setting::OvercommitMemory.read(&roots), Ok("1".to_string()));
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
