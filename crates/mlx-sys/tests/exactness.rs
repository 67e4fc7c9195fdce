//! The exactness probe through the bridge: bad options come back as errors naming the option,
//! and a small perturbed run reports a difference in every case (the full probe and its
//! promises run as `cargo xtask exactness` in `.ci/run`).

#[test]
fn unknown_or_malformed_options_are_errors() {
    let cases = [
        ("t_mx=3", "unknown option 't_mx=3'"),
        ("t_max=two", "t_max needs an integer"),
        ("preset=70b", "preset must be small or 7b"),
        ("cache=ring", "cache must be concat or step"),
        ("timing=-1;ops=0", "timing and repeat >= 0"),
        ("repeat=-1;ops=0", "timing and repeat >= 0"),
        ("taps=yes;ops=0", "taps needs an integer"),
        (
            "preset=small;q_heads=3;kv_heads=2;ops=0",
            "multiple of kv_heads",
        ),
    ];
    for (spec, message) in cases {
        let e = mlx_sys::exactness_probe(spec).unwrap_err();
        assert!(e.message().contains(message), "{spec}: {}", e.message());
    }
}

fn count(json: &str, needle: &str) -> usize {
    json.matches(needle).count()
}

#[test]
fn a_flipped_bit_is_reported_in_every_case_and_block() {
    let spec = "preset=small;layers=1;prompt=4;k_max=2;t_max=1;seeds=1;kv_lens=64;perturb=1";
    let json = mlx_sys::exactness_probe(spec).unwrap();
    let cases = count(&json, "\"op\":\"") - 1; // the decoder's first_diff names an op too
    assert!(cases >= 78, "{json}");
    assert_eq!(count(&json, "\"rows_differ\":0,"), 0, "{json}");
    assert!(json.contains("\"logit_rows_identical\":1,"), "{json}");
    // Unperturbed, the same tiny run finds every row identical.
    let clean = mlx_sys::exactness_probe(&spec.replace("perturb=1", "perturb=0")).unwrap();
    assert_eq!(count(&clean, "\"rows_differ\":0,"), cases, "{clean}");
}

fn field<'a>(json: &'a str, key: &str) -> &'a str {
    let start = json
        .find(key)
        .unwrap_or_else(|| panic!("no {key} in {json}"));
    let rest = &json[start..];
    &rest[..rest.find(']').unwrap() + 1]
}

/// The checkpoint mode loads what `exactness_write_checkpoint` wrote under mlx-lm's names and
/// decodes exactly as the seeded model it came from; a tensor the dims need and the file
/// lacks is an error naming it.
#[test]
fn a_written_checkpoint_decodes_as_its_seeded_model() {
    let dir = std::env::temp_dir().join(format!("mlx-sys-checkpoint-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("model.safetensors");
    let spec = "preset=small;layers=2;prompt=8;k_max=4;ops=0;seed=7";
    mlx_sys::exactness_write_checkpoint(spec, &file).unwrap();
    let seeded = mlx_sys::exactness_probe(spec).unwrap();
    let loaded =
        mlx_sys::exactness_probe(&format!("{spec};checkpoint={}", file.display())).unwrap();
    assert!(loaded.contains("\"preset\":\"checkpoint\""), "{loaded}");
    assert_eq!(field(&loaded, "\"decoded\""), field(&seeded, "\"decoded\""));
    assert_eq!(field(&loaded, "\"blocks\""), field(&seeded, "\"blocks\""));
    // The digests too: the loaded weights give the seeded model's keys, values and logits.
    for key in ["\"prefill_kv\"", "\"decode_logits\""] {
        assert_eq!(field(&loaded, key), field(&seeded, key), "{key}");
    }
    let e = mlx_sys::exactness_probe(&format!(
        "preset=small;layers=3;ops=0;checkpoint={}",
        file.display()
    ))
    .unwrap_err();
    assert!(
        e.message()
            .contains("no tensor 'model.layers.2.input_layernorm.weight'"),
        "{}",
        e.message()
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `only=` runs the named ops of the table and no other; `timing=R` adds the decoder's timed
/// forwards at k = 1, 4, 8, 16 (those up to k_max), on token ids in device memory unless
/// `tokens=host`; another `tokens` value is an error naming it.
#[test]
fn only_and_timing_shape_the_report() {
    let spec =
        "preset=small;layers=1;prompt=4;k_max=4;t_max=2;seeds=1;only=rope,kv_concat;timing=1";
    let json = mlx_sys::exactness_probe(spec).unwrap();
    assert_eq!(count(&json, "\"op\":\"rope\""), 3, "{json}");
    assert_eq!(count(&json, "\"op\":\"kv_concat\""), 3, "{json}");
    assert_eq!(count(&json, "\"op\":\"quantized_matmul\""), 0, "{json}");
    for tokens in ["device", "host"] {
        let json = match tokens {
            "device" => json.clone(),
            _ => mlx_sys::exactness_probe(&format!("{spec};ops=0;tokens={tokens}")).unwrap(),
        };
        let key = format!("\"timing\":{{\"reps\":1,\"tokens\":\"{tokens}\",\"rows\":[");
        let timing = field(&json, &key);
        assert_eq!(count(timing, "\"forward_ms\":"), 2, "{timing}");
        assert!(
            timing.contains("{\"k\":1,") && timing.contains("{\"k\":4,"),
            "{timing}"
        );
        assert!(!timing.contains("\"forward_ms\":0,"), "{timing}");
    }
    let e = mlx_sys::exactness_probe(&format!("{spec};tokens=gpu")).unwrap_err();
    assert!(
        e.message()
            .contains("tokens must be device or host, got 'gpu'"),
        "{}",
        e.message()
    );
}
