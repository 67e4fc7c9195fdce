//! ggml's TQ1_0 Metal kernels on the CPU (docs/kernels/ggml-tq1_0.md).
//!
//! The kernels come from the tree under test: `ggml-metal.metal` is run
//! through the C preprocessor (its own headers, no Metal defines, so the
//! non-tensor `kernel_mul_mm` is the one kept), then the kernels and what
//! they reference are extracted by name ([`crate::extract`]). Attributes are
//! stripped; `[[host_name]]` instantiation lines become registry entries the
//! driver looks up by the name the host would ask for; function-constant
//! declarations become globals the driver sets by index, as the host's
//! `ggml_metal_cv_set_*` does. The CPU reference (`dequantize_row_tq1_0`,
//! `quantize_row_tq1_0_ref`, `quantize_row_q8_K_ref`,
//! `ggml_vec_dot_tq1_0_q8_K_generic`) is extracted from the same tree and
//! compiled as C with `cc`. Nothing of ggml is stored in this repository.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::compile::{Compiler, THE_COMPILER, run_compiler, source, write};
use crate::error::{Error, Result};
use crate::extract::{self, TreeFiles};

pub const METAL: &str = "src/ggml-metal/ggml-metal.metal";
pub const IMPL: &str = "src/ggml-metal/ggml-metal-impl.h";
pub const DEVICE: &str = "src/ggml-metal/ggml-metal-device.cpp";
pub const COMMON: &str = "src/ggml-common.h";
pub const QUANTS: &str = "src/ggml-quants.c";
pub const CPU_QUANTS: &str = "src/ggml-cpu/quants.c";

/// Every path the ggml emulation reads.
pub const WANTED: &[&str] = &[METAL, IMPL, DEVICE, COMMON, QUANTS, CPU_QUANTS];

/// Kernel-side roots, extracted with their closure before the mul_mv_id glue.
const KERNEL_ROOTS: &[&str] = &[
    "dequantize_tq1_0",
    "kernel_get_rows_q",
    "kernel_cpy_q_f32",
    "kernel_mul_mv_tq1_0_f32_impl",
    "kernel_mul_mv_tq1_0_f32",
    "kernel_mul_mm",
    "kernel_mul_mm_id_map0",
    "kernel_mul_mm_id",
    // overlay 0004's block-at-a-time TQ1_0 mat-mat kernels
    "kernel_mul_mm_tq1_0",
    "kernel_mul_mm_id_tq1_0",
];

/// Identifiers the extracted kernels use as locals or parameters that also
/// name unrelated top-level definitions of ggml-metal.metal.
const LOCAL_NAMES: &[&str] = &["sum"];

/// CPU reference roots (C).
const REF_ROOTS: &[&str] = &[
    "dequantize_row_tq1_0",
    "quantize_row_tq1_0_ref",
    "quantize_row_q8_K_ref",
    "ggml_vec_dot_tq1_0_q8_K_generic",
];
/// Provided by our C prelude (ggml takes them from ggml-impl.h).
const REF_SHIMMED: &[&str] = &[
    "GGML_FP16_TO_FP32",
    "GGML_FP32_TO_FP16",
    "GGML_CPU_FP16_TO_FP32",
    "GGML_CPU_FP32_TO_FP16",
    "MIN",
    "MAX",
    "UNUSED",
    "GGML_RESTRICT",
];

/// Our sources, written next to the generated unit after `compile::COMMON`.
pub const SOURCES: &[(&str, &str)] = &[
    ("shim.h", include_str!("../cpp/ggml/shim.h")),
    ("tg.h", include_str!("../cpp/ggml/tg.h")),
    ("main.cpp", include_str!("../cpp/ggml/main.cpp")),
    ("ref_prelude.h", include_str!("../cpp/ggml/ref_prelude.h")),
    ("metal_stdlib", ""),
];

/// Reads the files the emulation needs from a checkout (`src/...`).
pub fn from_dir(label: &str, dir: &Path) -> Result<TreeFiles> {
    let mut files = BTreeMap::new();
    for p in WANTED {
        let path = dir.join(p);
        let text = std::fs::read_to_string(&path).map_err(Error::io("reading", &path))?;
        files.insert(p.to_string(), text);
    }
    Ok(TreeFiles {
        label: label.into(),
        files,
    })
}

/// The pinned ggml of the project at `root` with its series applied
/// (`patched`) and without (`pristine`), read through the overlay engine.
pub fn load_pinned(root: &Path, upstream: &str) -> Result<(TreeFiles, TreeFiles)> {
    use overlay::project::{Project, apply_series};
    // The pin and the series only: the build settings beside them are not read here.
    let project = Project::load(root, &overlay::manifest::Extras::Unread)?;
    let up = project.upstream(Some(upstream))?;
    let series = project.series(up)?;
    let repo = project.open_upstream(up, &overlay::upstream::default_cache_root(), &mut |_| {})?;
    let applied = apply_series(&repo, &up.rev, &series)?;
    let read = |label: &str, tree: &overlay::tree::Tree| -> Result<TreeFiles> {
        let mut files = BTreeMap::new();
        for p in WANTED {
            let bytes = tree.bytes(p, &repo)?.ok_or_else(|| Error::MissingFile {
                label: label.to_string(),
                path: p.to_string(),
            })?;
            let text = String::from_utf8(bytes).map_err(|_| Error::NotUtf8 {
                path: p.to_string(),
            })?;
            files.insert(p.to_string(), text);
        }
        Ok(TreeFiles {
            label: label.into(),
            files,
        })
    };
    Ok((
        read("patched", &applied.result)?,
        read("pristine", &applied.base)?,
    ))
}

/// `ggml-metal.metal` through the preprocessor with the tree's headers and an
/// empty `<metal_stdlib>`: macros expanded, `#if` resolved as for a GPU
/// without the tensor API or bfloat.
pub fn preprocess(files: &TreeFiles, compiler: &Compiler) -> Result<String> {
    let dir = tempdir("pp")?;
    for p in [METAL, IMPL, COMMON] {
        let name = Path::new(p).file_name().unwrap();
        write(&dir.join(name), files.get(p)?)?;
    }
    write(&dir.join("metal_stdlib"), "")?;
    let out = compiler
        .command()
        .args(["-E", "-P", "-x", "c++", "-I"])
        .arg(&dir)
        .arg(dir.join("ggml-metal.metal"))
        .output()
        .map_err(Error::spawn("the preprocessor"))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        return Err(Error::Preprocess {
            file: METAL.to_string(),
            diagnostics: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    String::from_utf8(out.stdout).map_err(|_| Error::NotUtf8 {
        path: format!("{METAL} (preprocessed)"),
    })
}

fn tempdir(tag: &str) -> Result<PathBuf> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("metal-sim-ggml-{tag}-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(Error::io("creating", &dir))?;
    Ok(dir)
}

/// Removes `[[...]]` attributes (`[[threadgroup(0)]]` would not survive the
/// shim defining `threadgroup` away); `[[host_name("x")]]` on a plain kernel
/// definition becomes a registry entry for the function that follows.
pub fn strip_attributes(code: &str, registry: &mut Vec<(String, String)>) -> String {
    let mut out = String::with_capacity(code.len());
    let mut rest = code;
    while let Some(i) = rest.find("[[") {
        let after = &rest[i + 2..];
        let is_attr = after
            .trim_start()
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
        let Some(j) = after.find("]]").filter(|_| is_attr) else {
            out.push_str(&rest[..i + 2]);
            rest = after;
            continue;
        };
        let attr = &after[..j];
        if let Some(name) = attr.trim().strip_prefix("host_name(\"") {
            let name = name.trim_end_matches(")").trim_end_matches('"');
            if let Some(f) = following_function(&after[j + 2..]) {
                registry.push((name.to_string(), f));
            }
        }
        out.push_str(&rest[..i]);
        rest = &after[j + 2..];
    }
    out.push_str(rest);
    out
}

/// `kernel void NAME(` after an attribute: NAME.
fn following_function(s: &str) -> Option<String> {
    let head = &s[..s.find('(')?];
    let words: Vec<&str> = head.split_whitespace().collect();
    (words.first() == Some(&"kernel")).then(|| words.last().map(|w| w.to_string()))?
}

/// `constant T FC_x [[function_constant(i)]];` declarations of the
/// preprocessed source, as globals registered by index.
pub fn function_constants(pre: &str) -> Result<String> {
    let mut out = String::new();
    for fc in extract::function_constants(pre) {
        let Some((ty, name)) = fc.decl else {
            return Err(source(format!(
                "unexpected function constant declaration: {}",
                fc.line
            )));
        };
        let idx = fc.index;
        out.push_str(&format!(
            "{ty} {name}{{}};\nstatic msim::FcReg<{ty}> msim_fc_{name}(\"{name}\", {idx}, &{name});\n"
        ));
    }
    Ok(out)
}

/// `template [[host_name("NAME")]] kernel TYPE EXPR;` lines whose NAME
/// satisfies `want`, as registry entries (NAME, EXPR).
pub fn instantiations(pre: &str, want: &dyn Fn(&str) -> bool) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for line in pre.lines() {
        let l = line.trim();
        let Some(rest) = l.strip_prefix("template [[host_name(\"") else {
            continue;
        };
        let Some((name, rest)) = rest.split_once('"') else {
            continue;
        };
        if !want(name) {
            continue;
        }
        let Some(rest) = rest
            .trim_start()
            .strip_prefix(")]]")
            .and_then(|r| r.trim().strip_prefix("kernel "))
        else {
            continue;
        };
        // TYPE EXPR; — EXPR starts after the typedef name.
        let rest = rest.trim().trim_end_matches(';');
        let Some((_, expr)) = rest.split_once(char::is_whitespace) else {
            continue;
        };
        v.push((name.to_string(), expr.trim().to_string()));
    }
    v
}

/// A `typedef` statement of `pre` that declares `name`.
fn typedef_stmt(pre: &str, name: &str) -> Result<String> {
    let mut from = 0;
    while let Some(i) = pre[from..].find("typedef ") {
        let start = from + i;
        let end = start
            + pre[start..]
                .find(';')
                .ok_or_else(|| source("typedef without ;"))?;
        let stmt = &pre[start..=end];
        let ids = extract::identifiers(stmt);
        let declared = stmt.contains(&format!("({name})")) || ids.last() == Some(&name);
        if declared {
            return Ok(stmt.to_string());
        }
        from = end;
    }
    Err(source(format!("{METAL}: no typedef of {name}")))
}

/// The name the preprocessed kernel source goes by in `#line` markers.
const PRE: &str = "ggml-metal.metal(preprocessed)";

/// Names the tree's headers define (included whole by the unit, so the
/// extraction must not copy them out of the preprocessed text again).
fn header_names(files: &TreeFiles) -> Result<Vec<String>> {
    let mut v = Vec::new();
    for p in [IMPL, COMMON] {
        let text = files.get(p)?;
        v.extend(
            overlay::symbols::scan(text)
                .symbols()
                .iter()
                .map(|s| s.name.clone()),
        );
        // `typedef struct { ... } NAME;`
        for part in text.split("} ").skip(1) {
            if let Some(name) = part.split(';').next()
                && !name.is_empty()
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            {
                v.push(name.to_string());
            }
        }
    }
    Ok(v)
}

/// ggml-common.h with its Metal branch's unions named (`data`, as its C++
/// branch names them): the shim's `half` has constructors, which C++ does
/// not allow in an anonymous aggregate. The TQ1_0 and q8_K blocks have no
/// union, so nothing the kernels under test read changes.
pub fn common_for_shim(files: &TreeFiles) -> Result<String> {
    let text = files.get(COMMON)?;
    let start = text
        .find("#elif defined(GGML_COMMON_DECL_METAL)")
        .ok_or_else(|| source(format!("{COMMON}: no GGML_COMMON_DECL_METAL branch")))?;
    let end = start
        + 10
        + text[start + 10..]
            .find("#elif")
            .ok_or_else(|| source("Metal branch end"))?;
    let branch = &text[start..end];
    let named = branch
        .replace(
            "#define GGML_COMMON_AGGR_U\n",
            "#define GGML_COMMON_AGGR_U data\n",
        )
        .replace(
            "#define GGML_COMMON_AGGR_S\n",
            "#define GGML_COMMON_AGGR_S data\n",
        );
    if named.matches(" data\n").count() != 2 {
        return Err(source(format!(
            "{COMMON}: the Metal branch does not define GGML_COMMON_AGGR_U/S as expected"
        )));
    }
    Ok(format!("{}{named}{}", &text[..start], &text[end..]))
}

/// The C++ unit: our shim, the tree's headers, the extracted kernels, the
/// registry of the TQ1_0 host names (plus the id-map kernels), the driver.
pub fn kernel_unit(files: &TreeFiles, pre: &str) -> Result<String> {
    let tf = TreeFiles {
        label: files.label.clone(),
        files: BTreeMap::from([(PRE.to_string(), pre.to_string())]),
    };
    let fc = function_constants(pre)?;
    let mut exclude = header_names(files)?;
    exclude.push("mmv_fn".into());
    // Local variables of the kernels that share a name with a top-level
    // function of ggml-metal.metal (the closure follows identifiers, not scopes).
    exclude.extend(LOCAL_NAMES.iter().map(|s| s.to_string()));
    exclude.extend(
        fc.lines()
            .filter_map(|l| l.split_whitespace().nth(1))
            .map(|n| n.trim_end_matches("{};").to_string()),
    );
    let ex: Vec<&str> = exclude.iter().map(String::as_str).collect();
    let a = extract::extract(&tf, &[PRE], KERNEL_ROOTS, &[], &ex)?;
    let mut ex2 = ex.clone();
    ex2.extend(a.names.iter().map(String::as_str));
    let b = extract::extract(&tf, &[PRE], &["kernel_mul_mv_id"], &[], &ex2)?;
    let mut registry = Vec::new();
    let code_a = strip_attributes(&a.code, &mut registry);
    let code_b = strip_attributes(&b.code, &mut registry);
    let index = overlay::symbols::scan(pre);
    let mmv: Vec<String> = index
        .find("mmv_fn")
        .iter()
        .map(|s| pre[s.span.clone()].to_string())
        .collect();
    if mmv.len() != 2 {
        return Err(source(format!(
            "{METAL}: expected the two mmv_fn overloads, found {}",
            mmv.len()
        )));
    }
    let mut glue = String::new();
    for t in ["kernel_mul_mv_disp_t", "kernel_mul_mv2_disp_t"] {
        glue.push_str(&typedef_stmt(pre, t)?);
        glue.push('\n');
    }
    glue.push_str(&strip_attributes(&mmv.join("\n"), &mut Vec::new()));
    glue.push('\n');
    glue.push_str(&disp_typedef(pre)?);
    registry.extend(instantiations(pre, &|n| {
        n.contains("tq1_0") || n.starts_with("kernel_mul_mm_id_map0_")
    }));
    let reg: String = registry
        .iter()
        .enumerate()
        .map(|(i, (name, expr))| format!("static msim::KReg msim_k{i}(\"{name}\", &{expr});\n"))
        .collect();
    Ok(format!(
        "#include \"metal_std.h\"\n#include \"shim.h\"\n#include \"tg.h\"\n#include \"simt.h\"\n\
         #define GGML_COMMON_DECL_METAL\n#include \"ggml-common-metal.h\"\n#include \"ggml-metal-impl.h\"\n\
         using namespace metal;\n// function constants\n{fc}\n{code_a}\n// mul_mv_id glue\n{glue}\n{code_b}\n\
         // [[host_name]] registry\n{reg}\n#include \"main.cpp\"\n"
    ))
}

/// `mul_mv_disp_fn_t` is `decltype(mmv_fn<kernel_mul_mv_t_t_disp<half, half, ...>>)`:
/// the type of an mmv_fn instantiation, which is the same for every
/// instantiation of either overload. The f16 kernel it names is not
/// extracted; the TQ1_0 impl stands in for it (same type by construction,
/// and the compiler checks the instantiation).
fn disp_typedef(pre: &str) -> Result<String> {
    let stmt = typedef_stmt(pre, "mul_mv_disp_fn_t")?;
    let open = stmt
        .find("mmv_fn<")
        .ok_or_else(|| source("mul_mv_disp_fn_t: no mmv_fn<"))?
        + "mmv_fn<".len();
    let close = stmt
        .rfind(">>")
        .ok_or_else(|| source("mul_mv_disp_fn_t: no >>"))?;
    Ok(format!(
        "{}kernel_mul_mv_tq1_0_f32_impl<N_R0_TQ1_0>{}\n",
        &stmt[..open],
        &stmt[close + 1..]
    ))
}

/// The CPU reference as C: our prelude (fp16 conversions, the macros ggml
/// takes from ggml-impl.h) and the extracted functions.
pub fn reference_c(files: &TreeFiles) -> Result<String> {
    let mut ex: Vec<&str> = REF_SHIMMED.to_vec();
    let hn = header_names(files)?;
    ex.extend(hn.iter().map(String::as_str));
    let r = extract::extract(files, &[QUANTS, CPU_QUANTS], REF_ROOTS, &[], &ex)?;
    Ok(format!("#include \"ref_prelude.h\"\n{}\n", r.code))
}

/// A built emulator binary for one tree.
pub struct Built {
    pub path: PathBuf,
    pub cached: bool,
}

const CXX_FLAGS: &[&str] = &[
    "-std=c++20",
    "-O1",
    "-fno-strict-aliasing",
    "-ffp-contract=off",
    "-Wno-attributes",
    "-Wno-unknown-pragmas",
    "-pthread",
];
const C_FLAGS: &[&str] = &["-std=c11", "-O1", "-ffp-contract=off", "-c"];

/// Preprocesses, extracts and compiles; the binary is cached under a key of
/// everything that goes into it (units, the tree's headers, our sources,
/// flags, compiler).
pub fn build(files: &TreeFiles, compiler: &Compiler) -> Result<Built> {
    let pre = preprocess(files, compiler)?;
    let unit = kernel_unit(files, &pre)?;
    let refc = reference_c(files)?;
    let mut parts: Vec<&[u8]> = vec![b"ggml", unit.as_bytes(), refc.as_bytes()];
    parts.push(files.get(COMMON)?.as_bytes());
    parts.push(files.get(IMPL)?.as_bytes());
    let flags = format!("{CXX_FLAGS:?}{C_FLAGS:?}");
    parts.push(flags.as_bytes());
    let (path, cached) = compiler.cached_build(&parts, SOURCES, |work| {
        compile(files, compiler, work, (&pre, &unit, &refc))
    })?;
    Ok(Built { path, cached })
}

/// The units of `build` written into `work` and compiled there: the reference C, then the
/// kernels' unit linked with it into `sim`.
fn compile(
    files: &TreeFiles,
    compiler: &Compiler,
    work: &Path,
    (pre, unit, refc): (&str, &str, &str),
) -> Result<()> {
    write(&work.join("ggml-common.h"), files.get(COMMON)?)?;
    write(&work.join("ggml-common-metal.h"), common_for_shim(files)?)?;
    write(&work.join("ggml-metal-impl.h"), files.get(IMPL)?)?;
    write(&work.join("pre.metal"), pre)?;
    write(&work.join("unit.cpp"), unit)?;
    write(&work.join("ref.c"), refc)?;
    let cc = std::env::var("CC")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "cc".into());
    // std, not xshell: run_compiler maps a failed start to Error::Spawn with its io::Error.
    let mut c = Command::new(cc);
    c.args(C_FLAGS)
        .arg("-I")
        .arg(work)
        .arg("-o")
        .arg(work.join("ref.o"))
        .arg(work.join("ref.c"));
    run_compiler(c, &work.join("ref.c"), THE_COMPILER)?;
    let mut cxx = compiler.command();
    cxx.args(CXX_FLAGS)
        .arg("-I")
        .arg(work)
        .arg("-o")
        .arg(work.join("sim"))
        .arg(work.join("unit.cpp"))
        .arg(work.join("ref.o"));
    run_compiler(cxx, &work.join("unit.cpp"), THE_COMPILER)
}

/// Runs `requests` (one per line, see cpp/ggml/main.cpp) and returns one
/// JSON object per request.
pub fn run(bin: &Path, requests: &[String]) -> Result<Vec<serde_json::Value>> {
    crate::compile::run_lines(bin, requests)
}
