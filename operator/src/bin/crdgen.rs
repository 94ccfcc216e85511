//! Writes the `CacheCluster` CRD to `crds/cachecluster.yaml` and the Helm chart's CRD template,
//! or with `--check` fails when either differs from what the Rust types generate. Paths are
//! relative to the repository root (run it from there, or pass `--root <dir>`). `--stdout`
//! prints the plain CRD.

use std::path::PathBuf;
use std::process::ExitCode;

use keymesh_operator::crd::{crd_yaml, generated_files};

fn main() -> ExitCode {
    let mut check = false;
    let mut root = PathBuf::from(".");
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--check" => check = true,
            "--root" => match args.next() {
                Some(dir) => root = PathBuf::from(dir),
                None => return fail("--root needs a directory"),
            },
            "--stdout" => {
                return match crd_yaml() {
                    Ok(yaml) => {
                        print!("{yaml}");
                        ExitCode::SUCCESS
                    }
                    Err(e) => fail(&e.to_string()),
                };
            }
            other => return fail(&format!("unknown argument '{other}' (usage: crdgen [--check] [--root DIR] [--stdout])")),
        }
    }
    let files = match generated_files() {
        Ok(files) => files,
        Err(e) => return fail(&e.to_string()),
    };
    for (path, text) in files {
        let path = root.join(path);
        if check {
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                return fail(&format!("{} differs from the generated CRD; run `cargo run -p keymesh-operator --bin crdgen`", path.display()));
            }
            continue;
        }
        let written = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| std::fs::write(&path, &text));
        if let Err(e) = written {
            return fail(&format!("failed to write {}: {e}", path.display()));
        }
        println!("wrote {}", path.display());
    }
    ExitCode::SUCCESS
}

fn fail(message: &str) -> ExitCode {
    eprintln!("crdgen: {message}");
    ExitCode::FAILURE
}
