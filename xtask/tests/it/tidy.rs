//! The docs stay true to the tree: every path README.md and docs/ name in backticks, when it
//! starts at a top-level entry of the workspace (`crates/...`, `cuda/...`, `docs/...`), exists.
//! A moved or deleted file leaves the map stale otherwise (ARCHITECTURE.md named
//! `xtask/src/fuzz.rs` long after the file moved to `crates/mlx-tasks/src/fuzz.rs`).
//! And the libraries that promise to print nothing (the engine, the build driver) do not.
//! And no product function takes more than 7 parameters, and the engine's top-level modules use
//! each other in no cycle.

use std::collections::{BTreeMap, BTreeSet};
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
/// A function starts at a line [`fn_start`] reads as one, and ends at the first line that is its
/// indentation followed by `}`.
fn long_functions(text: &str, max: usize) -> Vec<(usize, String, usize)> {
    let product = text.split("\n#[cfg(test)]").next().unwrap_or("");
    let lines: Vec<&str> = product.lines().collect();
    let mut out = Vec::new();
    for (i, l) in lines.iter().enumerate() {
        let indent = &l[..l.len() - l.trim_start().len()];
        let Some(name) = fn_start(l) else { continue };
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|x| x.trim_end() == close)
            && end + 1 > max
        {
            out.push((i + 1, name.to_string(), end + 1));
        }
    }
    out
}

/// The product sources: the crates' sources and build scripts, xtask's and the examples'; tests,
/// fuzz targets and build output left out.
fn product_sources(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for dir in ["crates", "xtask/src", "examples"] {
        files_with_ext(&root.join(dir), "rs", &mut files);
    }
    files.retain(|f| {
        let rel = f.strip_prefix(root).unwrap().to_string_lossy().into_owned();
        !rel.contains("/tests/") && !rel.contains("/fuzz/") && !rel.contains("/target/")
    });
    files
}

/// No product function is longer than a screen or two (issue 28: "no non-test function over 100
/// lines"): the crates' sources, build scripts and xtask, tests left out.
#[test]
fn no_product_function_is_over_100_lines() {
    let root = workspace();
    let files = product_sources(&root);
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

/// The name of the function `line` starts, when its first word (after `pub`, `pub(crate)`,
/// `const`, `async`, `unsafe`) is `fn` and it is not a declaration without a body.
fn fn_start(line: &str) -> Option<&str> {
    let mut words = line.split_whitespace().peekable();
    while words
        .peek()
        .is_some_and(|w| ["pub", "const", "async", "unsafe"].contains(w) || w.starts_with("pub("))
    {
        words.next();
    }
    if words.next() != Some("fn") || line.trim_end().ends_with(';') {
        return None;
    }
    words.next()?.split(['(', '<']).next()
}

/// The number of parameters of the function whose signature starts `sig` (`self` counted, as
/// clippy counts it): the top-level commas of the first parenthesised list after `fn` and its
/// generics, `->` read as no bracket, `//` comments left out. `None` when the list does not close.
fn param_count(sig: &str) -> Option<usize> {
    let sig: String = sig
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
        .replace("->", "  ");
    let after = &sig[sig.find("fn ")? + 3..];
    let (mut depth, mut started, mut params, mut nonempty) = (0usize, false, 0, false);
    for c in after.chars() {
        match c {
            '(' if !started && depth == 0 => {
                started = true;
                depth = 1;
                continue;
            }
            '(' | '[' | '{' | '<' => depth += 1,
            ')' | ']' | '}' | '>' => {
                depth = depth.checked_sub(1)?;
                if started && depth == 0 {
                    return Some(params + usize::from(nonempty));
                }
            }
            ',' if started && depth == 1 => {
                params += usize::from(nonempty);
                nonempty = false;
                continue;
            }
            _ => {}
        }
        nonempty |= started && !c.is_whitespace();
    }
    None
}

/// The functions of `text` before its tests: how many there are, and those with more than `max`
/// parameters: (line, name, count).
fn wide_functions(text: &str, max: usize) -> (usize, Vec<(usize, String, usize)>) {
    let product = text.split("\n#[cfg(test)]").next().unwrap_or("");
    let lines: Vec<&str> = product.lines().collect();
    let (mut seen, mut out) = (0, Vec::new());
    for (i, l) in lines.iter().enumerate() {
        let Some(name) = fn_start(l) else { continue };
        seen += 1;
        let sig = lines[i..].join("\n");
        let n = param_count(&sig).unwrap_or_else(|| panic!("fn {name} at line {}", i + 1));
        if n > max {
            out.push((i + 1, name.to_string(), n));
        }
    }
    (seen, out)
}

/// No product function takes more than 7 parameters (issue 28): past that, they are grouped into
/// a struct (an `Options`, a context) with named fields. Tests left out, as for the length.
#[test]
fn no_product_function_has_over_7_parameters() {
    let root = workspace();
    let files = product_sources(&root);
    let (mut seen, mut found) = (0, Vec::new());
    for f in &files {
        let text = std::fs::read_to_string(f).unwrap();
        let (n, wide) = wide_functions(&text, 7);
        seen += n;
        for (line, name, count) in wide {
            let rel = f.strip_prefix(&root).unwrap().display();
            found.push(format!("{rel}:{line}: fn {name} has {count} parameters"));
        }
    }
    // Not vacuous: many functions were read, and a wide one is caught (generics, closures' types,
    // `->` and nested brackets are not parameters; a test's is left out).
    assert!(seen > 1000, "only {seen} functions");
    let sample = "pub fn wide<'a, T: Fn(u8, u8) -> u8>(\n    &self,\n    a: T, // one, two\n    b: &BTreeMap<u8, (u8, u8)>,\n    c: [u8; 2], d: u8, e: u8, f: u8, g: u8,\n) -> Vec<(u8, u8)> {\n}\nfn narrow(a: Vec<(u8, u8)>, f: impl FnMut(&str) -> bool) {}\nfn none() {}\n#[cfg(test)]\nfn t(a: u8, b: u8, c: u8, d: u8, e: u8, f: u8, g: u8, h: u8) {}\n";
    assert_eq!(
        wide_functions(sample, 7),
        (3, vec![(1, "wide".to_string(), 8)])
    );
    assert_eq!(wide_functions(sample, 8), (3, vec![]));
    assert!(
        found.is_empty(),
        "functions over 7 parameters:\n{}",
        found.join("\n")
    );
}

/// The top-level modules `text`'s product code (tests and `//` comments left out) names through
/// `crate::`: `crate::x::…` and each first name of a `use crate::{x, y::{…}}` group.
fn crate_refs(text: &str) -> BTreeSet<String> {
    let product = text.split("\n#[cfg(test)]").next().unwrap_or("");
    let code: Vec<&str> = product
        .lines()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect();
    let code = code.join("\n");
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        let Some(group) = rest.strip_prefix('{') else {
            out.insert(ident(rest));
            continue;
        };
        let (mut depth, mut start) = (1, true);
        for (i, c) in group.char_indices() {
            match c {
                '{' => depth += 1,
                '}' if depth == 1 => break,
                '}' => depth -= 1,
                ',' if depth == 1 => start = true,
                c if c.is_whitespace() => {}
                _ if start => {
                    out.insert(ident(&group[i..]));
                    start = false;
                }
                _ => {}
            }
        }
    }
    out.retain(|m| m.starts_with(|c: char| c.is_ascii_lowercase()));
    out
}

/// The engine's top-level modules (each file or folder of `src` but `lib.rs`, a folder with
/// every file in it), each with the others it names.
fn engine_module_graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph = BTreeMap::new();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_stem().unwrap().to_string_lossy().into_owned();
        let mut files = Vec::new();
        if p.is_dir() {
            files_with_ext(&p, "rs", &mut files);
        } else if p.extension().is_some_and(|x| x == "rs") && name != "lib" {
            files.push(p.clone());
        }
        let mut refs = BTreeSet::new();
        for f in &files {
            refs.extend(crate_refs(&std::fs::read_to_string(f).unwrap()));
        }
        refs.remove(&name);
        if !files.is_empty() {
            graph.insert(name, refs);
        }
    }
    let names: BTreeSet<String> = graph.keys().cloned().collect();
    for refs in graph.values_mut() {
        refs.retain(|r| names.contains(r));
    }
    graph
}

/// A cycle of `graph` (its modules in order, the first one again at the end), if there is one.
fn module_cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        graph: &BTreeMap<String, BTreeSet<String>>,
        m: &str,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == m) {
            let mut cycle = path[i..].to_vec();
            cycle.push(m.to_string());
            return Some(cycle);
        }
        if done.contains(m) {
            return None;
        }
        path.push(m.to_string());
        for next in graph.get(m).into_iter().flatten() {
            if let Some(c) = visit(graph, next, path, done) {
                return Some(c);
            }
        }
        path.pop();
        done.insert(m.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(graph, m, &mut Vec::new(), &mut done))
}

/// The engine's top-level modules form no cycle (issue 28): one that uses another is never used
/// by it, directly or through others, so each can be read (and moved) knowing only those below.
#[test]
fn the_engines_top_level_modules_form_no_cycle() {
    let graph = engine_module_graph(&workspace().join("crates/overlay/src"));
    // Not vacuous: the modules and their uses were read, and a cycle is found.
    let edges: usize = graph.values().map(BTreeSet::len).sum();
    assert!(
        graph.len() > 15 && edges > 25,
        "{} modules, {edges} uses",
        graph.len()
    );
    assert!(graph["bump"].contains("tree") && graph["tree"].contains("patch"));
    let sample = "use crate::{a::{self, X}, b};\nfn f() {\n    crate::c::g(); // crate::d\n    my_crate::e();\n}\n#[cfg(test)]\nuse crate::f;\n";
    let refs: Vec<String> = crate_refs(sample).into_iter().collect();
    assert_eq!(refs, ["a", "b", "c"]);
    let set = |s: &[&str]| s.iter().map(|x| x.to_string()).collect::<BTreeSet<_>>();
    let mut bad = BTreeMap::from([
        ("a".to_string(), set(&["b"])),
        ("b".to_string(), set(&["c"])),
        ("c".to_string(), set(&[])),
    ]);
    assert_eq!(module_cycle(&bad), None);
    bad.insert("c".to_string(), set(&["a"]));
    assert_eq!(module_cycle(&bad).unwrap(), ["a", "b", "c", "a"]);
    if let Some(cycle) = module_cycle(&graph) {
        panic!(
            "the engine's top-level modules use each other in a cycle: {}",
            cycle.join(" -> ")
        );
    }
}
