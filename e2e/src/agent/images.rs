//! `ImageMap`: which local binary runs for which image reference. The agent has no container
//! images; a container's image names the one program it runs (two tags of one image can name two
//! builds, for upgrade tests). A reference that is not in the map is refused, never guessed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The environment variable [`ImageMap::from_env`] reads:
/// `image=path,image=path,...`, e.g. `keymesh/keymesh-server:dev=/build/keymesh-server`.
pub const IMAGE_MAP_ENV: &str = "KEYMESH_IMAGE_MAP";

/// Image reference → local executable; see the module docs.
#[derive(Debug, Clone, Default)]
pub struct ImageMap {
    images: BTreeMap<String, PathBuf>,
}

impl ImageMap {
    /// An empty map (every image refused).
    pub fn new() -> Self {
        ImageMap::default()
    }

    /// Parses `image=path,image=path,...` (whitespace around entries ignored).
    pub fn parse(spec: &str) -> Result<Self, String> {
        let mut map = ImageMap::new();
        for entry in spec.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            // The image may hold ':' (tag) and '@' (digest) but never '='.
            let (image, path) = entry.split_once('=').ok_or_else(|| format!("image map entry `{entry}` is not `image=path`"))?;
            map = map.with(image.trim(), path.trim());
        }
        Ok(map)
    }

    /// The map in `$KEYMESH_IMAGE_MAP` (empty when unset).
    pub fn from_env() -> Result<Self, String> {
        match std::env::var(IMAGE_MAP_ENV) {
            Ok(spec) => Self::parse(&spec).map_err(|e| format!("{IMAGE_MAP_ENV}: {e}")),
            Err(_) => Ok(ImageMap::new()),
        }
    }

    /// Adds (or replaces) `image` → `binary`.
    pub fn with(mut self, image: &str, binary: impl Into<PathBuf>) -> Self {
        self.images.insert(normalize(image), binary.into());
        self
    }

    /// The binary for `image`, matching `docker.io/library/x` to `x` and `docker.io/a/b` to `a/b`.
    pub fn resolve(&self, image: &str) -> Option<&Path> {
        self.images.get(&normalize(image)).map(PathBuf::as_path)
    }

    /// The mapped references, for error messages.
    pub fn images(&self) -> Vec<&str> {
        self.images.keys().map(String::as_str).collect()
    }
}

fn normalize(image: &str) -> String {
    let image = image.strip_prefix("docker.io/").unwrap_or(image);
    image.strip_prefix("library/").unwrap_or(image).to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tags_and_normalizes_registries() {
        let map = ImageMap::parse("keymesh/keymesh-server:dev=/a/server, keymesh/keymesh-server:next=/b/server,busybox:1=/bin/sh").expect("valid map");
        assert_eq!(map.resolve("docker.io/keymesh/keymesh-server:dev"), Some(Path::new("/a/server")));
        assert_eq!(map.resolve("keymesh/keymesh-server:next"), Some(Path::new("/b/server")));
        assert_eq!(map.resolve("docker.io/library/busybox:1"), Some(Path::new("/bin/sh")));
        assert_eq!(map.resolve("keymesh/keymesh-server:other"), None);
        assert!(ImageMap::parse("no-equals-sign").is_err());
    }
}
