//! `build-mlx --backend cuda --bundle`: the offline build a GPU machine without Rust receives.

use crate::fixture::Fixture;

/// A bundle holds the materialized tree (overlays applied), each pinned source at its commit
/// with only its `paths`, the CMake definitions naming them, and the project's cuda/ folder. A
/// `bench = true` source (a peer kernel the benchmarks build) is under deps/ and in bundle.json,
/// but no CMake definition names it.
#[test]
fn bundle_holds_the_patched_tree_and_the_pinned_sources() {
    let f = Fixture::new(&[
        ("src/lib.c", "int a;\nint b;\n"),
        ("CMakeLists.txt", "project(up)\n"),
    ]);
    f.add_overlay(
        "Make b wider",
        &[("src/lib.c", Some("int a;\nlong b;\n"))],
        "Overlay-Kind: upstreamable\nUpstream-Status: not-submitted\n",
    );
    // A source the build would fetch: a repository of its own, pinned at a commit.
    let dep = f.t().join("dep");
    std::fs::create_dir_all(dep.join("include")).unwrap();
    std::fs::create_dir_all(dep.join("docs")).unwrap();
    std::fs::write(dep.join("include/dep.h"), "#define DEP 1\n").unwrap();
    std::fs::write(dep.join("docs/big.md"), "not needed\n").unwrap();
    f.git(&dep, &["init", "-q"]);
    f.git(&dep, &["add", "-A"]);
    f.git(&dep, &["commit", "-q", "-m", "dep"]);
    std::fs::write(dep.join("include/dep.h"), "#define DEP 2\n").unwrap();
    let v1 = f.git(&dep, &["rev-parse", "HEAD"]);
    f.git(&dep, &["commit", "-q", "-am", "later"]);
    // Its submodule, pinned as a source of its own that only the test suites need: it fills
    // dep's ext/sub and gets no deps/ folder of its own.
    let sub = f.t().join("sub");
    std::fs::create_dir_all(sub.join("include")).unwrap();
    std::fs::write(sub.join("include/sub.h"), "#define SUB 1\n").unwrap();
    f.git(&sub, &["init", "-q"]);
    f.git(&sub, &["add", "-A"]);
    f.git(&sub, &["commit", "-q", "-m", "sub"]);
    let sub_rev = f.git(&sub, &["rev-parse", "HEAD"]);
    let peer = f.t().join("peer");
    std::fs::create_dir_all(peer.join("kernel")).unwrap();
    std::fs::write(peer.join("kernel/peer.cu"), "// peer\n").unwrap();
    std::fs::write(peer.join("setup.py"), "not needed\n").unwrap();
    f.git(&peer, &["init", "-q"]);
    f.git(&peer, &["add", "-A"]);
    f.git(&peer, &["commit", "-q", "-m", "peer"]);
    let peer_rev = f.git(&peer, &["rev-parse", "HEAD"]);
    let mut pins = std::fs::read_to_string(f.root.join("pins.toml")).unwrap();
    pins.push_str(&format!(
        "\n[upstream.up.sources.dep]\nurl = \"{}\"\nrev = \"{v1}\"\ntag = \"v1\"\npaths = [\"include\"]\nbackends = [\"cuda\"]\nsubmodules = {{ \"ext/sub\" = \"sub\" }}\n\n[upstream.up.sources.sub]\nurl = \"{}\"\nrev = \"{sub_rev}\"\ntests = true\n\n[upstream.up.sources.peer]\nurl = \"{}\"\nrev = \"{peer_rev}\"\npaths = [\"kernel/peer.cu\"]\nbackends = [\"cuda\"]\nbench = true\n",
        dep.display(),
        sub.display(),
        peer.display()
    ));
    std::fs::write(f.root.join("pins.toml"), pins).unwrap();
    std::fs::create_dir_all(f.root.join("cuda/bundle")).unwrap();
    std::fs::write(f.root.join("cuda/bundle/build.sh"), "echo build\n").unwrap();
    std::fs::create_dir_all(f.root.join("cuda/machine")).unwrap();
    std::fs::write(f.root.join("cuda/machine/session.sh"), "echo dev\n").unwrap();

    let archive = f.t().join("b.tar.gz");
    let out = f
        .xtask(&[
            "build-mlx",
            "--backend",
            "cuda",
            "--bundle",
            archive.to_str().unwrap(),
        ])
        .ok();
    assert!(out.stdout.contains("dep"), "{}", out.stdout);
    let b = f.unpack_bundle(&archive, "unpacked");
    assert_eq!(f.read(b.join("mlx/src/lib.c")), "int a;\nlong b;\n");
    assert_eq!(f.read(b.join("deps/dep/include/dep.h")), "#define DEP 1\n");
    assert!(!b.join("deps/dep/docs").exists());
    assert_eq!(
        f.read(b.join("deps/dep/ext/sub/include/sub.h")),
        "#define SUB 1\n"
    );
    assert!(
        !b.join("deps/sub").exists(),
        "a tests-only source is not in the bundle"
    );
    assert_eq!(f.read(b.join("deps/peer/kernel/peer.cu")), "// peer\n");
    assert!(!b.join("deps/peer/setup.py").exists());
    assert_eq!(f.read(b.join("cuda/bundle/build.sh")), "echo build\n");
    // What is particular to this project's GPU machine stays in the checkout.
    assert!(!b.join("cuda/machine").exists());
    let defines = f.read(b.join("cmake-defines.txt"));
    assert!(
        !defines.contains("PEER"),
        "a bench source is not MLX's: {defines}"
    );
    assert!(
        defines.contains("FETCHCONTENT_SOURCE_DIR_DEP=@BUNDLE@/deps/dep\n"),
        "{defines}"
    );
    assert!(defines.contains("MLX_BUILD_CUDA=ON\n"), "{defines}");
    let manifest: serde_json::Value = serde_json::from_str(&f.read(b.join("bundle.json"))).unwrap();
    assert_eq!(manifest["schema"], 1);
    assert_eq!(manifest["pin"], f.pin.as_str());
    assert_eq!(manifest["sources"][0]["rev"], v1.as_str());
    assert_eq!(manifest["sources"][0]["files"], 2);
    assert_eq!(manifest["sources"][1]["name"], "peer");
    assert_eq!(manifest["sources"][1]["rev"], peer_rev.as_str());
    assert_eq!(manifest["sources"].as_array().unwrap().len(), 2);
    let listed = serde_json::to_string(&manifest["cmake_defines"]).unwrap();
    assert!(!listed.contains("PEER"), "{listed}");
}

/// `--bundle` is for the CUDA backend; anything else is refused and writes nothing.
#[test]
fn bundle_needs_the_cuda_backend() {
    let f = Fixture::new(&[("src/lib.c", "int a;\n")]);
    let archive = f.t().join("b.tar.gz");
    let out = f
        .xtask(&[
            "build-mlx",
            "--backend",
            "cpu",
            "--bundle",
            archive.to_str().unwrap(),
        ])
        .code(2);
    assert!(out.stderr.contains("--backend cuda"), "{}", out.stderr);
    assert!(!archive.exists());
}

/// `--bundle-python` adds the pinned nanobind (its submodule filled) and the Python definitions;
/// without it neither is there. doctest (MLX's C++ tests), a tests-only source too, is in every
/// bundle that pins it, with MLX_BUILD_TESTS on: a user's CUDA build has the C++ tests.
#[test]
fn bundle_python_adds_nanobind_and_the_python_defines() {
    let f = Fixture::new(&[("src/lib.c", "int a;\n")]);
    let mut pins = std::fs::read_to_string(f.root.join("pins.toml")).unwrap();
    for (name, file, extra) in [
        (
            "nanobind",
            "src/nb.cpp",
            "submodules = { \"ext/robin_map\" = \"robin_map\" }\n",
        ),
        ("robin_map", "include/tsl.h", ""),
        ("doctest", "doctest/doctest.h", ""),
    ] {
        let dir = f.t().join(name);
        std::fs::create_dir_all(dir.join(file).parent().unwrap()).unwrap();
        std::fs::write(dir.join(file), format!("// {name}\n")).unwrap();
        f.git(&dir, &["init", "-q"]);
        f.git(&dir, &["add", "-A"]);
        f.git(&dir, &["commit", "-q", "-m", name]);
        let rev = f.git(&dir, &["rev-parse", "HEAD"]);
        pins.push_str(&format!(
            "\n[upstream.up.sources.{name}]\nurl = \"{}\"\nrev = \"{rev}\"\n{extra}tests = true\n",
            dir.display()
        ));
    }
    std::fs::write(f.root.join("pins.toml"), pins).unwrap();
    let with = f.t().join("with.tar.gz");
    let args = [
        "build-mlx",
        "--backend",
        "cuda",
        "--bundle",
        with.to_str().unwrap(),
    ];
    f.xtask(&[&args[..], &["--bundle-python"]].concat()).ok();
    let b = f.unpack_bundle(&with, "with");
    assert_eq!(f.read(b.join("deps/nanobind/src/nb.cpp")), "// nanobind\n");
    assert_eq!(
        f.read(b.join("deps/nanobind/ext/robin_map/include/tsl.h")),
        "// robin_map\n"
    );
    assert!(!b.join("deps/robin_map").exists());
    assert_eq!(
        f.read(b.join("deps/doctest/doctest/doctest.h")),
        "// doctest\n"
    );
    let py = f.read(b.join("cmake-defines-python.txt"));
    assert!(py.contains("MLX_BUILD_PYTHON_BINDINGS=ON\n"), "{py}");
    assert!(
        py.contains("FETCHCONTENT_SOURCE_DIR_NANOBIND=@BUNDLE@/deps/nanobind\n"),
        "{py}"
    );
    let main = f.read(b.join("cmake-defines.txt"));
    assert!(!main.contains("NANOBIND"), "{main}");
    assert!(main.contains("MLX_BUILD_TESTS=ON\n"), "{main}");
    assert!(
        main.contains("FETCHCONTENT_SOURCE_DIR_DOCTEST=@BUNDLE@/deps/doctest\n"),
        "{main}"
    );
    // No gguflib pinned here: GGUF stays off. The CPU backend is on, as in a user's CUDA build.
    assert!(main.contains("MLX_BUILD_GGUF=OFF\n"), "{main}");
    assert!(main.contains("MLX_BUILD_CPU=ON\n"), "{main}");

    let without = f.t().join("without.tar.gz");
    f.xtask(&[
        "build-mlx",
        "--backend",
        "cuda",
        "--bundle",
        without.to_str().unwrap(),
    ])
    .ok();
    let b = f.unpack_bundle(&without, "without");
    assert!(!b.join("deps/nanobind").exists());
    assert!(!b.join("cmake-defines-python.txt").exists());
}
