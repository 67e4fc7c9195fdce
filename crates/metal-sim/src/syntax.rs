//! "Nothing reaches a Mac uncompiled that can be compiled here": the host
//! source `mlx/backend/metal/quantized.cpp` of the tree under test, whole,
//! against the tree's own MLX headers and our declarations of the metal-cpp
//! API (`cpp/stubs/Metal/Metal.hpp`), with `-fsyntax-only`; and the qmv-family
//! `[[kernel]]` entry points with every instantiation line of
//! `quantized.metal` that names them, expanded by the C preprocessor from the
//! tree's own macros and compiled through the Metal shim.
//!
//! Kernels outside the shim (qmm, qvm, gather, quantize) are counted, not
//! compiled: their instantiation lines are still preprocessed, so a broken
//! macro anywhere in the file fails the check.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use crate::compile::{self, Compiler};
use crate::error::{Error, Result};
use crate::extract::{self, TreeFiles};

const METAL_CPP_STUB: &str = include_str!("../cpp/stubs/Metal/Metal.hpp");

/// The [[kernel]] entries the shim compiles (the M = 1 kernels, qmv_wide and
/// the streamed twins); the streamed ones are absent at the pin.
/// `affine_qmv_quad` is not among them: it passes a `const constant int&` to
/// `qmv_quad_impl`'s `constant int&`, which Metal accepts (the constant
/// address space is const) and C++ cannot once the address space is defined
/// away; its lines are preprocessed and counted only.
pub const ENTRIES: &[&str] = &[
    "affine_qmv_fast",
    "affine_qmv",
    "affine_qmv_wide",
    "affine_qmv_fast_streamed",
    "affine_qmv_streamed",
];

/// One expanded `instantiate_kernel` line of quantized.metal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Instantiation {
    /// The host name (what the host code asks the library for).
    pub name: String,
    pub func: String,
    /// Template arguments as written: type, group size, bits, ...
    pub args: Vec<String>,
    /// The statement as the preprocessor expanded it.
    pub text: String,
}

/// The outcome of one compiler run.
#[derive(Clone, Debug)]
pub struct Step {
    pub ok: bool,
    pub cached: bool,
    pub seconds: f64,
    /// Compiler diagnostics (first lines) when it failed.
    pub errors: String,
}

#[derive(Clone, Debug)]
pub struct SyntaxReport {
    pub host: Step,
    pub kernels: Step,
    /// Every instantiation line of quantized.metal, expanded.
    pub instantiations: Vec<Instantiation>,
    /// Those compiled through the shim.
    pub compiled: usize,
    /// Streamed instantiations among the compiled ones.
    pub streamed: usize,
    pub flags: Vec<String>,
}

impl SyntaxReport {
    pub fn ok(&self) -> bool {
        self.host.ok && self.kernels.ok
    }
}

/// The C++ standard of the tree's CMakeLists (`set(CMAKE_CXX_STANDARD N)`),
/// else 20, the pin's.
fn cxx_standard(files: &TreeFiles) -> String {
    let n = files
        .files
        .get("CMakeLists.txt")
        .and_then(|t| {
            t.lines().find_map(|l| {
                l.trim()
                    .strip_prefix("set(CMAKE_CXX_STANDARD ")?
                    .strip_suffix(')')
                    .map(|n| n.trim().to_string())
            })
        })
        .unwrap_or_else(|| "20".into());
    format!("-std=c++{n}")
}

/// Writes `files` under `dir` (tree-relative paths).
fn write_all<'a>(dir: &Path, files: impl IntoIterator<Item = (&'a str, &'a str)>) -> Result<()> {
    for (p, text) in files {
        let path = dir.join(p);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(Error::io("creating", parent))?;
        }
        std::fs::write(&path, text).map_err(Error::io("writing", &path))?;
    }
    Ok(())
}

/// Runs the compiler with `-fsyntax-only` on `main` in `dir`; a pass is
/// cached (an `ok` stamp), a failure is re-checked every time.
fn syntax_only(
    compiler: &Compiler,
    dir: &Path,
    args: &[String],
    main: &Path,
    write: &dyn Fn() -> Result<()>,
) -> Result<Step> {
    let t0 = Instant::now();
    let stamp = dir.join("ok");
    if stamp.is_file() {
        return Ok(Step {
            ok: true,
            cached: true,
            seconds: t0.elapsed().as_secs_f64(),
            errors: String::new(),
        });
    }
    std::fs::create_dir_all(dir).map_err(Error::io("creating", dir))?;
    write()?;
    let out = compiler
        .command()
        .current_dir(dir)
        .args(args)
        .arg("-fsyntax-only")
        .arg(main)
        .output()
        .map_err(Error::spawn("the C++ compiler"))?;
    let ok = out.status.success();
    if ok {
        std::fs::write(&stamp, "").map_err(Error::io("writing", &stamp))?;
    }
    let err = String::from_utf8_lossy(&out.stderr);
    Ok(Step {
        ok,
        cached: false,
        seconds: t0.elapsed().as_secs_f64(),
        errors: err
            .lines()
            .filter(|l| l.contains("error"))
            .take(8)
            .collect::<Vec<_>>()
            .join("\n"),
    })
}

/// The whole host source of the tree, with the tree's headers (include
/// closure read by [`TreeFiles`]) and the metal-cpp declarations.
pub fn check_host(files: &TreeFiles, compiler: &Compiler) -> Result<(Step, Vec<String>)> {
    files.get(extract::HOST_SOURCE)?;
    let flags = vec![
        cxx_standard(files),
        "-I".into(),
        "stubs".into(),
        "-I".into(),
        "tree".into(),
    ];
    let mut parts: Vec<&[u8]> = vec![b"host-syntax", METAL_CPP_STUB.as_bytes()];
    for f in &flags {
        parts.push(f.as_bytes());
    }
    for (p, t) in &files.files {
        parts.push(p.as_bytes());
        parts.push(t.as_bytes());
    }
    let dir = compiler.cache_dir(&parts);
    let main = Path::new("tree").join(extract::HOST_SOURCE);
    let step = syntax_only(compiler, &dir, &flags, &main, &|| {
        write_all(&dir.join("stubs"), [("Metal/Metal.hpp", METAL_CPP_STUB)])?;
        write_all(
            &dir.join("tree"),
            files.files.iter().map(|(p, t)| (p.as_str(), t.as_str())),
        )
    })?;
    Ok((relative(step, &dir), flags))
}

/// Diagnostics name tree-relative paths, not the cache directory.
fn relative(mut s: Step, dir: &Path) -> Step {
    for prefix in [dir.join("tree"), dir.to_path_buf()] {
        s.errors = s
            .errors
            .replace(&format!("{}/", prefix.display()), "")
            .replace("tree/mlx/", "mlx/");
    }
    s
}

/// Expands the instantiation lines of quantized.metal with the tree's own
/// macros (`instantiate_kernel` from defines.h), without compiling anything.
pub fn expand_instantiations(files: &TreeFiles, compiler: &Compiler) -> Result<Vec<Instantiation>> {
    let metal = files.get(extract::METAL_SOURCE)?;
    let defines = extract::extract(
        files,
        &[extract::METAL_DEFINES],
        &["instantiate_kernel"],
        &[],
        &[],
    )?;
    // #include lines become blank lines, so line numbers stay the file's.
    let body: String = metal
        .lines()
        .map(|l| {
            if l.trim_start().starts_with("#include") {
                ""
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    let unit = format!(
        "{}\n#line 1 \"{}\"\n{body}\n",
        defines.code,
        extract::METAL_SOURCE
    );
    let mut child = compiler
        .command()
        .args(["-E", "-P", "-x", "c++", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::spawn("the C preprocessor"))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let writer = std::thread::spawn(move || stdin.write_all(unit.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(Error::spawn("the C preprocessor"))?;
    writer
        .join()
        .expect("the writer thread does not panic")
        .map_err(Error::spawn("the C preprocessor"))?;
    if !out.status.success() {
        return Err(Error::Preprocess {
            file: extract::METAL_SOURCE.to_string(),
            diagnostics: String::from_utf8_lossy(&out.stderr)
                .lines()
                .take(10)
                .collect::<Vec<_>>()
                .join("\n"),
        });
    }
    let text = String::from_utf8(out.stdout).map_err(|_| Error::NotUtf8 {
        path: format!("{} (preprocessed)", extract::METAL_SOURCE),
    })?;
    parse_instantiations(&text)
}

/// Splits preprocessed quantized.metal into `template [[host_name(N)]]
/// [[kernel]] decltype(F<A>) F<A>;` statements; anything else is an error
/// (the check must not skip code it does not understand).
pub fn parse_instantiations(text: &str) -> Result<Vec<Instantiation>> {
    let mut out = Vec::new();
    for stmt in text.split(';') {
        let s: String = stmt.split_whitespace().collect::<Vec<_>>().join(" ");
        if s.is_empty() {
            continue;
        }
        let bad = || Error::Source(format!("unrecognised statement in quantized.metal: {s}"));
        let rest = s.strip_prefix("template [[host_name(").ok_or_else(bad)?;
        let (name_lits, rest) = rest.split_once(")]]").ok_or_else(bad)?;
        let name: String = name_lits
            .split('"')
            .enumerate()
            .filter(|(i, _)| i % 2 == 1)
            .map(|(_, p)| p)
            .collect();
        let rest = rest
            .trim_start()
            .strip_prefix("[[kernel]] decltype(")
            .ok_or_else(bad)?;
        let (decl, inst) = rest.split_once(") ").ok_or_else(bad)?;
        if decl.trim() != inst.trim() {
            return Err(bad());
        }
        let (func, args) = decl.split_once('<').ok_or_else(bad)?;
        let args = args.strip_suffix('>').ok_or_else(bad)?;
        out.push(Instantiation {
            name,
            func: func.trim().to_string(),
            args: args.split(',').map(|a| a.trim().to_string()).collect(),
            text: format!("{s};"),
        });
    }
    Ok(out)
}

/// Which instantiations a quick run compiles: the quick matrix's group size
/// and bit widths (64; 3 and 4), every type and kernel.
fn in_quick(i: &Instantiation) -> bool {
    i.args.get(1).map(String::as_str) == Some("64")
        && matches!(i.args.get(2).map(String::as_str), Some("3" | "4"))
}

/// The kernel unit: the shim, the extracted entries (and everything they
/// reference in quantized.h), then the selected instantiation statements
/// exactly as the preprocessor expanded them.
pub fn kernel_unit(files: &TreeFiles, selected: &[&Instantiation]) -> Result<String> {
    let roots: BTreeSet<&str> = selected.iter().map(|i| i.func.as_str()).collect();
    let roots: Vec<&str> = roots.into_iter().collect();
    let code = extract::extract(
        files,
        &[extract::KERNEL_HEADER],
        &roots,
        &[],
        &["adjust_matrix_offsets"],
    )?;
    let mut s = format!(
        "// generated by metal-sim (syntax check) from the {} tree\n\
         #include \"simt.h\"\nusing namespace metal;\n\
         // MLX's Metal headers spell half this way too (kernels/utils.h).\n\
         using float16_t = half;\n{}\n#line 1 \"{} (expanded)\"\n",
        files.label,
        code.code,
        extract::METAL_SOURCE
    );
    for i in selected {
        s.push_str(&i.text);
        s.push('\n');
    }
    Ok(s)
}

/// The whole check on one tree.
pub fn check(files: &TreeFiles, compiler: &Compiler, quick: bool) -> Result<SyntaxReport> {
    let (host, flags) = check_host(files, compiler)?;
    let instantiations = match expand_instantiations(files, compiler) {
        Ok(v) => v,
        // A macro error in quantized.metal is a finding, like a type error.
        Err(e) => {
            return Ok(SyntaxReport {
                host,
                kernels: Step {
                    ok: false,
                    cached: false,
                    seconds: 0.0,
                    errors: format!("{e:#}"),
                },
                instantiations: Vec::new(),
                compiled: 0,
                streamed: 0,
                flags,
            });
        }
    };
    let selected: Vec<&Instantiation> = instantiations
        .iter()
        .filter(|i| ENTRIES.contains(&i.func.as_str()) && (!quick || in_quick(i)))
        .collect();
    let streamed = selected
        .iter()
        .filter(|i| i.func.ends_with("_streamed"))
        .count();
    let unit = kernel_unit(files, &selected)?;
    let mut kflags: Vec<String> = [
        "-std=c++20",
        // [[host_name]], [[kernel]], [[buffer(n)]] are unknown to g++.
        "-Wno-attributes",
        "-Wno-unknown-pragmas",
        "-I",
        ".",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut parts: Vec<&[u8]> = vec![b"kernel-syntax", unit.as_bytes()];
    for (n, t) in compile::COMMON.iter().chain(compile::SOURCES) {
        parts.push(n.as_bytes());
        parts.push(t.as_bytes());
    }
    for f in &kflags {
        parts.push(f.as_bytes());
    }
    let dir = compiler.cache_dir(&parts);
    let kernels = syntax_only(compiler, &dir, &kflags, Path::new("unit.cpp"), &|| {
        write_all(
            &dir,
            compile::COMMON.iter().chain(compile::SOURCES).copied(),
        )?;
        write_all(&dir, [("unit.cpp", unit.as_str())])
    })?;
    let kernels = relative(kernels, &dir);
    kflags.truncate(3);
    Ok(SyntaxReport {
        host,
        kernels,
        compiled: selected.len(),
        streamed,
        instantiations,
        flags: flags.into_iter().chain(kflags).collect(),
    })
}

/// Host kernel names (what `get_quantized_kernel` asks the library for) that
/// no instantiation line provides; MLX's type strings replace the dtype names
/// the dispatch shim records.
pub fn missing_names<'a>(
    knames: impl IntoIterator<Item = &'a str>,
    instantiations: &[Instantiation],
) -> Vec<String> {
    let have: BTreeSet<&str> = instantiations.iter().map(|i| i.name.as_str()).collect();
    let mut missing = BTreeMap::new();
    for k in knames {
        let mlx = k
            .replace("_float32_", "_float_")
            .replace("_float16_", "_float16_t_")
            .replace("_bfloat16_", "_bfloat16_t_");
        if !have.contains(mlx.as_str()) {
            missing.insert(mlx, ());
        }
    }
    missing.into_keys().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_expanded_instantiations_and_refuses_other_code() {
        let t = "template [[host_name(\"affine_qmv\" \"_\" \"float\" \"_gs_\" \"64\")]] \
                 [[kernel]] decltype(affine_qmv<float, 64, 4, 0>) affine_qmv<float, 64, 4, 0>;\n";
        let v = parse_instantiations(t).unwrap();
        assert_eq!(v.len(), 1);
        assert_eq!(v[0].name, "affine_qmv_float_gs_64");
        assert_eq!(v[0].func, "affine_qmv");
        assert_eq!(v[0].args, ["float", "64", "4", "0"]);
        assert!(parse_instantiations("int x;").is_err());
        let mismatch = "template [[host_name(\"a\")]] [[kernel]] decltype(f<int>) g<int>;";
        assert!(parse_instantiations(mismatch).is_err());
    }

    #[test]
    fn host_names_use_mlx_type_strings() {
        let inst = parse_instantiations(
            "template [[host_name(\"k_float16_t_gs_64\")]] [[kernel]] decltype(k<half>) k<half>;",
        )
        .unwrap();
        assert!(missing_names(["k_float16_gs_64"], &inst).is_empty());
        assert_eq!(missing_names(["k_float32_gs_64"], &inst), ["k_float_gs_64"]);
    }
}
