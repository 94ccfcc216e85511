//! The configuration parser on arbitrary text, as a config file line by line and as
//! command-line flags: every input is accepted or refused with an error naming where; none
//! panics.
//!
//! Only the parser is fuzzed, never the file system: `include` lines are dropped from the
//! text and the flags start at the first `--flag` (a leading word would be read as a config
//! file), so an input such as `include /dev/zero` cannot make the run read, hang on or run out
//! of memory over a file of this machine. `include` itself is covered by the unit tests.
#![no_main]

use keymesh_engine::config::Config;
use keymesh_engine::parse::split_args;
use libfuzzer_sys::fuzz_target;

/// Whether the config parser would read `line` as an `include` (its first word, unquoted).
fn is_include(line: &str) -> bool {
    split_args(line.trim().as_bytes()).and_then(|words| words.into_iter().next()).is_some_and(|w| w.eq_ignore_ascii_case(b"include"))
}

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let without_includes: String = text.lines().filter(|line| !is_include(line)).map(|line| format!("{line}\n")).collect();
    if let Err(e) = Config::from_text(&without_includes, "fuzz.conf") {
        assert!(!e.to_string().is_empty());
    }
    let args: Vec<String> = text.split_whitespace().skip_while(|w| !w.starts_with("--")).map(str::to_string).collect();
    if let Err(e) = Config::from_args(&args) {
        assert!(!e.to_string().is_empty());
    }
});
