//! The docs stay true to the tree: every path README.md and docs/ name in backticks, when it
//! starts at a top-level entry of the workspace (`crates/...`, `cuda/...`, `docs/...`), exists.
//! A moved or deleted file leaves the map stale otherwise (ARCHITECTURE.md named
//! `xtask/src/fuzz.rs` long after the file moved to `crates/mlx-tasks/src/fuzz.rs`).
//! And the libraries that promise to print nothing (the engine, the build driver) do not.

use std::path::{Path, PathBuf};

use crate::fixture::workspace;

/// The files under `dir` whose extension is `ext`.
fn files_with_ext(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            files_with_ext(&p, ext, out);
        } else if p.extension().is_some_and(|x| x == ext) {
            out.push(p);
        }
    }
}

/// The backticked spans of `text` that read as paths from the workspace's top: `a/b[/c...]`,
/// plain file-name characters only, whose first part is one of `tops`.
fn named_paths<'a>(text: &'a str, tops: &[String]) -> Vec<&'a str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "_.-/".contains(c);
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| t.contains('/') && t.chars().all(plain))
        .filter(|t| !t.starts_with('/') && !t.contains("//"))
        .filter(|t| {
            tops.iter()
                .any(|top| t.split('/').next() == Some(top.as_str()))
        })
        .collect()
}

/// Whether git ignores `name` in `root` (a local folder like `.gpu/` is no part of the tree the
/// docs describe).
fn git_ignores(root: &Path, name: &str) -> bool {
    std::process::Command::new("git")
        .args(["check-ignore", "-q", name])
        .current_dir(root)
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn every_path_the_docs_name_exists() {
    let root = workspace();
    let tops: Vec<String> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.starts_with("target") && n != ".git" && !git_ignores(&root, n))
        .collect();
    let mut docs = vec![root.join("README.md")];
    files_with_ext(&root.join("docs"), "md", &mut docs);
    let (mut checked, mut stale) = (0, Vec::new());
    for doc in &docs {
        let text = std::fs::read_to_string(doc).unwrap();
        for p in named_paths(&text, &tops) {
            checked += 1;
            if !root.join(p).exists() {
                stale.push(format!(
                    "{}: `{p}`",
                    doc.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    // Not vacuous: the docs name many paths, and a missing one is caught.
    assert!(checked > 50, "only {checked} paths found in the docs");
    assert_eq!(
        named_paths("see `crates/nope/x.rs` and `target/apply/up`", &tops),
        ["crates/nope/x.rs"]
    );
    assert!(
        stale.is_empty(),
        "stale paths in the docs:\n{}",
        stale.join("\n")
    );
}

/// The lines of `text` before its tests (`#[cfg(test)]`) that call a print macro.
fn print_calls(text: &str) -> Vec<(usize, &str)> {
    let product = text.split("#[cfg(test)]").next().unwrap_or("");
    let prints = ["println!(", "eprintln!(", "print!(", "eprint!(", "dbg!("];
    product
        .lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| prints.iter().any(|m| l.contains(m)))
        .map(|(i, l)| (i + 1, l.trim()))
        .collect()
}

#[test]
fn the_engine_and_the_build_driver_print_nothing() {
    let root = workspace();
    let mut files = Vec::new();
    let crates = [
        "crates/overlay/src",
        "crates/build-pipeline/src",
        "crates/mlx-build/src",
    ];
    for krate in crates {
        let before = files.len();
        files_with_ext(&root.join(krate), "rs", &mut files);
        assert!(files.len() > before, "no Rust file under {krate}");
    }
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, call) in print_calls(&text) {
            let rel = f.strip_prefix(&root).unwrap().display();
            found.push(format!("{rel}:{line}: {call}"));
        }
    }
    // Not vacuous: there are files, and a print outside the tests is caught (inside them not).
    assert!(files.len() > 20, "only {} files", files.len());
    let sample =
        "fn f() {\n    eprintln!(\"x\");\n}\n#[cfg(test)]\nmod t { fn g() { println!(); } }\n";
    assert_eq!(print_calls(sample), [(2, "eprintln!(\"x\");")]);
    assert!(
        found.is_empty(),
        "the engine, the build pipeline and the MLX recipe report through callbacks and return \
         values; these print:\n{}",
        found.join("\n")
    );
}

/// The first `cargo xtask` compiles the tool for minutes: the alias shows cargo's progress (no
/// `--quiet`, which left the screen blank all that time), and README gives that compile's time
/// apart from MLX's own build (issue 29, part 3).
#[test]
fn the_first_cargo_xtask_shows_the_tool_compiling() {
    let root = workspace();
    let config = std::fs::read_to_string(root.join(".cargo/config.toml")).unwrap();
    let alias = config
        .lines()
        .find(|l| l.starts_with("xtask ="))
        .expect("the xtask alias");
    let words: Vec<&str> = alias
        .split(|c: char| c.is_whitespace() || c == '"')
        .collect();
    assert!(
        !words.contains(&"--quiet") && !words.contains(&"-q"),
        "{alias}"
    );
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(
        readme.contains("The first `cargo xtask` compiles the tool itself"),
        "README does not say how long the tool's own compile takes"
    );
}

/// The `crate-graph` block of ARCHITECTURE.md as `name (folder) -> deps` lines, sorted.
fn documented_graph(doc: &str) -> Vec<String> {
    let block = doc
        .split("```crate-graph\n")
        .nth(1)
        .and_then(|rest| rest.split("```").next())
        .expect("ARCHITECTURE.md has a ```crate-graph block");
    let mut lines: Vec<String> = block
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.split_whitespace().collect::<Vec<_>>().join(" "))
        .collect();
    lines.sort();
    lines
}

/// The workspace's packages as `cargo metadata` has them, in the block's form: each package, its
/// folder from the workspace root, and its workspace dependencies (normal and build), sorted.
fn metadata_graph(root: &Path) -> Vec<String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--no-deps",
            "--offline",
        ])
        .current_dir(root)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut lines: Vec<String> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| graph_line(root, p))
        .collect();
    lines.sort();
    lines
}

/// One package of `cargo metadata` as a `crate-graph` line.
fn graph_line(root: &Path, p: &serde_json::Value) -> String {
    let manifest = Path::new(p["manifest_path"].as_str().unwrap());
    let dir = manifest.parent().unwrap().strip_prefix(root).unwrap();
    let mut deps: Vec<&str> = p["dependencies"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["path"].is_string() && d["kind"].as_str() != Some("dev"))
        .map(|d| d["name"].as_str().unwrap())
        .collect();
    deps.sort();
    deps.dedup();
    let arrow = format!("{} ({}) ->", p["name"].as_str().unwrap(), dir.display());
    if deps.is_empty() {
        arrow
    } else {
        format!("{arrow} {}", deps.join(", "))
    }
}

/// ARCHITECTURE.md's map of crates is the workspace's (issue 28, part 4): its `crate-graph` block
/// lists every package, its folder and its arrows exactly as `cargo metadata` does, and each
/// folder is named in the code map.
#[test]
fn the_architecture_map_matches_cargo_metadata() {
    let root = workspace();
    let doc = std::fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let (documented, actual) = (documented_graph(&doc), metadata_graph(&root));
    // Not vacuous: the workspace has its crates, and a re-wired one is caught.
    assert!(actual.len() >= 8, "{actual:?}");
    let rewired = doc.replace(
        "mlx-sys (crates/mlx-sys) -> mlx-build-info",
        "mlx-sys (crates/mlx-sys) ->",
    );
    assert_ne!(
        documented_graph(&rewired),
        actual,
        "a changed arrow must be caught"
    );
    assert_eq!(
        documented.join("\n"),
        actual.join("\n"),
        "docs/ARCHITECTURE.md's crate-graph block (left) is not the workspace's (right)"
    );
    let code_map = doc.split("## Code map").nth(1).unwrap();
    for line in &actual {
        let dir = line.split(['(', ')']).nth(1).unwrap();
        assert!(
            code_map.contains(&format!("`{dir}`")) || code_map.contains(&format!("`{dir}/`")),
            "docs/ARCHITECTURE.md's code map does not name `{dir}`"
        );
    }
}

/// The lines of `text` outside comments that write the tool's command line (`cargo xtask`).
fn tool_name_literals(text: &str) -> Vec<(usize, &str)> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim_start().starts_with("//"))
        .filter(|(_, l)| l.contains("cargo xtask"))
        .map(|(i, l)| (i + 1, l.trim()))
        .collect()
}

/// The engine names the commands to run next as typed steps (`overlay::help::NextStep`); the CLI
/// writes them with its program's name and the run's flags. A literal `cargo xtask` in the
/// engine's code would be a command line the CLI cannot complete (issue 28).
#[test]
fn the_engine_never_writes_the_tools_name() {
    let root = workspace();
    let mut files = Vec::new();
    files_with_ext(&root.join("crates/overlay/src"), "rs", &mut files);
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, code) in tool_name_literals(&text) {
            let rel = f.strip_prefix(&root).unwrap().display();
            found.push(format!("{rel}:{line}: {code}"));
        }
    }
    // Not vacuous: there are files, and a literal in code is caught (in a comment not).
    assert!(files.len() > 20, "only {} files", files.len());
    let sample = "/// Run `cargo xtask check`.\nfn f() -> &'static str {\n    \"`cargo xtask check` shows it\" // cargo xtask\n}\n";
    assert_eq!(
        tool_name_literals(sample),
        [(3, "\"`cargo xtask check` shows it\" // cargo xtask")]
    );
    assert!(
        found.is_empty(),
        "the engine names next steps with `NextStep`, never the tool's command line:\n{}",
        found.join("\n")
    );
}

/// The functions of `text` before its tests that span more than `max` lines: (line, name, length).
/// A function starts at a line whose first word (after `pub`, `pub(crate)`, `const`, `async`,
/// `unsafe`) is `fn`, and ends at the first line that is its indentation followed by `}`.
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let product = text.split("\n#[cfg(test)]").next().unwrap_or("");
    let lines: Vec<&str> = product.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let indent = &l[..l.len() - l.trim_start().len()];
        let mut words = l.split_whitespace().peekable();
        while words.peek().is_some_and(|w| {
            ["pub", "const", "async", "unsafe"].contains(w) || w.starts_with("pub(")
        }) {
            words.next();
        }
        if words.next() != Some("fn") || l.trim_end().ends_with(';') {
            continue;
        }
        let name = words
            .next()
            .unwrap_or("")
            .split(['(', '<'])
            .next()
            .unwrap_or("");
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|x| x.trim_end() == close)
            && end + 1 > max
        {
            out.push((i + 1, name.to_string(), end + 1));
        }
    }
    out
}

/// No product function is longer than a screen or two (issue 28: "no non-test function over 100
/// lines"): the crates' sources, build scripts and xtask, tests left out.
#[test]
fn no_product_function_is_over_100_lines() {
    let root = workspace();
    let mut files = Vec::new();
    for dir in ["crates", "xtask/src", "examples"] {
        files_with_ext(&root.join(dir), "rs", &mut files);
    }
    files.retain(|f| {
        let rel = f
            .strip_prefix(&root)
            .unwrap()
            .to_string_lossy()
            .into_owned();
        !rel.contains("/tests/") && !rel.contains("/fuzz/") && !rel.contains("/target/")
    });
    let mut found = Vec::new();
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        for (line, name, len) in long_functions(&text, 100) {
            let rel = f.strip_prefix(&root).unwrap().display();
            found.push(format!("{rel}:{line}: fn {name} is {len} lines"));
        }
    }
    // Not vacuous: there are files, and a long function is caught (a test's is not).
    assert!(files.len() > 50, "only {} files", files.len());
    let body = "    x();\n".repeat(100);
    let sample = format!(
        "pub(crate) fn long() {{\n{body}}}\nfn short() {{\n}}\n#[cfg(test)]\nfn t() {{\n{body}}}\n"
    );
    assert_eq!(long_functions(&sample, 100), [(1, "long".to_string(), 102)]);
    assert!(
        found.is_empty(),
        "functions over 100 lines:\n{}",
        found.join("\n")
    );
}
