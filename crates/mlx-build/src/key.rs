//! MLX's key material: what decides its Ninja tree (`DirKeyMaterial`, the dir key) and what only
//! changes its sources (the series, FetchContent overrides: the full key), as the pipeline's
//! labelled lines. The lines are those the driver always hashed, so existing caches stay valid.

use std::collections::BTreeMap;

use build_pipeline::KeyLines;
use serde::{Deserialize, Serialize};

use crate::{Backend, Profile};

/// Everything that decides the build directory's content except the overlay series.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DirKeyMaterial {
    pub upstream: String,
    pub pin: String,
    pub backend: Backend,
    pub profile: Profile,
    pub cmake_options: Vec<String>,
    pub compiler: String,
}

impl DirKeyMaterial {
    /// The labelled lines the dir key hashes.
    pub fn lines(&self) -> KeyLines {
        let mut k = KeyLines::new();
        k.push("upstream", &self.upstream)
            .push("pin", &self.pin)
            .push("backend", self.backend.as_str())
            .push("profile", self.profile.as_str())
            .push_all("cmake", self.cmake_options.iter().map(String::as_str))
            .push_lines("compiler", &self.compiler);
        k
    }

    pub fn dir_key(&self) -> String {
        self.lines().key()
    }
}

/// What the stamp records beside the key: what the Ninja tree was last built from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub dir: DirKeyMaterial,
    pub series_hash: String,
    pub fetchcontent: BTreeMap<String, String>,
}

impl Stamp {
    /// What the full key adds to the dir key's lines.
    pub fn source_lines(&self) -> KeyLines {
        let mut k = KeyLines::new();
        k.push("series", &self.series_hash);
        for (name, value) in &self.fetchcontent {
            k.push("fetchcontent", &format!("{name}={value}"));
        }
        k
    }

    /// The full key.
    pub fn key(&self) -> String {
        self.dir.lines().extended(&self.source_lines()).key()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::options::cmake_options;

    fn material() -> DirKeyMaterial {
        DirKeyMaterial {
            upstream: "mlx".into(),
            pin: "9a795735ad9a42664e08f42361b405ed570bcf1a".into(),
            backend: Backend::Cpu,
            profile: Profile::Release,
            cmake_options: cmake_options(Backend::Cpu, Profile::Release, false),
            compiler: "CXX=c++\nCC=\nc++ (Debian 12.2.0-14) 12.2.0".into(),
        }
    }

    fn stamp() -> Stamp {
        Stamp {
            dir: material(),
            series_hash: "abc".into(),
            fetchcontent: BTreeMap::new(),
        }
    }

    #[test]
    fn dir_key_is_stable_and_sensitive_to_each_input() {
        let base = material();
        assert_eq!(base.dir_key(), material().dir_key());
        assert_eq!(base.dir_key().len(), 20);
        let variants: Vec<DirKeyMaterial> = vec![
            DirKeyMaterial {
                upstream: "mlx2".into(),
                ..material()
            },
            DirKeyMaterial {
                pin: "0".repeat(40),
                ..material()
            },
            DirKeyMaterial {
                backend: Backend::Cuda,
                ..material()
            },
            DirKeyMaterial {
                profile: Profile::Debug,
                ..material()
            },
            DirKeyMaterial {
                cmake_options: cmake_options(Backend::Cpu, Profile::Release, true),
                ..material()
            },
            DirKeyMaterial {
                compiler: "clang version 17".into(),
                ..material()
            },
        ];
        let mut seen = std::collections::HashSet::new();
        seen.insert(base.dir_key());
        for v in variants {
            assert!(seen.insert(v.dir_key()), "collision for {v:?}");
        }
    }

    #[test]
    fn series_hash_changes_the_build_key_but_not_the_dir_key() {
        let a = stamp();
        let b = Stamp {
            series_hash: "def".into(),
            ..stamp()
        };
        assert_eq!(a.dir.dir_key(), b.dir.dir_key());
        assert_ne!(a.key(), b.key());
        let mut fc = BTreeMap::new();
        fc.insert("json".to_string(), "/x".to_string());
        let c = Stamp {
            fetchcontent: fc,
            ..stamp()
        };
        assert_ne!(a.key(), c.key());
        assert_eq!(a.key(), stamp().key());
    }

    #[test]
    fn stamp_round_trips_through_json() {
        let s = stamp();
        let back: Stamp = serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(s, back);
    }

    #[test]
    fn keys_are_the_ones_the_driver_always_made() {
        // The hand-written canonical form: existing caches keep their names.
        let m = material();
        let mut canonical = format!(
            "upstream={}\npin={}\nbackend=cpu\nprofile=release\n",
            m.upstream, m.pin
        );
        for o in &m.cmake_options {
            canonical.push_str(&format!("cmake={o}\n"));
        }
        for l in m.compiler.lines() {
            canonical.push_str(&format!("compiler={l}\n"));
        }
        assert_eq!(m.lines().as_str(), canonical);
        assert_eq!(
            stamp().key(),
            build_pipeline::short_hash(&format!("{canonical}series=abc\n"))
        );
    }
}
