//! MLX's C++ tests and Python extension as a recipe of the build pipeline: build-mlx's key
//! material with the tests and bindings on, the patched tree (or the pin alone: the control), the
//! pinned test sources and the backend's sources as offline FetchContent folders.

use std::path::Path;

use build_pipeline::{KeyLines, Recipe, Tree};

use super::{SuiteArg, TestDeps, has_gguf, test_cmake_options};
use crate::build_mlx::{self as bm, Backend, DirKeyMaterial, Profile};
use crate::commands::{Ctx, materialize, materialize_unpatched};

/// One build of the test targets.
pub(super) struct TestsRecipe<'a> {
    ctx: &'a Ctx,
    suite: SuiteArg,
    backend: Backend,
    deps: &'a TestDeps,
    python: &'a Path,
    unpatched: bool,
    material: DirKeyMaterial,
}

impl<'a> TestsRecipe<'a> {
    pub(super) fn new(
        ctx: &'a Ctx,
        suite: SuiteArg,
        backend: Backend,
        deps: &'a TestDeps,
        python: &'a Path,
        unpatched: bool,
    ) -> bm::Result<TestsRecipe<'a>> {
        let up = ctx.upstream();
        let material = DirKeyMaterial {
            upstream: up.name.clone(),
            pin: up.rev.clone(),
            backend,
            profile: Profile::Release,
            cmake_options: test_cmake_options(backend, Profile::Release, has_gguf(&deps.settings)),
            compiler: bm::compiler_identity()?,
        };
        Ok(TestsRecipe {
            ctx,
            suite,
            backend,
            deps,
            python,
            unpatched,
            material,
        })
    }

    /// The test sources and the backend's pinned sources, as FetchContent folders (nothing is
    /// fetched at build time).
    fn source_defines(&self, defines: &mut Vec<String>) -> anyhow::Result<()> {
        let (deps, backend) = (self.deps, self.backend);
        let all = &deps.settings.sources;
        defines.push("FETCHCONTENT_FULLY_DISCONNECTED=ON".into());
        defines.push(format!(
            "FETCHCONTENT_SOURCE_DIR_DOCTEST={}",
            deps.doctest.display()
        ));
        defines.push(format!(
            "FETCHCONTENT_SOURCE_DIR_NANOBIND={}",
            deps.nanobind.display()
        ));
        // The backend's own pinned sources (CUDA: CCCL, CUTLASS, cuDNN frontend, NVTX, json), as the
        // bundle hands them over: nothing is fetched at build time (`bench` sources are not the build's).
        for s in all.iter().filter(|s| {
            !s.tests
                && !s.bench
                && (s.backends.is_empty() || s.backends.iter().any(|b| b == backend.as_str()))
        }) {
            let dir = crate::sources::cached_source(s, all)?;
            defines.retain(|d| {
                !d.starts_with(&format!(
                    "FETCHCONTENT_SOURCE_DIR_{}=",
                    s.name.to_ascii_uppercase()
                ))
            });
            defines.push(format!(
                "FETCHCONTENT_SOURCE_DIR_{}={}",
                s.name.to_ascii_uppercase(),
                dir.display()
            ));
        }
        let fetchcontent = &deps.settings.fetchcontent;
        if let Some(g) = all
            .iter()
            .find(|s| s.name == "gguflib" && !fetchcontent.contains_key("gguflib"))
        {
            let dir = crate::sources::cached_source(g, all)?;
            defines.push(format!("FETCHCONTENT_SOURCE_DIR_GGUFLIB={}", dir.display()));
        }
        Ok(())
    }
}

impl Recipe for TestsRecipe<'_> {
    fn task(&self) -> &str {
        "test-upstream"
    }

    fn what(&self) -> &str {
        "MLX"
    }

    fn source_name(&self) -> String {
        self.material.upstream.clone()
    }

    fn dir_material(&self) -> bm::Result<KeyLines> {
        Ok(self.material.lines())
    }

    /// Nothing is stamped: the tree is materialized and built incrementally on every run.
    fn source_material(&self) -> KeyLines {
        KeyLines::new()
    }

    fn materializing(&self) -> String {
        if self.unpatched {
            "materializing the pin's source tree".into()
        } else {
            "materializing the patched source tree".into()
        }
    }

    fn materialize(&mut self, src: &Path) -> bm::Result<()> {
        let written = if self.unpatched {
            materialize_unpatched(self.ctx, src, false)
        } else {
            materialize(self.ctx, src, false)
        };
        self.ctx.unlock();
        written.map(|_| ()).map_err(crate::build_cmd::driver_error)
    }

    fn definitions(&self, tree: &Tree) -> bm::Result<Vec<String>> {
        let fetchcontent = &self.deps.settings.fetchcontent;
        let mut defines = self.material.cmake_options.clone();
        defines.extend(bm::launcher_defines(self.backend));
        defines.extend(bm::fetchcontent_defines(fetchcontent)?);
        if !fetchcontent.contains_key("json") {
            let dir = bm::system_json_source_dir(&tree.deps_dir())?;
            defines.push(format!("FETCHCONTENT_SOURCE_DIR_JSON={}", dir.display()));
        }
        self.source_defines(&mut defines)
            .map_err(bm::Error::caller)?;
        let (python, src) = (self.python, tree.src());
        defines.push(format!("Python_EXECUTABLE={}", python.display()));
        // The extension lands beside MLX's Python package (git ignores *.so there, so the
        // materialized tree does not count it as an edit).
        defines.push(format!(
            "MLX_PYTHON_BINDINGS_OUTPUT_DIRECTORY={}",
            src.join("python/mlx").display()
        ));
        Ok(defines)
    }

    fn targets(&self) -> Vec<String> {
        let targets: &[&str] = match self.suite {
            SuiteArg::Cpp => &["tests"],
            SuiteArg::Python => &["core"],
            SuiteArg::All => &["tests", "core"],
        };
        targets.iter().map(|t| t.to_string()).collect()
    }
}
