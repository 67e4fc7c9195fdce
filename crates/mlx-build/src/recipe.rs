//! MLX as a [`Recipe`] of the build pipeline: its key material, its sources (the caller's
//! `materialize`), its CMake definitions.

use std::path::Path;

use build_pipeline::{KeyLines, Recipe, Result, Tree};

use crate::key::{DirKeyMaterial, Stamp};
use crate::options::{
    cmake_options, fetchcontent_defines, launcher_defines, system_json_source_dir,
};
use crate::{Backend, BuildMlxArgs, SourceInfo};

/// One build of the patched MLX.
pub struct MlxRecipe<'a> {
    /// The key material, recorded in the stamp.
    pub stamp: Stamp,
    backend: Backend,
    /// `FETCHCONTENT_SOURCE_DIR_*` of pins.toml's overrides (checked before anything is built).
    fetchcontent_defines: Vec<String>,
    materialize: &'a mut dyn FnMut(&Path) -> Result<()>,
}

impl<'a> MlxRecipe<'a> {
    /// The recipe of `args` for `source`: the compiler's identity is asked here.
    pub fn new(
        args: &BuildMlxArgs,
        backend: Backend,
        source: &SourceInfo,
        materialize: &'a mut dyn FnMut(&Path) -> Result<()>,
    ) -> Result<MlxRecipe<'a>> {
        let gguf = source.fetchcontent.contains_key("gguflib");
        let fetchcontent_defines = fetchcontent_defines(&source.fetchcontent)?;
        let stamp = Stamp {
            dir: DirKeyMaterial {
                upstream: source.upstream.clone(),
                pin: source.pin.clone(),
                backend,
                profile: args.profile,
                cmake_options: cmake_options(backend, args.profile, gguf),
                compiler: build_pipeline::cmake::compiler_identity()?,
            },
            series_hash: source.series_hash.clone(),
            fetchcontent: source.fetchcontent.clone(),
        };
        Ok(MlxRecipe {
            stamp,
            backend,
            fetchcontent_defines,
            materialize,
        })
    }
}

impl Recipe for MlxRecipe<'_> {
    fn task(&self) -> &str {
        "build-mlx"
    }

    fn what(&self) -> &str {
        "MLX"
    }

    fn source_name(&self) -> String {
        let pin = &self.stamp.dir.pin;
        format!(
            "{} @ {}",
            self.stamp.dir.upstream,
            pin.get(..12).unwrap_or(pin)
        )
    }

    fn dir_material(&self) -> Result<KeyLines> {
        Ok(self.stamp.dir.lines())
    }

    fn source_material(&self) -> KeyLines {
        self.stamp.source_lines()
    }

    fn materialize(&mut self, src: &Path) -> Result<()> {
        (self.materialize)(src)
    }

    fn definitions(&self, tree: &Tree) -> Result<Vec<String>> {
        let mut defines = self.stamp.dir.cmake_options.clone();
        defines.push(format!(
            "CMAKE_INSTALL_PREFIX={}",
            tree.install_dir().display()
        ));
        defines.extend(launcher_defines(self.backend));
        defines.extend(self.fetchcontent_defines.iter().cloned());
        if !self.stamp.fetchcontent.contains_key("json") {
            let dir = system_json_source_dir(&tree.deps_dir())?;
            defines.push(format!("FETCHCONTENT_SOURCE_DIR_JSON={}", dir.display()));
        }
        Ok(defines)
    }
}
