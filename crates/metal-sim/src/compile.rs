//! Generates the translation units from extracted code and compiles them with
//! the system C++ compiler into a content-addressed cache.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde::de::DeserializeOwned;
use sha2::{Digest, Sha256};
use xshell::{Shell, cmd};

use crate::error::{Error, Result};
use crate::extract::{self, Extracted, TreeFiles};

/// The Metal shim every unit includes (the kernels', ggml's and the SDPA's), written next to it
/// before the unit's own sources.
pub const COMMON: &[(&str, &str)] = &[
    ("metal_std.h", include_str!("../cpp/metal_std.h")),
    ("metal_shim.h", include_str!("../cpp/metal_shim.h")),
    ("simt.h", include_str!("../cpp/simt.h")),
    ("rng.h", include_str!("../cpp/rng.h")),
];

/// The kernel binary's own shim and driver sources, written next to its unit after [`COMMON`].
pub const SOURCES: &[(&str, &str)] = &[
    ("host_shim.h", include_str!("../cpp/host_shim.h")),
    ("kernels_main.cpp", include_str!("../cpp/kernels_main.cpp")),
    (
        "dispatch_main.cpp",
        include_str!("../cpp/dispatch_main.cpp"),
    ),
];

/// Host functions the dispatch binary runs, and the host names our shim
/// provides instead of MLX's (they would encode real Metal commands).
pub const HOST_ROOTS: &[&str] = &[
    "dispatch_qmv",
    "qmv_quad",
    "qmv",
    "qmv_wide",
    "qmv_fast_k_alignment",
];
const HOST_SHIMMED: &[&str] = &[
    "get_quantized_kernel_wrapped",
    "add_strides_and_shapes",
    "concatenate",
    "get_type_string",
    "get_command_encoder",
];

pub const KERNEL_ROOTS: &[&str] = &[
    "qmv_quad_impl",
    "qmv_fast_impl",
    "qmv_impl",
    "qmv_wide_impl",
];
/// The streamed kernel entry points (`affine_` + the host's func name, as
/// `get_quantized_kernel_wrapped` builds it); absent at the pin. They are
/// launched as [[kernel]]s, so their signature is the one the host binds.
pub const STREAMED: &[&str] = &["affine_qmv_fast_streamed", "affine_qmv_streamed"];
/// Batch offsets (B > 1) are not emulated: the harness launches B = 1 only,
/// and the shim's stand-in aborts if a kernel ever takes that branch.
const KERNEL_SHIMMED: &[&str] = &["adjust_matrix_offsets"];
/// The environment variable of the M >= 2 policy (overlay 0005).
pub const POLICY_ENV: &str = "MLX_METAL_QMV_BATCH_POLICY";

/// Floating-point contraction of a * b + c into fma: Metal may contract
/// unless told otherwise, so claims are checked both ways.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Contraction {
    Off,
    On,
}

impl Contraction {
    pub fn flags(self) -> Vec<String> {
        match self {
            Contraction::Off => vec!["-ffp-contract=off".into()],
            Contraction::On => {
                let mut v = vec!["-ffp-contract=fast".to_string()];
                if cfg!(target_arch = "x86_64") {
                    v.push("-mfma".into());
                }
                v
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub enum Family {
    Quad,
    Fast,
    Qmv,
    Wide,
    FastStreamed,
    QmvStreamed,
}

impl Family {
    /// The family of an MLX host `func` name recorded by the dispatch binary.
    pub fn from_func(func: &str) -> Option<Family> {
        Some(match func {
            "qmv_quad" => Family::Quad,
            "qmv_fast" => Family::Fast,
            "qmv" => Family::Qmv,
            "qmv_wide" => Family::Wide,
            "qmv_fast_streamed" => Family::FastStreamed,
            "qmv_streamed" => Family::QmvStreamed,
            _ => return None,
        })
    }
    pub fn name(self) -> &'static str {
        match self {
            Family::Quad => "qmv_quad",
            Family::Fast => "qmv_fast",
            Family::Qmv => "qmv",
            Family::Wide => "qmv_wide",
            Family::FastStreamed => "qmv_fast_streamed",
            Family::QmvStreamed => "qmv_streamed",
        }
    }
    /// The M == 1 family whose summation order a streamed family keeps.
    pub fn base(self) -> Family {
        match self {
            Family::FastStreamed => Family::Fast,
            Family::QmvStreamed => Family::Qmv,
            f => f,
        }
    }
    fn launcher(self) -> &'static str {
        match self {
            Family::Quad => "launch_quad",
            Family::Fast => "launch_fast",
            Family::Qmv => "launch_qmv",
            Family::Wide => "launch_wide",
            Family::FastStreamed => "launch_fast_streamed",
            Family::QmvStreamed => "launch_qmv_streamed",
        }
    }
}

/// One kernel instantiation: family, element type (MLX's type string),
/// group size, bits and the extra template arguments (D for quad; V and
/// k_lanes for wide; V for streamed).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Instance {
    pub family: Family,
    pub ty: String,
    pub gs: i64,
    pub bits: i64,
    pub extra: Vec<i64>,
}

impl Instance {
    pub fn key(&self) -> String {
        let mut k = format!(
            "{}/{}/{}/{}",
            self.family.name(),
            self.ty,
            self.gs,
            self.bits
        );
        for e in &self.extra {
            k.push_str(&format!("/{e}"));
        }
        k
    }
    fn cpp_type(&self) -> Result<&'static str> {
        Ok(match self.ty.as_str() {
            "float32" => "float",
            "float16" => "half",
            "bfloat16" => "bfloat16_t",
            t => return Err(Error::Source(format!("unsupported type {t}"))),
        })
    }
    fn launcher(&self) -> Result<String> {
        let mut args = format!("{}, {}, {}", self.cpp_type()?, self.gs, self.bits);
        for e in &self.extra {
            args.push_str(&format!(", {e}"));
        }
        Ok(format!("&{}<{args}>", self.family.launcher()))
    }
}

/// The dispatch unit: MLX's host dispatch code over the recording shim.
pub fn dispatch_unit(files: &TreeFiles) -> Result<String> {
    let types = files.host_type_headers();
    let scope = extract::Scope {
        search: extract::HOST_SEARCH,
        types: &types,
        namespace: "mlx::core",
    };
    let e = extract::extract_in(files, &scope, HOST_ROOTS, &[], HOST_SHIMMED)?;
    Ok(format!(
        "// generated by metal-sim from the {label} tree\n#define MSIM_TREE \"{label}\"\n\
         #include \"host_shim.h\"\nnamespace mlx::core {{\n{code}}} // namespace mlx::core\n\
         #line 1 \"metal-sim-dispatch\"\n#include \"dispatch_main.cpp\"\n",
        label = files.label,
        code = e.code
    ))
}

/// Extracts the kernel code (and the streamed variants when present).
pub fn kernel_code(files: &TreeFiles) -> Result<Extracted> {
    extract::extract(
        files,
        &[extract::KERNEL_HEADER],
        KERNEL_ROOTS,
        STREAMED,
        KERNEL_SHIMMED,
    )
}

/// The kernel unit: extracted kernels, our driver, and a launcher per
/// instance.
pub fn kernel_unit(files: &TreeFiles, code: &Extracted, instances: &[Instance]) -> Result<String> {
    let mut s = format!(
        "// generated by metal-sim from the {label} tree\n#define MSIM_TREE \"{label}\"\n\
         #include \"simt.h\"\nusing namespace metal;\n{code}\n#line 1 \"metal-sim-kernels\"\n",
        label = files.label,
        code = code.code
    );
    for f in &code.optional_found {
        s.push_str(&format!("#define MSIM_HAVE_{f} 1\n"));
    }
    s.push_str("#include \"kernels_main.cpp\"\nnamespace msim_harness {\n");
    for (fam, entry) in [
        (Family::FastStreamed, STREAMED[0]),
        (Family::QmvStreamed, STREAMED[1]),
    ] {
        if code.optional_found.iter().any(|f| f == entry) {
            s.push_str(&streamed_launcher(fam.launcher(), entry));
        }
    }
    s.push_str("const Entry kEntries[] = {\n");
    for i in instances {
        s.push_str(&format!("  {{\"{}\", {}}},\n", i.key(), i.launcher()?));
    }
    s.push_str(&format!(
        "  {{nullptr, nullptr}}}};\nconst size_t kNumEntries = {};\n}} // namespace msim_harness\n",
        instances.len()
    ));
    Ok(s)
}

/// A launcher for a streamed [[kernel]] entry: the affine_qmv buffer list
/// with the vector count M after out_vec_size, unbatched.
fn streamed_launcher(name: &str, entry: &str) -> String {
    format!(
        "template <class T, int gs, int bits, int V>\n\
         std::string {name}(const Ctx& c) {{\n\
         \x20 int zero = 0;\n\
         \x20 return launch_each<T>(c, [&](Io<T>& io, const msim::Ids& id) {{\n\
         \x20   {entry}<T, gs, bits, V, false>(c.w, io.s, io.b, io.x, io.y, io.K, io.N, io.M, zero,\n\
         \x20       nullptr, nullptr, zero, nullptr, nullptr, nullptr, nullptr, id.tg,\n\
         \x20       id.simd_gid, id.simd_lid);\n\
         \x20 }});\n\
         }}\n"
    )
}

/// How a failed compile is reported: the program a failed start names, and how many lines of
/// diagnostics are kept.
pub(crate) struct Report<'a> {
    pub program: &'a str,
    pub lines: usize,
}

/// ggml's and the SDPA's compiles.
pub(crate) const THE_COMPILER: Report<'static> = Report {
    program: "the compiler",
    lines: 60,
};

/// Runs a compiler command (stdin closed) whose unit is `unit`: the first `report.lines` lines of
/// its diagnostics when it fails.
pub(crate) fn run_compiler(mut c: Command, unit: &Path, report: Report<'_>) -> Result<()> {
    let out = c
        .stdin(Stdio::null())
        .output()
        .map_err(Error::spawn(report.program))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let head: String = err
            .lines()
            .take(report.lines)
            .collect::<Vec<_>>()
            .join("\n");
        return Err(Error::Compile {
            unit: unit.to_path_buf(),
            diagnostics: head,
        });
    }
    Ok(())
}

/// Writes `text` to `path`, naming the path on failure.
pub(crate) fn write(path: &Path, text: impl AsRef<[u8]>) -> Result<()> {
    std::fs::write(path, text).map_err(Error::io("writing", path))
}

/// An error about the tree's source the emulation cannot read.
pub(crate) fn source(msg: impl Into<String>) -> Error {
    Error::Source(msg.into())
}

/// The first `bytes` bytes of a SHA-256 digest in lowercase hex (cache keys, output hashes).
pub fn short_hex(digest: sha2::digest::Output<Sha256>, bytes: usize) -> String {
    let mut hex = format!("{digest:x}");
    hex.truncate(2 * bytes);
    hex
}

pub struct Compiler {
    cxx: String,
    version: String,
    cache: PathBuf,
}

/// A compiled binary and how long getting it took.
#[derive(Clone, Debug)]
pub struct Binary {
    pub path: PathBuf,
    pub cached: bool,
    pub seconds: f64,
}

impl Compiler {
    /// `$CXX`, else `c++`, else `g++`; binaries go under `cache`.
    pub fn detect(cache: &Path) -> Result<Compiler> {
        let mut candidates = Vec::new();
        if let Ok(c) = std::env::var("CXX")
            && !c.is_empty()
        {
            candidates.push(c);
        }
        candidates.push("c++".into());
        candidates.push("g++".into());
        let sh = Shell::new().map_err(|_| Error::NoCompiler)?;
        for cxx in candidates {
            // Err: it did not start, or it exited non-zero.
            if let Ok(out) = cmd!(sh, "{cxx} --version").quiet().output() {
                return Ok(Compiler {
                    cxx,
                    version: String::from_utf8_lossy(&out.stdout).into_owned(),
                    cache: cache.to_path_buf(),
                });
            }
        }
        Err(Error::NoCompiler)
    }

    pub fn version(&self) -> &str {
        self.version.lines().next().unwrap_or("")
    }

    /// The compiler command, for checks that run it with their own flags.
    pub fn command(&self) -> Command {
        // std, not xshell: callers map a failed start to Error::Spawn, which keeps the io::Error.
        let mut c = Command::new(&self.cxx);
        c.stdin(Stdio::null());
        c
    }

    /// A cache directory named by `parts`, the compiler and its version.
    pub fn cache_dir(&self, parts: &[&[u8]]) -> PathBuf {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p);
        }
        h.update(self.cxx.as_bytes());
        h.update(self.version.as_bytes());
        self.cache.join(short_hex(h.finalize(), 12))
    }

    /// The binary `sim` of the cache folder keyed by `parts`, `sources` ([`COMMON`] first), the
    /// compiler and its version, and whether it was there. Otherwise `make` builds it in a fresh
    /// work folder that holds the sources already (it writes the rest and compiles `sim` there),
    /// published with one rename: a concurrent run sees no binary or a whole one, and if another
    /// attempt won, its identical result stays. A failed `make` leaves its folder for inspection
    /// (the next attempt uses a fresh one).
    pub fn cached_build(
        &self,
        parts: &[&[u8]],
        sources: &[(&str, &str)],
        make: impl FnOnce(&Path) -> Result<()>,
    ) -> Result<(PathBuf, bool)> {
        let mut keyed = parts.to_vec();
        for (name, text) in COMMON.iter().chain(sources) {
            keyed.push(name.as_bytes());
            keyed.push(text.as_bytes());
        }
        let dir = self.cache_dir(&keyed);
        let bin = dir.join("sim");
        if bin.is_file() {
            return Ok((bin, true));
        }
        // Threads of one test binary, or several processes, may build the same key at once.
        static ATTEMPT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = ATTEMPT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut work = dir.clone().into_os_string();
        work.push(format!(".tmp{}-{n}", std::process::id()));
        let work = PathBuf::from(work);
        let _ = std::fs::remove_dir_all(&work);
        std::fs::create_dir_all(&work).map_err(Error::io("creating", &work))?;
        for (name, text) in COMMON.iter().chain(sources) {
            let path = work.join(name);
            std::fs::write(&path, text).map_err(Error::io("writing", path))?;
        }
        make(&work)?;
        if std::fs::rename(&work, &dir).is_err() {
            if !bin.is_file() {
                // A leftover without a binary (an interrupted older run): replace it.
                let _ = std::fs::remove_dir_all(&dir);
                let _ = std::fs::rename(&work, &dir);
            }
            let _ = std::fs::remove_dir_all(&work);
        }
        if !bin.is_file() {
            return Err(Error::BinaryVanished(bin));
        }
        Ok((bin, false))
    }

    /// Compiles `unit`; the cache key covers the unit, our sources, the flags
    /// and the compiler, so a changed tree or shim never reuses a binary.
    pub fn build(&self, unit: &str, extra_flags: &[String]) -> Result<Binary> {
        let t0 = Instant::now();
        let mut flags: Vec<String> = [
            "-std=c++20",
            "-O1",
            // qdot reads packed bytes through a uint16_t pointer.
            "-fno-strict-aliasing",
            // [[thread_position_in_grid]] and friends are unknown to g++.
            "-Wno-attributes",
            "-Wno-unknown-pragmas",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        flags.extend_from_slice(extra_flags);
        let joined = flags.join(" ");
        let parts: [&[u8]; 2] = [unit.as_bytes(), joined.as_bytes()];
        let (path, cached) = self.cached_build(&parts, SOURCES, |work| {
            let path = work.join("unit.cpp");
            std::fs::write(&path, unit).map_err(Error::io("writing", &path))?;
            let mut c = self.command();
            c.args(&flags)
                .arg("-I")
                .arg(work)
                .arg("-o")
                .arg(work.join("sim"))
                .arg(&path)
                .arg("-pthread");
            let report = Report {
                program: &self.cxx,
                lines: 40,
            };
            run_compiler(c, &path, report)
        })?;
        Ok(Binary {
            path,
            cached,
            seconds: t0.elapsed().as_secs_f64(),
        })
    }
}

/// Feeds `lines` to `bin` and parses one JSON object per output line as a
/// `T` (a missing or ill-typed field is an [`Error::Protocol`] naming it).
pub fn run_lines<T: DeserializeOwned>(bin: &Path, lines: &[String]) -> Result<Vec<T>> {
    run_lines_env(bin, lines, &[])
}

/// [`run_lines`] with extra environment variables (the dispatch binary reads
/// MLX's environment knobs through the shim's `env::get_var`).
pub fn run_lines_env<T: DeserializeOwned>(
    bin: &Path,
    lines: &[String],
    env: &[(&str, &str)],
) -> Result<Vec<T>> {
    // std, not xshell: a failed start and a failed write of the cases keep their own io::Error.
    let mut child = Command::new(bin)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(Error::spawn(bin.display()))?;
    let mut stdin = child.stdin.take().expect("stdin is piped");
    let input = lines.join("\n") + "\n";
    let writer = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child
        .wait_with_output()
        .map_err(Error::spawn(bin.display()))?;
    writer
        .join()
        .expect("the writer thread does not panic")
        .map_err(Error::spawn(format!("{} (writing cases)", bin.display())))?;
    if !out.status.success() {
        return Err(Error::BinaryFailed {
            bin: bin.to_path_buf(),
            status: out.status,
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    let protocol = |reason: String, line: &str| Error::Protocol {
        bin: bin.to_path_buf(),
        reason,
        line: line.to_string(),
    };
    let text = String::from_utf8(out.stdout)
        .map_err(|e| protocol("not UTF-8".into(), &String::from_utf8_lossy(e.as_bytes())))?;
    let vals = text
        .lines()
        .map(|l| serde_json::from_str(l).map_err(|e| protocol(e.to_string(), l)))
        .collect::<Result<Vec<T>>>()?;
    if vals.len() != lines.len() {
        return Err(Error::ShortAnswer {
            bin: bin.to_path_buf(),
            got: vals.len(),
            want: lines.len(),
        });
    }
    Ok(vals)
}
