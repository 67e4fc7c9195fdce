//! MLX's Metal SDPA vector kernels on the CPU (docs/kernels/metal-sim.md,
//! "SDPA vector kernels").
//!
//! `sdpa_vector`, `sdpa_vector_2pass_1` and `sdpa_vector_2pass_2` are
//! extracted from the tree's `kernels/sdpa_vector.h` with their closure; the
//! `[[function_constant(i)]]` declarations become globals the driver sets as
//! the host's `MTLFCList` does. The host's routing rules
//! (`sdpa_vector_blocks`, `sdpa_vector_two_pass`, `sdpa_vector_row_runs` and
//! the `SdpaVectorRun` they fill, added by overlay 0014) are extracted from
//! `scaled_dot_product_attention.cpp`, so the launches emulated are the ones
//! the tree's host code plans. Nothing of MLX is stored in this repository.

use std::path::{Path, PathBuf};

use crate::compile::{Compiler, Contraction, THE_COMPILER, run_compiler, source, write};
use crate::error::Result;
use crate::extract::{self, TreeFiles};

pub const KERNELS: &str = "mlx/backend/metal/kernels/sdpa_vector.h";
pub const HOST: &str = "mlx/backend/metal/scaled_dot_product_attention.cpp";
const KERNEL_ROOTS: &[&str] = &["sdpa_vector", "sdpa_vector_2pass_1", "sdpa_vector_2pass_2"];
/// MLX's kernels/utils.h type the kernels read `finite_min` of: ours (shim.h).
const SHIMMED: &[&str] = &["Limits"];
/// The host rules the driver calls, in dependency order.
pub const HOST_RULES: &[&str] = &[
    "SdpaVectorRun",
    "sdpa_vector_blocks",
    "sdpa_vector_two_pass",
    "sdpa_vector_row_runs",
];

/// Our sources, written next to the generated unit after `compile::COMMON`
/// (`shim.h` and `tg.h` under the names tg.h includes).
pub const SOURCES: &[(&str, &str)] = &[
    ("shim.h", include_str!("../cpp/sdpa/shim.h")),
    ("tg.h", include_str!("../cpp/ggml/tg.h")),
    ("main.cpp", include_str!("../cpp/sdpa/main.cpp")),
];

const FLAGS: &[&str] = &[
    "-std=c++20",
    "-O1",
    "-fno-strict-aliasing",
    "-Wno-attributes",
    "-Wno-unknown-pragmas",
    "-pthread",
];

/// `constant T NAME [[function_constant(I)]];` lines of the kernel header as
/// globals (`T NAME{};`), and their names.
pub fn function_constants(header: &str) -> Result<(String, Vec<String>)> {
    let mut code = String::new();
    let mut names = Vec::new();
    for fc in extract::function_constants(header) {
        let Some((ty, name)) = fc.decl else {
            return Err(source(format!(
                "{KERNELS}: unexpected function constant: {}",
                fc.line
            )));
        };
        code.push_str(&format!("{ty} {name}{{}};\n"));
        names.push(name.to_string());
    }
    if names.is_empty() {
        return Err(source(format!("{KERNELS}: no function constants")));
    }
    Ok((code, names))
}

/// The definitions of [`HOST_RULES`] in the host source, each with a `#line`
/// marker, wrapped in `namespace msim_host` with an `env::get_var` that reads
/// the real environment (as MLX's does).
pub fn host_rules(files: &TreeFiles) -> Result<String> {
    let text = files.get(HOST)?;
    let index = overlay::symbols::scan(text);
    let mut code = String::from(
        "namespace msim_host {\nnamespace env {\ninline int get_var(const char* n, int d) {\n\
         \x20 const char* v = std::getenv(n);\n  return v ? std::atoi(v) : d;\n}\n}  // namespace env\n",
    );
    for name in HOST_RULES {
        let defs = index.find(name);
        let [def] = defs[..] else {
            return Err(source(format!(
                "{HOST}: {} definitions of {name} (overlay 0014 adds one)",
                defs.len()
            )));
        };
        let body = &text[def.span.clone()];
        let semi = if body.trim_end().ends_with('}')
            && def.kind != overlay::symbols::SymbolKind::Function
        {
            ";"
        } else {
            ""
        };
        code.push_str(&format!(
            "#line {} \"{HOST}\"\n{body}{semi}\n",
            def.start_line
        ));
    }
    code.push_str("}  // namespace msim_host\n");
    Ok(code)
}

/// The unit: shims, the function-constant globals, the extracted kernels,
/// the extracted host rules, the driver.
pub fn unit(files: &TreeFiles) -> Result<String> {
    let header = files.get(KERNELS)?;
    let (fc, fc_names) = function_constants(header)?;
    let mut exclude: Vec<&str> = SHIMMED.to_vec();
    exclude.extend(fc_names.iter().map(String::as_str));
    let k = extract::extract(files, &[KERNELS], KERNEL_ROOTS, &[], &exclude)?;
    Ok(format!(
        "#include \"metal_std.h\"\n#include \"shim.h\"\n#include \"tg.h\"\n#include \"simt.h\"\n\
         // threadgroup arrays: one per threadgroup (shim.h)\n#undef threadgroup\n\
         #define threadgroup static thread_local\nusing namespace metal;\n\
         // function constants\n{fc}\n{kernels}\n#undef threadgroup\n{host}\n\
         #line 1 \"metal-sim-sdpa\"\n#include \"main.cpp\"\n",
        kernels = k.code,
        host = host_rules(files)?,
    ))
}

/// Compiles the unit for `files` with `contraction` into the cache (keyed by
/// the unit, our sources, flags and compiler): the binary, and whether it was
/// cached.
pub fn build(
    files: &TreeFiles,
    compiler: &Compiler,
    contraction: Contraction,
) -> Result<(PathBuf, bool)> {
    let unit = unit(files)?;
    let mut flags: Vec<String> = FLAGS.iter().map(|f| f.to_string()).collect();
    flags.extend(contraction.flags());
    let key = format!("{flags:?}");
    let parts: [&[u8]; 3] = [b"sdpa", unit.as_bytes(), key.as_bytes()];
    compiler.cached_build(&parts, SOURCES, |work| {
        write(&work.join("unit.cpp"), &unit)?;
        compile(compiler, work, &flags)
    })
}

fn compile(compiler: &Compiler, work: &Path, flags: &[String]) -> Result<()> {
    let unit = work.join("unit.cpp");
    let mut c = compiler.command();
    c.args(flags)
        .arg("-I")
        .arg(work)
        .arg("-o")
        .arg(work.join("sim"))
        .arg(&unit);
    run_compiler(c, &unit, THE_COMPILER)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn function_constants_become_globals_and_others_are_refused() {
        let h = "constant bool do_causal [[function_constant(22)]];\n\
                 constant int blocks [[function_constant(26)]];\nint x;\n";
        let (code, names) = function_constants(h).unwrap();
        assert_eq!(code, "bool do_causal{};\nint blocks{};\n");
        assert_eq!(names, ["do_causal", "blocks"]);
        assert!(function_constants("int x;\n").is_err());
        let odd = "constant const bool x [[function_constant(1)]];\n";
        assert!(function_constants(odd).is_err());
    }

    #[test]
    fn host_rules_need_exactly_one_definition_each() {
        let files = |text: &str| TreeFiles {
            label: "t".into(),
            files: [(HOST.to_string(), text.to_string())].into(),
        };
        let err = host_rules(&files(
            "int sdpa_vector_blocks(char d, int N, int s) { return 1; }\n",
        ));
        assert!(matches!(err, Err(Error::Source(m)) if m.contains("SdpaVectorRun")));
    }
}
