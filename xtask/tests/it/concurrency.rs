//! Commands started at once, as real processes: on one project they take turns (the project lock),
//! on one build cache they take turns (the build directory's lock); nothing is corrupted, and a lock
//! whose holder was killed is no obstacle.

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::fixture::{Fixture, assert_same_tree, files_under};

fn numbered(n: usize, changed: Option<(usize, &str)>) -> String {
    (1..=n)
        .map(|i| match changed {
            Some((j, s)) if j == i => format!("{s}\n"),
            _ => format!("line {i}\n"),
        })
        .collect()
}

fn fixture() -> Fixture {
    let f = Fixture::new(&[("a.txt", &numbered(30, None)), ("b.txt", "b\n")]);
    f.add_overlay(
        "Change line 10",
        &[("a.txt", Some(&numbered(30, Some((10, "line TEN")))))],
        "Overlay-Kind: upstreamable",
    );
    f
}

/// Spawns `args` with stderr streamed line by line into the returned channel.
fn spawn(f: &Fixture, args: &[&str]) -> (Child, mpsc::Receiver<String>) {
    let mut child = f
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for l in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(l);
        }
    });
    (child, rx)
}

fn wait_for_line(rx: &mpsc::Receiver<String>, needle: &str) -> String {
    loop {
        match rx.recv_timeout(Duration::from_secs(60)) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(e) => panic!("no line containing {needle:?}: {e}"),
        }
    }
}

#[test]
fn a_writer_waits_for_the_lock_and_says_so() {
    let f = fixture();
    let dir = f.t().join("tree");
    // Hold the project lock as another command would.
    let held = std::fs::File::open(&f.root).unwrap();
    held.lock().unwrap();
    let (child, rx) = spawn(&f, &["apply", "--dir", dir.to_str().unwrap()]);
    let line = wait_for_line(&rx, "waiting for another command");
    assert!(line.contains("`apply`"), "{line}");
    assert!(!dir.exists(), "apply wrote while the lock was held");
    held.unlock().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success());
    assert_same_tree(&dir, &f.git_am_tree());
}

#[test]
fn readers_do_not_wait_for_readers() {
    let f = fixture();
    let held = std::fs::File::open(&f.root).unwrap();
    held.lock_shared().unwrap();
    let out = f.xtask(&["check"]).ok();
    assert!(!out.stderr.contains("waiting"), "{}", out.stderr);
}

#[test]
fn apply_and_bump_pin_started_together_take_turns() {
    let f = fixture();
    let old_pin = f.pin.clone();
    let new_pin = f.commit_upstream(&[("b.txt", "b upstream\n")], "upstream moves");
    let old_project = files_under(&f.root, &["target"]);
    let dir = f.t().join("tree");
    let am_old = f.git_am_tree_at(&old_pin);
    for round in 0..6 {
        std::fs::remove_dir_all(&f.root).unwrap();
        for (p, b) in &old_project {
            let path = f.root.join(p);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, b).unwrap();
        }
        let _ = std::fs::remove_dir_all(&dir);
        let (a, _ra) = spawn(&f, &["apply", "--dir", dir.to_str().unwrap()]);
        let (b, _rb) = spawn(&f, &["bump-pin", &new_pin]);
        let a = a.wait_with_output().unwrap();
        let b = b.wait_with_output().unwrap();
        assert!(a.status.success() && b.status.success(), "round {round}");
        let pins = f.read(f.root.join("pins.toml"));
        assert!(pins.contains(&new_pin), "round {round}: {pins}");
        // apply ran wholly before or wholly after the bump: its tree is one pin's, matching its state.
        let state = f.read(dir.join(".overlay-state.json"));
        if state.contains(&new_pin) {
            assert_same_tree(&dir, &f.git_am_tree_at(&new_pin));
        } else {
            assert!(state.contains(&old_pin), "round {round}: {state}");
            assert_same_tree(&dir, &am_old);
        }
        f.xtask(&["check"]).ok();
    }
}

#[test]
fn a_killed_lock_holder_leaves_no_stale_lock() {
    let f = fixture();
    let dir = f.t().join("tree");
    let d = dir.to_str().unwrap();
    f.xtask(&["apply", "--dir", d]).ok();
    std::fs::write(dir.join("a.txt"), numbered(30, Some((10, "line TEN!")))).unwrap();
    // Killed mid-commit while holding the lock (step 4: after the journal, among the temporaries).
    let out = f.xtask_env(
        &["refresh", "--dir", d],
        &[("OVERLAY_FAULT_KILL_AFTER", "4")],
    );
    assert_eq!(out.code, -1, "{}", out.stderr);
    let out = f.xtask(&["status"]).ok();
    assert!(!out.stderr.contains("waiting"), "{}", out.stderr);
    assert!(out.stderr.contains("recovered"), "{}", out.stderr);
    f.xtask(&["refresh", "--dir", d]).ok();
    f.xtask(&["check"]).ok();
}

/// A tiny CMake project standing in for MLX, so two real builds race in seconds.
fn cmake_fixture() -> Fixture {
    Fixture::new(&[
        (
            "CMakeLists.txt",
            "cmake_minimum_required(VERSION 3.25)\nproject(mlx CXX)\n\
             add_library(mlx STATIC mlx.cpp)\n\
             install(TARGETS mlx EXPORT MLXTargets ARCHIVE DESTINATION lib)\n\
             install(FILES mlx.h DESTINATION include/mlx)\n\
             install(EXPORT MLXTargets FILE MLXTargets.cmake DESTINATION share/cmake/MLX)\n",
        ),
        (
            "mlx.cpp",
            "#include \"mlx.h\"\nint mlx_answer() { return 42; }\n",
        ),
        ("mlx.h", "int mlx_answer();\n"),
    ])
}

#[test]
fn two_build_mlx_on_one_cache_take_turns() {
    let f = cmake_fixture();
    let (a, _ra) = spawn(&f, &["build-mlx", "--json"]);
    let (b, _rb) = spawn(&f, &["build-mlx", "--json"]);
    let outs = [a.wait_with_output().unwrap(), b.wait_with_output().unwrap()];
    let mut statuses = Vec::new();
    let mut libraries = Vec::new();
    for o in &outs {
        let stdout = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{stdout}\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        let v: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap();
        statuses.push(v["status"].as_str().unwrap().to_string());
        libraries.push(v["library"].as_str().unwrap().to_string());
    }
    statuses.sort();
    // One built; the other waited for it and found the published result.
    assert_eq!(statuses, ["built", "up-to-date"]);
    assert_eq!(libraries[0], libraries[1]);
    assert!(std::path::Path::new(&libraries[0]).is_file());
    let info = f.read(f.root.join("target/mlx/build-info.json"));
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["pin"].as_str().unwrap(), f.pin);
}
