//! A recipe's keyed build tree: `<builds>/<dir_key>/{src,build,install,deps}`, its stamp and
//! its lock, and the steps every build runs in it (materialize, configure, Ninja).

use std::fs::File;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{Context, Result};
use crate::key::{KeyLines, Keys, read_stamp, remove_stamp, write_stamp};
use crate::{Progress, cmake, ninja};

/// What to build: the inputs that key it, how its sources are written, how CMake configures it.
pub trait Recipe {
    /// The task that builds it, for messages (`build-mlx`, `build-ggml`).
    fn task(&self) -> &str;
    /// What a failed build names (`MLX`: "MLX build failed").
    fn what(&self) -> &str;
    /// The sources as messages name them (`mlx @ 0123456789ab`).
    fn source_name(&self) -> String;
    /// What shapes the compiled objects (upstream, pin, options, compiler): the dir key.
    fn dir_material(&self) -> Result<KeyLines>;
    /// What only changes the sources (a series hash): the full key adds it.
    fn source_material(&self) -> KeyLines;
    /// What a failed `materialize` is reported under.
    fn materializing(&self) -> String {
        "materializing the patched source tree".into()
    }
    /// Writes the source tree into `src`, only files whose content differs (unchanged files keep
    /// their mtimes, so only what changed recompiles).
    fn materialize(&mut self, src: &Path) -> Result<()>;
    /// The CMake definitions (`NAME=value`) that configure `tree`.
    fn definitions(&self, tree: &Tree) -> Result<Vec<String>>;
    /// The Ninja targets to build (all when empty).
    fn targets(&self) -> Vec<String> {
        Vec::new()
    }
}

/// What `stamp.json` holds: the full key the Ninja tree was last built for, and the recipe's
/// detail for people looking at the cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp<T> {
    pub key: String,
    #[serde(flatten)]
    pub detail: T,
}

/// A locked build tree of a recipe.
pub struct Tree {
    pub keys: Keys,
    /// The folder of the recipe's builds (`<cache>/builds`).
    pub builds: PathBuf,
    /// `<builds>/<dir_key>`.
    pub root: PathBuf,
    /// The tree's `flock`, held by the build's processes too ([`crate::lock::in_build`]).
    pub lock: File,
}

impl Tree {
    /// The keys of `recipe`.
    pub fn keys(recipe: &dyn Recipe) -> Result<Keys> {
        Ok(Keys::of(&recipe.dir_material()?, &recipe.source_material()))
    }

    /// Creates `<builds>/<dir_key>` and locks it, saying so on `progress` while another build
    /// (or the processes of an interrupted one) holds it.
    pub fn open(
        builds: &Path,
        keys: Keys,
        task: &str,
        progress: &mut dyn Progress,
    ) -> Result<Tree> {
        let root = builds.join(&keys.dir_key);
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        // Two builds on one tree would corrupt each other's Ninja state.
        let lock_path = builds.join(format!("{}.lock", keys.dir_key));
        let lock = crate::lock::lock_build_dir(&lock_path, || {
            progress.message(&format!(
                "waiting for another {task} using {} (or the build processes of an \
                 interrupted one) ...",
                root.display()
            ))
        })?;
        Ok(Tree {
            keys,
            builds: builds.to_path_buf(),
            root,
            lock,
        })
    }

    pub fn src(&self) -> PathBuf {
        self.root.join("src")
    }

    pub fn build_dir(&self) -> PathBuf {
        self.root.join("build")
    }

    /// Where `cmake --install` puts the build (`CMAKE_INSTALL_PREFIX`).
    pub fn install_dir(&self) -> PathBuf {
        self.root.join("install")
    }

    /// A folder for what the configure needs besides the sources (offline FetchContent dirs).
    pub fn deps_dir(&self) -> PathBuf {
        self.root.join("deps")
    }

    pub fn stamp_path(&self) -> PathBuf {
        self.root.join("stamp.json")
    }

    /// Whether the stamp says the Ninja tree holds this full key (and it was configured).
    pub fn is_fresh(&self) -> bool {
        read_stamp::<Stamp<serde_json::Value>>(&self.stamp_path())
            .is_some_and(|s| s.key == self.keys.key)
            && self.build_dir().join("build.ninja").is_file()
    }

    /// Records that the Ninja tree holds this full key, with `detail`.
    pub fn write_stamp<T: Serialize>(&self, detail: &T) -> Result<()> {
        let stamp = Stamp {
            key: self.keys.key.clone(),
            detail,
        };
        write_stamp(&self.stamp_path(), &stamp)
    }

    /// Materializes, configures and builds `recipe` with `jobs` compile jobs. The stamp goes
    /// first: an interrupted build must not claim what the Ninja tree holds.
    pub fn build(
        &self,
        recipe: &mut dyn Recipe,
        jobs: usize,
        progress: &mut dyn Progress,
    ) -> Result<()> {
        remove_stamp(&self.stamp_path())?;
        let (src, build) = (self.src(), self.build_dir());
        std::fs::create_dir_all(&src)?;
        std::fs::create_dir_all(&build)?;
        progress.message(&format!(
            "materializing {} into {}",
            recipe.source_name(),
            src.display()
        ));
        recipe
            .materialize(&src)
            .with_context(|| recipe.materializing())?;
        let defines = recipe.definitions(self)?;
        cmake::configure(&src, &build, &defines, &self.lock, progress)?;
        let targets = recipe.targets();
        let targets: Vec<&str> = targets.iter().map(String::as_str).collect();
        ninja::ninja_build_targets(&build, jobs, &targets, &self.lock, recipe.what(), progress)
    }

    /// `cmake --install` of the built tree.
    pub fn install(&self) -> Result<()> {
        cmake::install(&self.build_dir(), &self.lock)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tree_is_fresh_only_for_its_key_once_configured() {
        let d = tempfile::tempdir().unwrap();
        let mut dir = KeyLines::new();
        dir.push("pin", "p");
        let mut series = KeyLines::new();
        series.push("series", "s1");
        let keys = Keys::of(&dir, &series);
        let tree = Tree::open(d.path(), keys.clone(), "build-x", &mut crate::Quiet).unwrap();
        assert_eq!(tree.root, d.path().join(&keys.dir_key));
        assert!(!tree.is_fresh(), "no stamp");
        tree.write_stamp(&serde_json::json!({"series": "s1"}))
            .unwrap();
        assert!(!tree.is_fresh(), "never configured");
        std::fs::create_dir_all(tree.build_dir()).unwrap();
        std::fs::write(tree.build_dir().join("build.ninja"), "").unwrap();
        assert!(tree.is_fresh());
        let text = std::fs::read_to_string(tree.stamp_path()).unwrap();
        assert!(text.contains("\"series\": \"s1\""), "{text}");
        series.push("series", "s2");
        let other = Tree {
            keys: Keys::of(&dir, &series),
            ..tree
        };
        assert!(!other.is_fresh(), "another series");
    }
}
